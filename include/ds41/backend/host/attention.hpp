// ds41/backend/host/attention.hpp — sparse attention for several query heads that share one
// index list (every head of a token does), on the host: the bits of one sparse_attn_head call per
// head (attention_math.hpp), with each gathered 64-row block read once for all of the heads.
//
// Why: sparse_attn_head gathers and transposes the block's rows for every head, so a decode
// token with 64 heads over 640 keys read 64 x 1.3 MB of rows (from L3; a block is 128 KiB) and
// spent its score loop on the transposes' shuffles. Here a block is gathered once per call into
// two scratch layouts that stay in L1 while the heads take turns on them:
//   kt: the block's keys transposed, kt[d][64 keys], read 64 d at a time (16 KiB): the scores
//       of 32 keys and two heads are 8 vectors of independent sums, each advancing in d order;
//   vb: the values in 32-wide slices of D, vb[slice][key][32]: two heads' 32 output elements are
//       8 vectors of independent sums, each advancing in key order.
// Every score and every output element is still one sum in the reference's order (q·k over d,
// Σ bf16(p)·v over the block's unmasked keys in index order, each product rounded before its
// add: fused only where it is exact, attn_host512), and the softmax step is the shared
// attn_block_softmax, so the bits are sparse_attn_head's.
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#include <algorithm>
#include <type_traits>
#include "../../core/attention_math.hpp"
#include "../../core/simd_avx2.hpp"
#include "bf16_range512.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41 {

/// Heads per work item in CompressedAttnT's host path: one item per thread in a decode step (one
/// token), between 4 and 32 heads (each item gathers the rows again: 1.3 MB at 640 keys). 64 heads
/// on 2 threads: 2 items of 32 ran 1.29-1.36 ms against 1.38-1.40 ms for 4 of 16 (3 alternating runs).
inline int attn_heads_per_item(int heads, int threads) {
  return std::clamp((heads + threads - 1) / std::max(threads, 1), 4, 32);
}

