// ds41/core/rope.hpp — rotary embedding: frequency tables (plain and YaRN) and the rotation of
// interleaved pairs (2k, 2k+1) of the last rope dims, as the reference's apply_rotary_emb.
#pragma once
#include <cmath>
#include <vector>
#include "numeric.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

struct RopeParams {
  int rope_dim = 0;           // rd: rotated dims (pairs = rd / 2)
  double base = 10000.0;      // theta
  long original_seq_len = 0;  // > 0 turns YaRN on
  double factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
};

/// Per-pair frequencies f_k (float32), YaRN-corrected when original_seq_len > 0 — the
/// reference's precompute_freqs_cis before the outer product with positions.
inline std::vector<float> rope_frequencies(const RopeParams& p) {
  const int half = p.rope_dim / 2;
  std::vector<float> f(half);
  for (int k = 0; k < half; ++k) {
    float e = static_cast<float>(2 * k) / static_cast<float>(p.rope_dim);  // arange(0,rd,2)/rd in f32
    float powv = static_cast<float>(std::pow(static_cast<double>(static_cast<float>(p.base)), static_cast<double>(e)));
    f[k] = 1.0f / powv;
  }
  if (p.original_seq_len > 0) {
    auto corrected_dim = [&](double rotations) {
      return p.rope_dim * std::log(static_cast<double>(p.original_seq_len) / (rotations * 2 * M_PI)) /
             (2 * std::log(p.base));
    };
    double low = std::max(std::floor(corrected_dim(p.beta_fast)), 0.0);
    double high = std::min(std::ceil(corrected_dim(p.beta_slow)), static_cast<double>(p.rope_dim - 1));
    float denom = static_cast<float>(std::max(high - low, 1e-3));
    float lowf = static_cast<float>(low), factor = static_cast<float>(p.factor);
    for (int k = 0; k < half; ++k) {
      float ramp = (static_cast<float>(k) - lowf) / denom;
      ramp = std::fmin(std::fmax(ramp, 0.0f), 1.0f);
      float smooth = 1.0f - ramp;
      f[k] = f[k] / factor * (1.0f - smooth) + f[k] * smooth;
    }
  }
  return f;
}

/// cos/sin of angle f32(pos · f_k) for positions [0, n_pos), laid out [pos][k] (cos) and
/// [pos][k] (sin) in two arrays. torch.polar evaluates the C library's float cosf/sinf on every
/// element (no vector path), so the table calls them too: glibc's are not correctly rounded
/// (< 0.56 ulp), and a double cos rounded to float differs from them in ~0.5% of a V4.1 table's
/// entries (64 rope dims, 1024 positions), enough to move a bf16 rounding of the inverse RoPE in
/// one attention output in 10^5 (ds41_mid). The table is built on the host and uploaded, so the
/// device reads the same values.
inline void rope_table(const std::vector<float>& freqs, long n_pos, std::vector<float>& cos_t,
                       std::vector<float>& sin_t) {
  const size_t half = freqs.size();
  cos_t.resize(n_pos * half);
  sin_t.resize(n_pos * half);
  for (long p = 0; p < n_pos; ++p)
    for (size_t k = 0; k < half; ++k) {
      float angle = static_cast<float>(p) * freqs[k];
      cos_t[p * half + k] = ::cosf(angle);
      sin_t[p * half + k] = ::sinf(angle);
    }
}

/// Rotate the interleaved pairs of `x[0 .. 2*half)` by (c, s) (or its conjugate), in float32, and
/// round to bf16 — one complex multiplication per pair, as torch does it.
DS41_HD void rope_rotate(float* x, const float* c, const float* s, int half, bool inverse) {
  for (int k = 0; k < half; ++k) {
    float a = x[2 * k], b = x[2 * k + 1];
    float ck = c[k], sk = inverse ? -s[k] : s[k];
    float re = a * ck - b * sk;
    float im = a * sk + b * ck;
    x[2 * k] = bf16_round(re);
    x[2 * k + 1] = bf16_round(im);
  }
}

}  // namespace ds41
#include "fp_exact_end.hpp"
