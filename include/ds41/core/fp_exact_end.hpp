// ds41/core/fp_exact_end.hpp — closes the region fp_exact_begin.hpp opened: the includer's own
// floating-point settings (its -ffp-contract, its pragmas) apply again after a ds41 header.
// No include guard, on purpose (see fp_exact_begin.hpp).
#if !defined(__CUDA_ARCH__)
#if defined(__clang__)
#pragma float_control(pop)
#elif defined(__GNUC__)
#pragma GCC pop_options
#endif
#endif