#if defined(DS41_HOST_AVX2)
namespace attn_host {

constexpr int kScoreSlice = 64;  // d per pass over kt: 64 keys x 64 d = 16 KiB
constexpr int kValueSlice = 32;  // d per vb slice: 64 keys x 32 d = 8 KiB

/// The scratch of one call, carved from the caller's floats (64-byte aligned, every part a
/// multiple of 16 floats so each stays aligned): kt, vb, the heads' scores then probabilities
/// (H x 64), and their running max, denominator and alpha.
struct Scratch {
  float *kt, *vb, *s, *m, *den, *alpha;
  static size_t kt_floats(int D) { return static_cast<size_t>(D) * kAttnBlock; }
  static size_t vb_floats(int D) {
    return static_cast<size_t>((D + kValueSlice - 1) / kValueSlice) * kValueSlice * kAttnBlock;
  }
  static size_t head_floats(int H) { return static_cast<size_t>((H + 15) / 16 * 16); }
  static size_t floats(int D, int H) { return kt_floats(D) + vb_floats(D) + (kAttnBlock + 3) * head_floats(H); }
  Scratch(float* p, int D, int H)
      : kt(p), vb(kt + kt_floats(D)), s(vb + vb_floats(D)), m(s + kAttnBlock * head_floats(H)),
        den(m + head_floats(H)), alpha(den + head_floats(H)) {}
};

/// kt[d][j] and vb from the block's nu unmasked rows (row pointers in `row`), each row read once:
/// 8 rows x 8 d at a time go to vb as they are and to kt transposed. kt's keys from nu up to the
/// next multiple of 32 are zero (score_heads computes their sums, which are never read; a zero
/// keeps them free of slow subnormal operands), and so are vb's d beyond D.
inline void gather_block(const float* const* row, int nu, int D, float* kt, float* vb) {
  const int keys = std::min(kAttnBlock, (nu + 31) / 32 * 32);
  const auto vb_at = [&](int j, int d) {
    return vb + (static_cast<size_t>(d / kValueSlice) * kAttnBlock + j) * kValueSlice + d % kValueSlice;
  };
  const int d_vec = D / 8 * 8;
  for (int j0 = 0; j0 < keys; j0 += 8) {
    for (int d0 = 0; d0 < d_vec; d0 += 8) {
      __m256 c[8];
      DS41_UNROLL for (int j = 0; j < 8; ++j) {
        c[j] = _mm256_setzero_ps();
        if (j0 + j < nu) _mm256_store_ps(vb_at(j0 + j, d0), c[j] = _mm256_loadu_ps(row[j0 + j] + d0));
      }
      avx2::transpose8(c);  // c[i] lane j = key j0 + j at d0 + i
      DS41_UNROLL for (int i = 0; i < 8; ++i) _mm256_store_ps(kt + static_cast<size_t>(d0 + i) * kAttnBlock + j0, c[i]);
    }
    for (int d = d_vec; d < D; ++d)  // D's tail past a multiple of 8
      for (int j = j0; j < j0 + 8; ++j) {
        kt[static_cast<size_t>(d) * kAttnBlock + j] = j < nu ? row[j][d] : 0.0f;
        if (j < nu) *vb_at(j, d) = row[j][d];
      }
    if (D % kValueSlice)  // vb's last slice past D
      for (int j = j0; j < j0 + 8 && j < nu; ++j) std::fill(vb_at(j, D), vb_at(j, D) + kValueSlice - D % kValueSlice, 0.0f);
  }
}

/// dots[h][j] (j < 8·ceil(nu/8), HS heads from q_h with stride D, their rows of `dots` 64 apart)
/// = Σ_d q_h[d]·key_j[d] in d order: per 64-d slice, 32 keys x HS heads at a time, the partial
/// sums parked in `dots` between slices (a stored float is the same float).
template <int HS>
inline void score_heads(const float* q, int D, const float* kt, int nu, float* dots) {
  const int key_vectors = (nu + 7) / 8;
  DS41_UNROLL for (int h = 0; h < HS; ++h)
    for (int j = 0; j < kAttnBlock; ++j) dots[h * kAttnBlock + j] = 0.0f;
  for (int d0 = 0; d0 < D; d0 += kScoreSlice) {
    const int dn = std::min(kScoreSlice, D - d0);
    const float* slice = kt + static_cast<size_t>(d0) * kAttnBlock;
    for (int v0 = 0; v0 < key_vectors; v0 += 4) {
      __m256 acc[HS][4];
      DS41_UNROLL for (int h = 0; h < HS; ++h)
        DS41_UNROLL for (int u = 0; u < 4; ++u) acc[h][u] = _mm256_loadu_ps(dots + h * kAttnBlock + 8 * (v0 + u));
      for (int d = 0; d < dn; ++d) {
        const float* kd = slice + d * kAttnBlock + 8 * v0;
        __m256 qd[HS];
        DS41_UNROLL for (int h = 0; h < HS; ++h) qd[h] = _mm256_broadcast_ss(q + static_cast<long>(h) * D + d0 + d);
        DS41_UNROLL for (int u = 0; u < 4; ++u) {
          const __m256 k = _mm256_load_ps(kd + 8 * u);
          DS41_UNROLL for (int h = 0; h < HS; ++h) acc[h][u] = _mm256_add_ps(acc[h][u], _mm256_mul_ps(qd[h], k));
        }
      }
      DS41_UNROLL for (int h = 0; h < HS; ++h)
        DS41_UNROLL for (int u = 0; u < 4; ++u) _mm256_storeu_ps(dots + h * kAttnBlock + 8 * (v0 + u), acc[h][u]);
    }
  }
}

/// out_h[d] = out_h[d]·alpha_h + Σ_j p_h[j]·v_j[d] (j over the nu unmasked keys in index order)
/// for HS heads, one 32-wide slice of D at a time.
template <int HS>
inline void value_heads(const float* p, const float* alpha, int D, const float* vb, int nu, float* out) {
  for (int d0 = 0; d0 < D; d0 += kValueSlice) {
    const float* slice = vb + static_cast<size_t>(d0 / kValueSlice) * kAttnBlock * kValueSlice;
    __m256 acc[HS][4];
#pragma GCC unroll 8
    for (int i = 0; i < HS * 4; ++i) acc[i / 4][i % 4] = _mm256_setzero_ps();
    for (int j = 0; j < nu; ++j) {
      __m256 pj[HS];
#pragma GCC unroll 4
      for (int h = 0; h < HS; ++h) pj[h] = _mm256_broadcast_ss(p + h * kAttnBlock + j);
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) {
        const __m256 v = _mm256_load_ps(slice + j * kValueSlice + 8 * u);
#pragma GCC unroll 4
        for (int h = 0; h < HS; ++h) acc[h][u] = _mm256_add_ps(acc[h][u], _mm256_mul_ps(pj[h], v));
      }
    }
    if (d0 + kValueSlice <= D) {
#pragma GCC unroll 8
      for (int i = 0; i < HS * 4; ++i) {
        float* o = out + static_cast<long>(i / 4) * D + d0 + 8 * (i % 4);
        _mm256_storeu_ps(o, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(o), _mm256_set1_ps(alpha[i / 4])), acc[i / 4][i % 4]));
      }
    } else {  // the last, part-filled slice
      alignas(32) float blk[HS][kValueSlice];
#pragma GCC unroll 8
      for (int i = 0; i < HS * 4; ++i) _mm256_store_ps(blk[i / 4] + 8 * (i % 4), acc[i / 4][i % 4]);
      DS41_UNROLL for (int h = 0; h < HS; ++h) {
        float* o = out + static_cast<long>(h) * D + d0;
        for (int d = 0; d < D - d0; ++d) o[d] = o[d] * alpha[h] + blk[h][d];
      }
    }
  }
}

}  // namespace attn_host

