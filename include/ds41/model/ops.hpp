// ds41/model/ops.hpp — row-wise operations every component uses, expressed once over the backend's
// for_each and the shared DS41_HD math (RMSNorm, RoPE, quant round trips).
#pragma once
#include "../core/activation.hpp"
#include "../core/quant.hpp"
#include "../core/rope.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

template <class B>
struct Ops {
  /// In-place RMSNorm of `rows` rows of length n (stride n).
  static void rmsnorm(float* x, long rows, int n, const float* w, float eps) {
    B::for_each(rows, [=] DS41_LAMBDA(long r) { rmsnorm_row(x + r * n, w, x + r * n, n, eps); });
  }

  /// RoPE on the last `rd` dims of rows of length `row_len`. Row r sits at position
  /// pos0 + (r / rows_per_pos) * pos_step; cos/sin tables are [position][rd/2].
  static void rope(float* x, long rows, int row_len, int rd, long rows_per_pos, long pos0, long pos_step,
                   const float* cos_t, const float* sin_t, bool inverse) {
    const int half = rd / 2;
    B::for_each(rows, [=] DS41_LAMBDA(long r) {
      long pos = pos0 + (r / rows_per_pos) * pos_step;
      rope_rotate(x + r * row_len + (row_len - rd), cos_t + pos * half, sin_t + pos * half, half, inverse);
    });
  }

  /// RoPE as rope(), row r at position pos[r / rows_per_pos] (pos: backend memory): the rows of a
  /// batched step, each at its own sequence's position.
  static void rope_at(float* x, long rows, int row_len, int rd, long rows_per_pos, const long* pos,
                      const float* cos_t, const float* sin_t, bool inverse) {
    const int half = rd / 2;
    B::for_each(rows, [=] DS41_LAMBDA(long r) {
      const long p = pos[r / rows_per_pos];
      rope_rotate(x + r * row_len + (row_len - rd), cos_t + p * half, sin_t + p * half, half, inverse);
    });
  }

  /// A quantise-dequantise round trip over blocks of each row.
  static void roundtrip(float* x, long rows, int n, int block, RoundTrip kind) {
    B::for_each(rows, [=] DS41_LAMBDA(long r) { roundtrip_row(x + r * n, n, block, kind); });
  }
};

/// Backend-resident cos/sin tables of one RoPE variant, for positions [0, n_pos).
template <class B>
struct RopeTables {
  typename B::template Buffer<float> cos_t, sin_t;
  int rd = 0;
  long n_pos = 0;

  RopeTables() = default;
  RopeTables(const RopeParams& p, long positions) : rd(p.rope_dim), n_pos(positions) {
    std::vector<float> c, s;
    rope_table(rope_frequencies(p), positions, c, s);
    cos_t = B::template alloc<float>(c.size());
    sin_t = B::template alloc<float>(s.size());
    B::upload(cos_t.data(), c.data(), c.size());
    B::upload(sin_t.data(), s.data(), s.size());
  }
};

/// The positions of a step's rows: one sequence's start, start + 1, ..., or (`at`, backend
/// memory) each row its own, the rows of a batched decode step being different sequences'.
template <class B>
struct RowPositions {
  long start = 0;
  const long* at = nullptr;

  /// RoPE on rows [T, heads, row_len] (the last rd dims of each head), row t at its position.
  void rope(float* x, long T, int heads, int row_len, int rd, const RopeTables<B>& t, bool inverse) const {
    if (at) Ops<B>::rope_at(x, T * heads, row_len, rd, heads, at, t.cos_t.data(), t.sin_t.data(), inverse);
    else Ops<B>::rope(x, T * heads, row_len, rd, heads, start, 1, t.cos_t.data(), t.sin_t.data(), inverse);
  }
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
