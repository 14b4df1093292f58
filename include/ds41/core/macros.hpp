// ds41/core/macros.hpp — host/device annotation used by every piece of shared math.
#pragma once

#if defined(__CUDACC__)
#define DS41_HD __host__ __device__ inline
#define DS41_LAMBDA __host__ __device__
#else
#define DS41_HD inline
#define DS41_LAMBDA
#endif

#if defined(__CUDA_ARCH__)
#define DS41_DEVICE_CODE 1
#else
#define DS41_DEVICE_CODE 0
#endif

// A host kernel's helper inlined whatever the compiler's size limits say (its accumulators must
// stay in the caller's registers).
#if defined(__GNUC__)
#define DS41_ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define DS41_ALWAYS_INLINE inline
#endif