#if defined(DS41_HOST_AVX512)
// The same sums on 16 lanes (keys for the scores, d for the values), each lane still one sum in
// the reference's order. kFused: each product and its add as one fused multiply-add, taken only
// where host_exact says every product of the block is exact (q and the keys, bf16(p) and the
// values: all bf16 numbers in the reference), so the bits are the multiply-then-add ones. Why:
// per multiply-add the AVX2 loops issue a multiply and an add on 8 lanes; these one instruction
// on 16 (bench_kernels BM_SparseAttentionSinkHeads; docs/PERFORMANCE.md).
namespace attn_host512 {

/// dots[h][0 .. 16·NV) += Σ over the slice's dn d of q_h[d]·key[d] (HS heads from q, stride D; kt
/// the slice's rows of 64 keys): AVX2 score_heads' pass over one 64-d slice.
template <int HS, int NV, bool kFused>
inline void score_slice(const float* q, int D, const float* kt, int dn, float* dots) {
  __m512 acc[HS][NV];
  DS41_UNROLL for (int h = 0; h < HS; ++h)
    DS41_UNROLL for (int u = 0; u < NV; ++u) acc[h][u] = _mm512_load_ps(dots + h * kAttnBlock + 16 * u);
  for (int d = 0; d < dn; ++d) {
    __m512 k[NV];
    DS41_UNROLL for (int u = 0; u < NV; ++u) k[u] = _mm512_load_ps(kt + static_cast<size_t>(d) * kAttnBlock + 16 * u);
    DS41_UNROLL for (int h = 0; h < HS; ++h) {
      const __m512 qd = _mm512_set1_ps(q[static_cast<long>(h) * D + d]);
      DS41_UNROLL for (int u = 0; u < NV; ++u)
        acc[h][u] = kFused ? _mm512_fmadd_ps(qd, k[u], acc[h][u]) : _mm512_add_ps(acc[h][u], _mm512_mul_ps(qd, k[u]));
    }
  }
  DS41_UNROLL for (int h = 0; h < HS; ++h)
    DS41_UNROLL for (int u = 0; u < NV; ++u) _mm512_store_ps(dots + h * kAttnBlock + 16 * u, acc[h][u]);
}

/// dots[h][j] (j < 16·ceil(nu/16), H heads, rows of dots 64 apart) = Σ_d q_h[d]·key_j[d] in d
/// order: per 64-d slice (16 KiB of kt, in L1 while every head passes), 4 heads at a time.
template <bool kFused>
inline void score_heads(const float* q, int H, int D, const float* kt, int nu, float* dots) {
  const int nv = (nu + 15) / 16;  // kt's keys past nu are zero up to a multiple of 32
  for (int i = 0; i < H * kAttnBlock; ++i) dots[i] = 0.0f;
  const auto pass = [&]<int HS>(std::integral_constant<int, HS>, const float* qh, const float* slice, int dn,
                                float* dh) {
    switch (nv) {
      case 0: return;  // a block whose keys are all masked: no score is read
      case 1: return score_slice<HS, 1, kFused>(qh, D, slice, dn, dh);
      case 2: return score_slice<HS, 2, kFused>(qh, D, slice, dn, dh);
      case 3: return score_slice<HS, 3, kFused>(qh, D, slice, dn, dh);
      default: return score_slice<HS, 4, kFused>(qh, D, slice, dn, dh);
    }
  };
  for (int d0 = 0; d0 < D; d0 += attn_host::kScoreSlice) {
    const int dn = std::min(attn_host::kScoreSlice, D - d0);
    const float* slice = kt + static_cast<size_t>(d0) * kAttnBlock;
    int h = 0;
    for (; h + 4 <= H; h += 4)
      pass(std::integral_constant<int, 4>{}, q + static_cast<long>(h) * D + d0, slice, dn, dots + h * kAttnBlock);
    for (; h < H; ++h)
      pass(std::integral_constant<int, 1>{}, q + static_cast<long>(h) * D + d0, slice, dn, dots + h * kAttnBlock);
  }
}

/// out_h[d] = out_h[d]·alpha_h + Σ_j p_h[j]·v_j[d] (j over the nu unmasked keys in index order)
/// for HS heads over NS of vb's 32-wide slices from slice s0 (AVX2 value_heads, 16 d a vector).
template <int HS, int NS, bool kFused>
inline void value_slices(const float* p, const float* alpha, int D, const float* vb, int nu, int s0, float* out) {
  constexpr int kSlice = attn_host::kValueSlice;
  const float* base = vb + static_cast<size_t>(s0) * kAttnBlock * kSlice;
  __m512 acc[HS][2 * NS];
  DS41_UNROLL for (int h = 0; h < HS; ++h)
    for (int i = 0; i < 2 * NS; ++i) acc[h][i] = _mm512_setzero_ps();
  for (int j = 0; j < nu; ++j) {
    __m512 v[2 * NS];
    for (int i = 0; i < 2 * NS; ++i)
      v[i] = _mm512_load_ps(base + (static_cast<size_t>(i / 2) * kAttnBlock + j) * kSlice + 16 * (i % 2));
    DS41_UNROLL for (int h = 0; h < HS; ++h) {
      const __m512 pj = _mm512_set1_ps(p[h * kAttnBlock + j]);
      for (int i = 0; i < 2 * NS; ++i)
        acc[h][i] = kFused ? _mm512_fmadd_ps(pj, v[i], acc[h][i]) : _mm512_add_ps(acc[h][i], _mm512_mul_ps(pj, v[i]));
    }
  }
  DS41_UNROLL for (int h = 0; h < HS; ++h) {
    const __m512 a = _mm512_set1_ps(alpha[h]);
    for (int i = 0; i < 2 * NS; ++i) {
      const int d = s0 * kSlice + 16 * i;
      float* o = out + static_cast<long>(h) * D + d;
      if (d + 16 <= D) {
        _mm512_storeu_ps(o, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(o), a), acc[h][i]));
      } else if (d < D) {  // the last, part-filled vector
        alignas(64) float blk[16];
        _mm512_store_ps(blk, acc[h][i]);
        for (int e = 0; e < D - d; ++e) o[e] = o[e] * alpha[h] + blk[e];
      }
    }
  }
}

