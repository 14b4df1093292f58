// ds41/io/gguf_quantize_iq.hpp — f32 values → ggml's IQ blocks (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS), for the writer (ds41-gguf-write --type) and the tests'
// tiny models of every type.
//
// Simple and deterministic like gguf_quantize.hpp's (no importance weights, no search over
// scales): a group's scale from its largest magnitude, then for each 8 (or 4) values the nearest
// grid point by brute force (core/ggml_grids.hpp), the signs from the values (made even by
// flipping the smallest where the type stores 7 sign bits), IQ1's shift sign by trying both, IQ4's
// codes the nearest table value. Any valid block serves the tests, whose oracle is the
// dequantized values (core/ggml_quants_iq.hpp) of whatever bytes are written; the quality is far
// below llama-quantize's. Layouts: ggml-common.h, as ggml_quants_iq.hpp reads them.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>
#include "../core/error.hpp"
#include "../core/ggml_quants.hpp"
#include "../core/macros.hpp"  // DS41_HOST_AVX2
#include "gguf_quantize_common.hpp"
#if defined(DS41_HOST_AVX2)
#include <immintrin.h>
#endif

#include "../core/fp_exact_begin.hpp"
namespace ds41::gguf {

namespace quant_detail {
/// The largest magnitude of x[0..n).
inline float amax(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}
/// A grid's points as indices into its few distinct byte values (3 for IQ1 and IQ2, 8 for IQ3),
/// made once per grid, in two forms for the two searches of least_cost_point:
///  - each half of a point (4 or 2 elements) as one base-`nvalues` number: the portable search
///    adds two entries of small tables of half-point errors per point (81 or 64 each) instead of
///    computing each point's N errors;
///  - a point's N indices, 4 bits each in one u32 (element j in bits 4j..4j+3): the AVX2 search
///    looks each element's cost up in a register (vpermps reads an index's low 3 bits), 8 points at
///    a time, with no memory gather.
struct GridTable {
  int nvalues = 0, half_patterns = 0;
  uint8_t values[16] = {};
  std::vector<uint16_t> half[2];  // point i's halves
  std::vector<uint8_t> digits;    // half pattern p's element j (of N/2) at p·N/2 + j: no divisions per search
  std::vector<uint32_t> packed;   // point i's N indices, 4 bits each
};
template <auto Point, int Points, int N>
const GridTable& grid_table() {
  static_assert(N <= 8, "a point's indices are packed 4 bits each in a u32");
  static const GridTable t = [] {
    GridTable g;
    g.packed.assign(Points, 0);
    std::vector<uint8_t> k(static_cast<size_t>(Points) * N);
    for (int i = 0; i < Points; ++i)
      for (int j = 0; j < N; ++j) {
        const uint8_t v = static_cast<uint8_t>((static_cast<uint64_t>(Point(i)) >> (8 * j)) & 0xFF);
        int c = 0;
        while (c < g.nvalues && g.values[c] != v) ++c;
        if (c == g.nvalues) g.values[g.nvalues++] = v;  // ggml's grids have 3 or 8 distinct bytes
        k[static_cast<size_t>(i) * N + j] = static_cast<uint8_t>(c);
        g.packed[i] |= static_cast<uint32_t>(c) << (4 * j);
      }
    g.half_patterns = 1;
    for (int j = 0; j < N / 2; ++j) g.half_patterns *= g.nvalues;
    g.digits.resize(static_cast<size_t>(g.half_patterns) * (N / 2));
    for (int p = 0; p < g.half_patterns; ++p)
      for (int j = 0, q = p; j < N / 2; ++j, q /= g.nvalues) g.digits[static_cast<size_t>(p) * (N / 2) + j] = static_cast<uint8_t>(q % g.nvalues);
    for (int h = 0; h < 2; ++h) {
      g.half[h].resize(Points);
      for (int i = 0; i < Points; ++i) {
        int p = 0;
        for (int j = N / 2 - 1; j >= 0; --j) p = p * g.nvalues + k[static_cast<size_t>(i) * N + h * (N / 2) + j];
        g.half[h][i] = static_cast<uint16_t>(p);
      }
    }
    return g;
  }();
  return t;
}
// What both searches give, the definition (test_gguf_types checks both against it): point i's
// cost is its two halves' sums added, each half summed element by element from 0
// ((((0 + c0) + c1) + c2) + c3 for N = 8); the result is the first point with the least cost
// (*err: that cost); index 0 and *err = ∞ when no cost is below ∞; a NaN cost is never the least.
// Each search computes every point's cost without a branch on the data, the least of them in
// running minima (`a < b ? a : b`: a NaN cost is passed over), then finds the first point with it.
// (The search before, one pass keeping the first least with a taken compare and a stored minimum
// per point, and a division per table entry: test_gguf_types + test_gguf_engram took 57 s with it,
// 23 s with the AVX2 search; session 43.)

/// The portable search, by half-point cost tables (two lookups a point).
template <int Points, int N>
int least_cost_point_by_halves(const GridTable& g, const float (*cost)[16], float* err) {
  DS41_CHECK(g.half_patterns <= 256, "gguf: a grid of ", g.nvalues, " values is too wide to search by halves");
  float half_cost[2][256];
  for (int h = 0; h < 2; ++h)
    for (int p = 0; p < g.half_patterns; ++p) {
      const uint8_t* d = g.digits.data() + static_cast<size_t>(p) * (N / 2);
      float e = 0;
      for (int j = 0; j < N / 2; ++j) e += cost[h * (N / 2) + j][d[j]];
      half_cost[h][p] = e;
    }
  static_assert(Points % 8 == 0);
  float sum[Points];
  const uint16_t* h0 = g.half[0].data();
  const uint16_t* h1 = g.half[1].data();
  for (int i = 0; i < Points; ++i) sum[i] = half_cost[0][h0[i]] + half_cost[1][h1[i]];
  float lane[8] = {INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY};
  for (int i = 0; i < Points; i += 8)
    for (int k = 0; k < 8; ++k) lane[k] = sum[i + k] < lane[k] ? sum[i + k] : lane[k];
  float least = INFINITY;
  for (float v : lane) least = v < least ? v : least;
  if (!(least < INFINITY)) {
    *err = INFINITY;
    return 0;
  }
  int i = 0;
  while (!(sum[i] == least)) ++i;  // stops: least is one of the costs
  *err = sum[i];
  return i;
}

#if defined(DS41_HOST_AVX2)
/// 8 points' sums over elements From..From+J (in that order, from 0) of c[j][index j of w]; the
/// fold unrolls the elements so that each shift has its count as an immediate (always inlined: the
/// test suites build at -O1, which called it).
template <int From, int... J>
DS41_ALWAYS_INLINE __m256 packed_half_cost(const __m256* c, __m256i w, std::integer_sequence<int, J...>) {
  __m256 e = _mm256_setzero_ps();
  ((e = _mm256_add_ps(e, _mm256_permutevar8x32_ps(c[From + J], _mm256_srli_epi32(w, 4 * (From + J))))), ...);
  return e;
}
/// The AVX2 search: element j's nvalues (≤ 8) costs in one register, 8 points' costs at a time by
/// one vpermps per element, no memory lookups (Zen 3, a 2048-point search: 1.2-1.9 µs, against 3.3
/// for the search by halves with its two lookups a point as two vgatherdps per 8 points; session 43).
template <int Points, int N>
int least_cost_point_avx2(const GridTable& g, const float (*cost)[16], float* err) {
  DS41_CHECK(g.nvalues <= 8, "gguf: a grid of ", g.nvalues, " values is too wide for one register");
  static_assert(Points % 8 == 0);
  __m256 c[N];
  for (int j = 0; j < N; ++j) c[j] = _mm256_loadu_ps(cost[j]);  // entries ≥ nvalues are never read
  alignas(32) float sum[Points];
  __m256 lanes = _mm256_set1_ps(INFINITY);
  for (int i = 0; i < Points; i += 8) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g.packed.data() + i));
    const __m256 v = _mm256_add_ps(packed_half_cost<0>(c, w, std::make_integer_sequence<int, N / 2>{}),
                                   packed_half_cost<N / 2>(c, w, std::make_integer_sequence<int, N / 2>{}));
    _mm256_store_ps(sum + i, v);
    lanes = _mm256_min_ps(v, lanes);  // minps: the second operand where either is NaN
  }
  alignas(32) float lane[8];
  _mm256_store_ps(lane, lanes);
  float least = INFINITY;
  for (float v : lane) least = v < least ? v : least;
  if (!(least < INFINITY)) {
    *err = INFINITY;
    return 0;
  }
  const __m256 target = _mm256_set1_ps(least);
  int i = 0;
  for (;; i += 8) {  // stops: least is one of the costs
    const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_load_ps(sum + i), target, _CMP_EQ_OQ));
    if (hit) {
      i += __builtin_ctz(static_cast<unsigned>(hit));
      break;
    }
  }
  *err = sum[i];
  return i;
}
#endif

