// ds41/core/sinkhorn.hpp — hc_split_sinkhorn: split one row of hc mixes into pre / post / comb,
// with comb made (nearly) doubly stochastic; all float32 (shim C7).
#pragma once
#include "activation.hpp"
#include "torch_math.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

/// mixes: [(2+hc)·hc] = [pre(hc) | post(hc) | comb(hc×hc row-major)]; scale: [3]; base like mixes.
/// comb[i·hc + j]: i = source copy, j = destination. Columns sum to 1 (up to eps) on return.
/// Row t of T: the reference evaluates the sigmoids over [T, hc] and the exps over [T, hc, hc]
/// tensors, which decides each element's exp path (torch_math.hpp).
DS41_HD void hc_split_sinkhorn(const float* mixes, const float* scale, const float* base, int hc,
                               int iters, float eps, float* pre, float* post, float* comb, long t = 0,
                               long T = 1) {
  const long n_pre = T * hc;  // the comb exps are torch.exp (VML): position-independent
  for (int i = 0; i < hc; ++i) pre[i] = torch_sigmoid(mixes[i] * scale[0] + base[i], t * hc + i, n_pre) + eps;
  for (int i = 0; i < hc; ++i)
    post[i] = 2.0f * torch_sigmoid(mixes[hc + i] * scale[1] + base[hc + i], t * hc + i, n_pre);
  const float* m = mixes + 2 * hc;
  const float* b = base + 2 * hc;
  for (int i = 0; i < hc; ++i) {  // row softmax + eps
    float mx = -INFINITY;
    for (int j = 0; j < hc; ++j) {
      comb[i * hc + j] = m[i * hc + j] * scale[2] + b[i * hc + j];
      mx = fmaxf(mx, comb[i * hc + j]);
    }
    float sum = 0.0f;
    for (int j = 0; j < hc; ++j) {
      comb[i * hc + j] = exp_sleef_u10(comb[i * hc + j] - mx);  // torch.exp: vml, vector path throughout
      sum += comb[i * hc + j];
    }
    for (int j = 0; j < hc; ++j) comb[i * hc + j] = comb[i * hc + j] / sum + eps;
  }
  auto col_norm = [&]() {
    for (int j = 0; j < hc; ++j) {
      float s = 0.0f;
      for (int i = 0; i < hc; ++i) s += comb[i * hc + j];
      for (int i = 0; i < hc; ++i) comb[i * hc + j] = comb[i * hc + j] / (s + eps);
    }
  };
  auto row_norm = [&]() {
    for (int i = 0; i < hc; ++i) {
      float s = 0.0f;
      for (int j = 0; j < hc; ++j) s += comb[i * hc + j];
      for (int j = 0; j < hc; ++j) comb[i * hc + j] = comb[i * hc + j] / (s + eps);
    }
  };
  col_norm();
  for (int it = 1; it < iters; ++it) {
    row_norm();
    col_norm();
  }
}

}  // namespace ds41
#include "fp_exact_end.hpp"
