// ds41/backend/host/prefetch_l2.hpp — asking for a short stream's bytes in L2 before a host kernel
// reads them.
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#if defined(DS41_HOST_AVX2)
#include <immintrin.h>
#include <cstdint>

// Always inlined, and so must be every ds41 function whose only effects are these prefetches:
// GCC 12 finds such a function free of effects and deletes a call of it that it did not inline
// (seen: the GGUF decode GEMV's first prefetch helpers compiled to nothing, and a plain `inline`
// one called from outside its optimize region, fp_exact_begin.hpp, is never inlined). Inside the
// region like every ds41 header, so that its callers' options and its own agree.
#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_prefetch {

/// Asks for every line holding bytes [p, p + bytes) in L2. Why: a panel is a short stream (8 rows
/// x K bytes, 5 KiB for a 1280-column fp4 matrix), and the hardware prefetcher, which learns each
/// stream anew, then leaves the start of every panel to demand misses; one core reading a
/// 32768 x 1280 fp8 or fp4 matrix went from ~9.5 to ~12 GB/s with this a tile ahead of use
/// (host/gemv_panels.hpp). The GGUF decode GEMV asks for its panels' segment at its start and for
/// its row tiles' next blocks (host/gemv_ggml.hpp). The address is taken as an integer: callers
/// ask past the end of a matrix, where a prefetch never faults and no C++ pointer may point.
DS41_ALWAYS_INLINE void prefetch_l2(uintptr_t p, long bytes) {
  if (bytes <= 0) return;
  const uintptr_t end = p + static_cast<uintptr_t>(bytes);
  for (uintptr_t at = p & ~uintptr_t{63}; at < end; at += 64) _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T1);
}
DS41_ALWAYS_INLINE void prefetch_l2(const void* p, long bytes) { prefetch_l2(reinterpret_cast<uintptr_t>(p), bytes); }

}  // namespace ds41::host_prefetch
#include "../../core/fp_exact_end.hpp"
#endif