/// The point with the least Σ_j cost[j][its value] as defined above (cost[j][k] for k < nvalues).
template <int Points, int N>
int least_cost_point(const GridTable& g, const float (*cost)[16], float* err) {
#if defined(DS41_HOST_AVX2)
  return least_cost_point_avx2<Points, N>(g, cost, err);
#else
  return least_cost_point_by_halves<Points, N>(g, cost, err);
#endif
}
/// The index of the point of a grid of magnitudes (Point(i): N bytes, element j in byte j) nearest
/// the magnitudes of y[0..N) at scale s: the least Σ (|y_j| − s·g_j)²; 0 when s is 0.
template <auto Point, int Points, int N>
int nearest_point(const float* y, float s) {
  if (!(s > 0)) return 0;
  const GridTable& g = grid_table<Point, Points, N>();
  float cost[N][16] = {};  // zero past nvalues: the AVX2 search loads 8 a row
  for (int j = 0; j < N; ++j)
    for (int k = 0; k < g.nvalues; ++k) {
      const float e = std::fabs(y[j]) - s * static_cast<float>(g.values[k]);
      cost[j][k] = e * e;
    }
  float err;
  return least_cost_point<Points, N>(g, cost, &err);
}
/// Bit j set where y[j] < 0 (j < 8).
inline unsigned sign_bits(const float* y) {
  unsigned s = 0;
  for (int j = 0; j < 8; ++j) s |= (y[j] < 0 ? 1u : 0u) << j;
  return s;
}
/// sign_bits with an even count of minus signs (ggml's ksigns_iq2xs stores 7 bits and the parity):
/// where the count is odd, the smallest magnitude's sign flips. Returns the 7 stored bits.
inline unsigned even_sign_index(const float* y) {
  unsigned s = sign_bits(y);
  int smallest = 0;
  for (int j = 1; j < 8; ++j)
    if (std::fabs(y[j]) < std::fabs(y[smallest])) smallest = j;
  if (__builtin_popcount(s) & 1) s ^= 1u << smallest;
  return s & 127u;
}
/// The d of a block whose groups' scales multiply d by (offset + s)·mul, s ≤ smax, to reach each
/// group's largest magnitude on a grid whose largest value is gmax: top / ((offset + smax)·mul).
inline uint16_t grid_d(const float* x, int groups, int group_len, float gmax, float offset, int smax, float mul) {
  float top = 0;
  for (int g = 0; g < groups; ++g) top = std::max(top, amax(x + group_len * g, group_len) / gmax);
  return f16_scale(top / ((offset + static_cast<float>(smax)) * mul));
}
/// The s ≤ smax whose (offset + s)·mul·d is nearest the group's largest magnitude over gmax.
inline int grid_scale(const float* y, int n, float gmax, float d, float offset, int smax, float mul) {
  return d > 0 ? clamp_round(amax(y, n) / gmax / (d * mul) - offset, 0, smax) : 0;
}
/// The IQ1 grid point nearest 8 values at dl with the shift `delta`: the least
/// Σ (y_j − dl·(g_j + delta))², which goes to *err; 0 (and no error) when dl is 0.
inline int iq1_nearest(const float* y, float dl, float delta, float* err) {
  *err = 0;
  if (!(dl > 0)) return 0;
  const GridTable& g = grid_table<iq1s_grid, 2048, 8>();
  float cost[8][16] = {};
  for (int j = 0; j < 8; ++j)
    for (int k = 0; k < g.nvalues; ++k) {
      const float e = y[j] - dl * (static_cast<float>(static_cast<int8_t>(g.values[k])) + delta);
      cost[j][k] = e * e;
    }
  return least_cost_point<2048, 8>(g, cost, err);
}
/// The code of the IQ4 value nearest v (a value over the scale).
inline int iq4_code(float v) {
  int best = 0;
  for (int k = 1; k < 16; ++k)
    if (std::fabs(v - static_cast<float>(kIq4nlValues[k])) < std::fabs(v - static_cast<float>(kIq4nlValues[best]))) best = k;
  return best;
}
}  // namespace quant_detail