/// value_slices over all of D for H heads: two slices (64 d) and 4 heads at a time.
template <bool kFused>
inline void value_heads(const float* p, const float* alpha, int H, int D, const float* vb, int nu, float* out) {
  const int slices = (D + attn_host::kValueSlice - 1) / attn_host::kValueSlice;
  const auto heads = [&]<int NS>(std::integral_constant<int, NS>, int s0) {
    int h = 0;
    for (; h + 4 <= H; h += 4)
      value_slices<4, NS, kFused>(p + h * kAttnBlock, alpha + h, D, vb, nu, s0, out + static_cast<long>(h) * D);
    for (; h < H; ++h)
      value_slices<1, NS, kFused>(p + h * kAttnBlock, alpha + h, D, vb, nu, s0, out + static_cast<long>(h) * D);
  };
  int s = 0;
  for (; s + 2 <= slices; s += 2) heads(std::integral_constant<int, 2>{}, s);
  if (s < slices) heads(std::integral_constant<int, 1>{}, s);
}

}  // namespace attn_host512
#endif
#endif

/// Floats of scratch sparse_attn_heads_host needs for H heads of D (0 without AVX2).
inline size_t attn_heads_scratch_floats(int D, int H) {
#if defined(DS41_HOST_AVX2)
  return attn_host::Scratch::floats(D, H);
#else
  (void)D, (void)H;
  return 0;
#endif
}

