// ds41/core/fp_exact_begin.hpp — opens a region of ds41 code whose floating-point expressions the
// host compiler must not contract (a*b+c into one FMA). Deliberately without include guard or
// #pragma once: every ds41 header includes it after its own #includes and before its code, and
// closes the region with fp_exact_end.hpp, so nothing leaks into the includer's code and regions
// nest (a stack of saved states).
//
// Why: the reference rounds every multiply and every add on its own; one contracted a*b+c changes
// the last bit and the captures stop being bit-identical. The consumer's -ffp-contract (GCC's
// default is fast, Clang's on) must not decide that. What each compiler does (docs/NUMERICS.md,
// "Consumers: compiler flags"):
//  - GCC: the region's functions get optimize("fp-contract=off"); GCC honours it per function
//    whatever the command line says (template instantiations and lambdas defined here included).
//  - Clang: `#pragma clang fp contract(off)` inside float_control(push/pop). Honoured under Clang's
//    default -ffp-contract=on; under -ffp-contract=fast the backend fuses regardless of pragmas,
//    which cannot be confined: fp_exact.hpp's probe detects it and Model's constructor throws.
//  - Device code (nvcc's device pass) is not covered by pragmas: nvcc fuses per translation unit
//    (--fmad). CudaBackend's exact policy probes it at Model construction (backend/cuda.hpp) until
//    its arithmetic rounds each operation itself (fp_exact.hpp: mul_rn, add_rn, ...).
#if !defined(__CUDA_ARCH__)
#if defined(__clang__)
#pragma float_control(push)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
// nvcc's host pass hands the pragma on to the host compiler (GCC) but warns that it does not know
// it (#1675): silenced for these two lines only
#if defined(__CUDACC__)
#pragma nv_diagnostic push
#pragma nv_diag_suppress 1675
#endif
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#if defined(__CUDACC__)
#pragma nv_diagnostic pop
#endif
#endif
#endif