inline void quantize_block_iq2_xxs(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 8, 32, 43.0f, 0.5f, 15, 0.25f);
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 66);
  put_f16(b, dh);
  for (int g = 0; g < 8; ++g) {
    const int s = grid_scale(x + 32 * g, 32, 43.0f, d, 0.5f, 15, 0.25f);
    const float db = d * (0.5f + static_cast<float>(s)) * 0.25f;  // as dequantize_block_iq2_xxs
    uint32_t aux = static_cast<uint32_t>(s) << 28;
    for (int l = 0; l < 4; ++l) {
      const float* y = x + 32 * g + 8 * l;
      b[2 + 8 * g + l] = static_cast<uint8_t>(nearest_point<iq2xxs_grid, 256, 8>(y, db));
      aux |= even_sign_index(y) << (7 * l);
    }
    for (int k = 0; k < 4; ++k) b[2 + 8 * g + 4 + k] = static_cast<uint8_t>(aux >> (8 * k));
  }
}

/// IQ2_XS and IQ2_S: two 4-bit scales a group of 32, one for each 16. IQ2_XS stores a u16 per 8
/// values (a 9-bit index into 512 points, 7 sign bits), IQ2_S a 10-bit index into 1024 points
/// (the low byte in qs, two bits in qh) and a whole sign byte.
inline void quantize_block_iq2_xs_or_s(const float* x, uint8_t* b, bool iq2_s) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 16, 16, 43.0f, 0.5f, 15, 0.25f);
  const float d = f16_to_f32(dh);
  const int scales = iq2_s ? 74 : 66;
  std::memset(b, 0, iq2_s ? 82 : 74);
  put_f16(b, dh);
  for (int g = 0; g < 8; ++g) {
    int s[2];
    for (int h = 0; h < 2; ++h) s[h] = grid_scale(x + 32 * g + 16 * h, 16, 43.0f, d, 0.5f, 15, 0.25f);
    b[scales + g] = static_cast<uint8_t>(s[0] | s[1] << 4);
    for (int l = 0; l < 4; ++l) {
      const float* y = x + 32 * g + 8 * l;
      const float db = d * (0.5f + static_cast<float>(s[l / 2])) * 0.25f;
      if (!iq2_s) {
        const uint32_t q = static_cast<uint32_t>(nearest_point<iq2xs_grid, 512, 8>(y, db)) | even_sign_index(y) << 9;
        put_f16(b + 2 + 2 * (4 * g + l), static_cast<uint16_t>(q));  // a u16, little-endian
        continue;
      }
      const int index = nearest_point<iq2s_grid, 1024, 8>(y, db);
      b[2 + 4 * g + l] = static_cast<uint8_t>(index & 0xFF);
      b[66 + g] |= static_cast<uint8_t>((index >> 8) << (2 * l));
      b[34 + 4 * g + l] = static_cast<uint8_t>(sign_bits(y));
    }
  }
}
inline void quantize_block_iq2_xs(const float* x, uint8_t* b) { quantize_block_iq2_xs_or_s(x, b, false); }
inline void quantize_block_iq2_s(const float* x, uint8_t* b) { quantize_block_iq2_xs_or_s(x, b, true); }

