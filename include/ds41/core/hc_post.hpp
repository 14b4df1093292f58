// ds41/core/hc_post.hpp — one element of the mHC highway's post-expansion (M: hc_post), the
// formula both backends' expand_post give the bits of (CudaBackend one thread per element,
// HostBackend in row stretches that vectorise: backend/host/rows.hpp).
#pragma once
#include "macros.hpp"
#include "numeric.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

/// out[t, j, d] = bf16(post[t, j]·x[t, d] + Σ_i comb[t, i, j]·res[t, i, d]), the sum over the
/// FIRST comb index (the reference's transposition) in order i = 0..hc-1 from 0.
DS41_HD float hc_post_element(const float* x, const float* res, const float* post, const float* comb, long t, int j,
                              long d, int hc, int dim) {
  float acc = 0.0f;
  for (int i = 0; i < hc; ++i) acc += comb[(t * hc + i) * hc + j] * res[(t * hc + i) * dim + d];
  return bf16_round(post[t * hc + j] * x[t * dim + d] + acc);
}

}  // namespace ds41
#include "fp_exact_end.hpp"