/// Heads [0, H) of one query, q [H][D] and out [H][D] (rows D apart), over the same index list
/// idx[n] into kv (rows kv_stride apart), head h with sink[h]: bit for bit H calls of
/// sparse_attn_head. `scratch`: attn_heads_scratch_floats(D, H) floats, 64-byte aligned. Host
/// only (the device runs a thread per head).
inline void sparse_attn_heads_host(const float* q, const float* kv, long kv_stride, const int* idx, int n, int D,
                                   int H, const float* sink, float scale, float* out, float* scratch) {
#if defined(DS41_HOST_AVX2)
  using namespace attn_host;
  const Scratch sc(scratch, D, H);
  std::fill(out, out + static_cast<long>(H) * D, 0.0f);  // the f32 accumulators
  std::fill(sc.m, sc.m + H, -1e30f);
  std::fill(sc.den, sc.den + H, 0.0f);
  const float* row[kAttnBlock];
  int rows[kAttnBlock];  // the block positions of the unmasked keys
#if defined(DS41_HOST_AVX512)
  host_exact::Bf16Range queries;  // every head's q
  host_exact::add_values(queries, q, static_cast<long>(H) * D);
#endif
  for (int b0 = 0; b0 < n; b0 += kAttnBlock) {
    const int bn = std::min(kAttnBlock, n - b0);
    int nu = 0;  // the block's unmasked keys, in index order
    for (int t = 0; t < bn; ++t)
      if (idx[b0 + t] >= 0) rows[nu] = t, row[nu++] = kv + static_cast<long>(idx[b0 + t]) * kv_stride;
    gather_block(row, nu, D, sc.kt, sc.vb);
    float* dots = sc.s;
    int h = 0;
#if defined(DS41_HOST_AVX512)
    host_exact::Bf16Range keys;  // the block's keys (= values)
    for (int j = 0; j < nu && keys.bf16; ++j) host_exact::add_values(keys, row[j], D);
    if (host_exact::products_exact(queries, keys))
      attn_host512::score_heads<true>(q, H, D, sc.kt, nu, dots);
    else
      attn_host512::score_heads<false>(q, H, D, sc.kt, nu, dots);
#else
    for (; h + 2 <= H; h += 2) score_heads<2>(q + static_cast<long>(h) * D, D, sc.kt, nu, dots + h * kAttnBlock);
    for (; h < H; ++h) score_heads<1>(q + static_cast<long>(h) * D, D, sc.kt, nu, dots + h * kAttnBlock);
#endif
    for (h = 0; h < H; ++h) {
      // scores to block positions (attn_block_softmax reads the unmasked ones), softmax, then
      // the probabilities back to the compact key order the value slices use
      float p[kAttnBlock] = {}, *dh = dots + h * kAttnBlock;
      for (int j = 0; j < nu; ++j) p[rows[j]] = dh[j] * scale;
      sc.alpha[h] = attn_block_softmax(p, idx + b0, bn, sc.m[h], sc.den[h]);
      for (int j = 0; j < nu; ++j) dh[j] = p[rows[j]];
    }
#if defined(DS41_HOST_AVX512)
    host_exact::Bf16Range probabilities;  // bf16(p): bf16 numbers in [0, 1]
    for (h = 0; h < H && probabilities.bf16; ++h) host_exact::add_values(probabilities, dots + h * kAttnBlock, nu);
    if (host_exact::products_exact(probabilities, keys))
      attn_host512::value_heads<true>(dots, sc.alpha, H, D, sc.vb, nu, out);
    else
      attn_host512::value_heads<false>(dots, sc.alpha, H, D, sc.vb, nu, out);
#else
    for (h = 0; h + 2 <= H; h += 2)
      value_heads<2>(dots + h * kAttnBlock, sc.alpha + h, D, sc.vb, nu, out + static_cast<long>(h) * D);
    for (; h < H; ++h) value_heads<1>(dots + h * kAttnBlock, sc.alpha + h, D, sc.vb, nu, out + static_cast<long>(h) * D);
#endif
  }
  DS41_UNROLL for (int h = 0; h < H; ++h) attn_finish(out + static_cast<long>(h) * D, D, sink[h], sc.m[h], sc.den[h]);
#else
  (void)scratch;
  DS41_UNROLL for (int h = 0; h < H; ++h)
    sparse_attn_head(q + static_cast<long>(h) * D, kv, kv_stride, idx, n, D, sink[h], scale, out + static_cast<long>(h) * D);
#endif
}

}  // namespace ds41
#include "../../core/fp_exact_end.hpp"