inline void quantize_block_iq3_xxs(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 8, 32, 62.0f, 0.5f, 15, 0.5f);
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 98);
  put_f16(b, dh);
  for (int g = 0; g < 8; ++g) {
    const int s = grid_scale(x + 32 * g, 32, 62.0f, d, 0.5f, 15, 0.5f);
    const float db = d * (0.5f + static_cast<float>(s)) * 0.5f;
    uint32_t aux = static_cast<uint32_t>(s) << 28;
    for (int l = 0; l < 4; ++l) {
      const float* y = x + 32 * g + 8 * l;
      for (int h = 0; h < 2; ++h) b[2 + 8 * g + 2 * l + h] = static_cast<uint8_t>(nearest_point<iq3xxs_grid, 256, 4>(y + 4 * h, db));
      aux |= even_sign_index(y) << (7 * l);
    }
    for (int k = 0; k < 4; ++k) b[66 + 4 * g + k] = static_cast<uint8_t>(aux >> (8 * k));
  }
}

inline void quantize_block_iq3_s(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 8, 32, 15.0f, 1.0f, 30, 1.0f);  // d·(1 + 2s): s = 15 is 31
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 110);
  put_f16(b, dh);
  for (int g = 0; g < 8; ++g) {
    const int s = d > 0 ? clamp_round((amax(x + 32 * g, 32) / 15.0f / d - 1.0f) / 2.0f, 0, 15) : 0;
    const float db = d * static_cast<float>(1 + 2 * s);
    b[106 + g / 2] |= static_cast<uint8_t>(s << (4 * (g % 2)));
    for (int k = 0; k < 8; ++k) {  // the group's 8 points of 4
      const int index = nearest_point<iq3s_grid, 512, 4>(x + 32 * g + 4 * k, db);
      b[2 + 8 * g + k] = static_cast<uint8_t>(index & 0xFF);
      b[66 + g] |= static_cast<uint8_t>((index >> 8) << k);
    }
    for (int l = 0; l < 4; ++l) b[74 + 4 * g + l] = static_cast<uint8_t>(sign_bits(x + 32 * g + 8 * l));
  }
}

