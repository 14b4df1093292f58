// ds41/backend/host/unrolled.hpp — a host kernel's loop over a few compile-time steps, unrolled.
#pragma once
#include <type_traits>
#include <utility>
#include "../../core/macros.hpp"

namespace ds41 {

/// f(integral_constant<int, J>) for J = 0 .. N-1, unrolled (so that shifts and table offsets that
/// depend on J are constants).
template <int N, class F>
DS41_ALWAYS_INLINE void unrolled(F&& f) {
  [&]<int... J>(std::integer_sequence<int, J...>) DS41_LAMBDA_INLINE { (f(std::integral_constant<int, J>{}), ...); }(
      std::make_integer_sequence<int, N>{});
}

}  // namespace ds41
