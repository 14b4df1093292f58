// ds41/core/macros.hpp — host/device annotation used by every piece of shared math.
#pragma once

#if defined(__CUDACC__)
#define DS41_HD __host__ __device__ inline
#define DS41_LAMBDA __host__ __device__
#else
#define DS41_HD inline
#define DS41_LAMBDA
#endif

// DS41_HD_OUTLINED: a DS41_HD function that the device compiler keeps out of line: the GGUF block
// decoders' dispatch over every type, which each of the many kernels reaching MatrixView::at or
// ::dot otherwise inlined whole (nvcc's PTX of test_golden_cuda.cu was 374k lines, a third of it
// four copies of one attention lambda). The host inlines it as before.
#if defined(__CUDA_ARCH__)
#define DS41_HD_OUTLINED __host__ __device__ inline __attribute__((noinline))
#else
#define DS41_HD_OUTLINED DS41_HD
#endif

/// The host's AVX2 fast paths: compiled where the translation unit has AVX2 and FMA (x86-64-v3;
/// GCC's -mavx2 or -mavx512f alone do not enable FMA), never in nvcc's device pass. Without them
/// every kernel takes its scalar form, the same bits.
#if defined(__AVX2__) && defined(__FMA__) && !defined(__CUDA_ARCH__)
#define DS41_HOST_AVX2 1
#endif

#if defined(__CUDA_ARCH__)
#define DS41_DEVICE_CODE 1
#else
#define DS41_DEVICE_CODE 0
#endif

// A host kernel's helper inlined whatever the compiler's size limits say (its accumulators must
// stay in the caller's registers).
// DS41_LAMBDA_INLINE is the same for a lambda (after its parameter list): an unrolling helper's
// lambdas left out of line took the decode GEMV's accumulators through memory at every call.
#if defined(__GNUC__)
#define DS41_ALWAYS_INLINE inline __attribute__((always_inline))
#define DS41_LAMBDA_INLINE __attribute__((always_inline))
#else
#define DS41_ALWAYS_INLINE inline
#define DS41_LAMBDA_INLINE
#endif

// DS41_UNROLL: a host kernel's loop over its register-held vectors (accumulators, decoded columns,
// a tile's rows) unrolled at any optimisation level: GCC's -O2 keeps such a loop rolled and the
// vectors in memory, and an engine building at -O2 (RelWithDebInfo) got the Linears 1.6-2.6x
// slower than at -O3 for that alone (docs/PERFORMANCE.md, session 34). Not in nvcc's passes,
// which warn on the pragma in host code and compile no host kernel that needs it.
// Sanitizer builds leave it out: forced unrolling under AddressSanitizer's instrumentation took
// Clang 14 at -O1 from 55 s to 775 s on one test file (CI's sanitizer leg), and a sanitizer build
// is not about speed.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DS41_SANITIZED_BUILD 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define DS41_SANITIZED_BUILD 1
#endif
#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(DS41_SANITIZED_BUILD)
#define DS41_UNROLL _Pragma("GCC unroll 16")
#else
#define DS41_UNROLL
#endif