inline void quantize_block_iq1_s(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 8, 32, 1.125f, 1.0f, 14, 1.0f);  // d·(2s + 1): s = 7 is 15
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 50);
  put_f16(b, dh);
  for (int g = 0; g < 8; ++g) {
    const int s = d > 0 ? clamp_round((amax(x + 32 * g, 32) / 1.125f / d - 1.0f) / 2.0f, 0, 7) : 0;
    const float dl = d * static_cast<float>(2 * s + 1);
    // one shift sign for the group: the one with the smaller error over its four 8s
    int pick[2][4];
    float err[2] = {0, 0};
    for (int neg = 0; neg < 2; ++neg)
      for (int l = 0; l < 4; ++l) {
        float e = 0;
        pick[neg][l] = iq1_nearest(x + 32 * g + 8 * l, dl, neg ? -kIq1Delta : kIq1Delta, &e);
        err[neg] += e;
      }
    const int neg = err[1] < err[0] ? 1 : 0;
    uint32_t qh = static_cast<uint32_t>(s) << 12 | static_cast<uint32_t>(neg) << 15;
    for (int l = 0; l < 4; ++l) {
      b[2 + 4 * g + l] = static_cast<uint8_t>(pick[neg][l] & 0xFF);
      qh |= static_cast<uint32_t>(pick[neg][l] >> 8) << (3 * l);
    }
    put_f16(b + 34 + 2 * g, static_cast<uint16_t>(qh));
  }
}

inline void quantize_block_iq1_m(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 16, 16, 1.125f, 1.0f, 14, 1.0f);  // a 3-bit scale per 16
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 56);
  uint16_t words[4] = {};
  for (int g = 0; g < 8; ++g)
    for (int h = 0; h < 2; ++h) {
      const float* y16 = x + 32 * g + 16 * h;
      const int s = d > 0 ? clamp_round((amax(y16, 16) / 1.125f / d - 1.0f) / 2.0f, 0, 7) : 0;
      words[g / 2] |= static_cast<uint16_t>(s << (6 * (g % 2) + 3 * h));
      const float dl = d * static_cast<float>(2 * s + 1);
      for (int k = 0; k < 2; ++k) {  // the two 8s of this 16, each with its own shift sign
        const int l = 2 * h + k;
        float e[2];
        const int p[2] = {iq1_nearest(y16 + 8 * k, dl, kIq1Delta, &e[0]), iq1_nearest(y16 + 8 * k, dl, -kIq1Delta, &e[1])};
        const int neg = e[1] < e[0] ? 1 : 0;
        b[4 * g + l] = static_cast<uint8_t>(p[neg] & 0xFF);
        b[32 + 2 * g + l / 2] |= static_cast<uint8_t>(((p[neg] >> 8) | neg << 3) << (4 * (l % 2)));
      }
    }
  for (int w = 0; w < 4; ++w) put_f16(b + 48 + 2 * w, words[w]);
  set_iq1_m_d_bits(b, dh);
}

inline void quantize_block_iq4_nl(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = f16_signed_scale(signed_amax(x, 32) / -127.0f);  // the largest on value −127
  const float d = f16_to_f32(dh);
  put_f16(b, dh);
  std::memset(b + 2, 0, 16);
  for (int j = 0; j < 32; ++j) b[2 + j % 16] |= static_cast<uint8_t>((d != 0 ? iq4_code(x[j] / d) : 8) << (4 * (j / 16)));
}

inline void quantize_block_iq4_xs(const float* x, uint8_t* b) {
  using namespace quant_detail;
  float dl[8], top = 0;
  for (int g = 0; g < 8; ++g) dl[g] = signed_amax(x + 32 * g, 32) / -127.0f, top = std::max(top, std::fabs(dl[g]));
  const uint16_t dh = f16_scale(top / 32.0f);  // group scales (s − 32)·d, s − 32 in [−32, 31]
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 136);
  put_f16(b, dh);
  uint32_t scales_h = 0;
  for (int g = 0; g < 8; ++g) {
    const int ls = (d > 0 ? clamp_round(dl[g] / d, -32, 31) : 0) + 32;
    b[4 + g / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (g % 2)));
    scales_h |= static_cast<uint32_t>(ls >> 4) << (2 * g);
    const float group_d = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 32; ++j)
      b[8 + 16 * g + j % 16] |= static_cast<uint8_t>((group_d != 0 ? iq4_code(x[32 * g + j] / group_d) : 8) << (4 * (j / 16)));
  }
  put_f16(b + 2, static_cast<uint16_t>(scales_h));
}

}  // namespace ds41::gguf
#include "../core/fp_exact_end.hpp"
