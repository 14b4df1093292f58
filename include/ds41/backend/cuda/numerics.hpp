// ds41/backend/cuda/numerics.hpp — the device backend's numerics policies, chosen at compile time
// (CudaBackendT<Numerics>, cuda.hpp). Plain tags, usable from host-only code (tests, plans).
//
//  * ReferenceNumerics: every operation bit-identical to DeepSeek's reference and to the host
//    (docs/NUMERICS.md): each float32 sum in the reference's order, no fused multiply-add.
//  * FastNumerics: the same rounding points (act_quant's codes and block scales for fp8/fp4
//    weights, one output rounding per OutRound, float32 wherever the reference is float32), but
//    a Linear's sum may run in any order and fuse its multiply-adds (cuda/fast_linear.hpp). Its
//    results differ from the reference's by float32 reassociation, ~1e-6 relative per sum before
//    the output rounding; ds41-golden --numerics fast holds them to rel-L2 1e-2 (issue 24).
#pragma once

#include "../../core/fp_exact_begin.hpp"
namespace ds41 {

struct ReferenceNumerics {
  static constexpr const char* kName = "exact";
  static constexpr bool kReordersSums = false;
};

struct FastNumerics {
  static constexpr const char* kName = "fast";
  static constexpr bool kReordersSums = true;
};

}  // namespace ds41
#include "../../core/fp_exact_end.hpp"
