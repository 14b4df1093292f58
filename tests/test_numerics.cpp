// Unit tests of the core numerics (host-compiled DS41_HD functions): number formats, quantiser
// round trips, reductions, norms, RoPE, Sinkhorn, top-k.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>
#include "ds41/core/activation.hpp"
#include "ds41/core/attention_math.hpp"
#include "ds41/core/compress_math.hpp"
#include "ds41/core/linear_math.hpp"
#include "ds41/core/quant.hpp"
#include "ds41/core/rope.hpp"
#include "ds41/core/simd_avx2.hpp"
#include "ds41/core/sinkhorn.hpp"
#include "ds41/core/topk.hpp"
#include "ds41/core/torch_math.hpp"

namespace test_numerics {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;

TEST_CASE("bf16 rounds to nearest, ties to even") {
  CHECK(bf16_round(1.0f) == 1.0f);
  CHECK(bf16_round(1.0f + std::ldexp(1.0f, -8)) == 1.0f);                             // tie -> even (down)
  CHECK(bf16_round(1.0f + 3 * std::ldexp(1.0f, -8)) == 1.0f + std::ldexp(1.0f, -6));  // tie -> even (up)
  CHECK(bf16_round(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 1.0f + std::ldexp(1.0f, -7));
  CHECK(bf16_round(-1.0f - std::ldexp(1.0f, -8)) == -1.0f);
  CHECK(std::signbit(bf16_round(-0.0f)));
  CHECK(bf16_bits(1.0f) == 0x3F80);
  CHECK(bf16_to_f32(0xC040) == -3.0f);
  CHECK(std::isnan(bf16_round(NAN)));
  // a denormal-range value keeps its (bf16-rounded) magnitude
  float tiny = std::ldexp(1.0f, -130);
  CHECK(bf16_round(tiny) == tiny);
}

TEST_CASE("e4m3: grid, ties to even code, saturation at 448, subnormals, signed zero") {
  CHECK(e4m3_round(0.0f) == 0.0f);
  CHECK(std::signbit(e4m3_round(-0.0f)));
  CHECK(e4m3_round(448.0f) == 448.0f);
  CHECK(e4m3_round(464.0f) == 448.0f);  // the next grid point (480) is NaN in e4m3fn
  CHECK(e4m3_round(1e6f) == 448.0f);
  CHECK(e4m3_round(-1e6f) == -448.0f);
  CHECK(e4m3_round(INFINITY) == 448.0f);
  CHECK(e4m3_round(1.0625f) == 1.0f);   // tie between m=0 and m=1 -> even m=0
  CHECK(e4m3_round(1.1875f) == 1.25f);  // tie between m=1 and m=2 -> even m=2
  CHECK(e4m3_round(1.07f) == 1.125f);
  const float sub = std::ldexp(1.0f, -9);
  CHECK(e4m3_round(sub) == sub);
  CHECK(e4m3_round(0.5f * sub) == 0.0f);       // tie -> 0 (even)
  CHECK(e4m3_round(1.5f * sub) == 2.0f * sub);  // tie -> code 2 (even)
  CHECK(e4m3_round(0.015625f - 1e-6f) == 0.015625f);
  CHECK(e4m3_round(-3.3f) == -3.25f);
  // every finite code decodes onto the grid and encodes back to itself
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;  // NaN codes
    float v = e4m3_decode(static_cast<uint8_t>(c));
    CHECK(e4m3_round(v) == v);
    if (c != 0x80) CHECK(e4m3_encode(v) == c);
  }
}

TEST_CASE("e4m3: the host decode table holds e4m3_decode's bits for all 256 codes") {
  const float* table = e4m3_decode_table();
  CHECK(table == e4m3_decode_table());  // built once
  for (int c = 0; c < 256; ++c) {
    CAPTURE(c);
    const float ref = e4m3_decode(static_cast<uint8_t>(c));
    if ((c & 0x7F) == 0x7F) CHECK((std::isnan(ref) && std::isnan(table[c])));
    CHECK(f32_bits(table[c]) == f32_bits(ref));
  }
  CHECK(std::signbit(table[0x80]));
}

TEST_CASE("e4m3: the bit-placement decode gives e4m3_decode's bits for all 256 codes") {
  for (int c = 0; c < 256; ++c) {
    CAPTURE(c);
    const float ref = e4m3_decode(static_cast<uint8_t>(c)), got = e4m3_decode_shift(static_cast<uint32_t>(c));
    if (ref != ref)
      CHECK(got != got);
    else
      CHECK(f32_bits(got) == f32_bits(ref));
  }
  // bits above the code's 8 are ignored only by the caller; the codes are bytes
  CHECK(f32_bits(e4m3_decode_shift(0x80)) == 0x80000000u);
  CHECK(e4m3_decode_shift(0x01) == 1.0f / 512.0f);
}

TEST_CASE("e2m1: nearest with ties to the even code, clamped to 6") {
  const float cases[][2] = {{0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f}, {2.5f, 2.0f},
                            {3.5f, 4.0f},  {5.0f, 4.0f},  {0.26f, 0.5f}, {5.01f, 6.0f}, {7.0f, 6.0f},
                            {100.0f, 6.0f}, {0.1f, 0.0f}, {2.9f, 3.0f}};
  for (auto& c : cases) {
    CHECK(e2m1_round(c[0]) == c[1]);
    CHECK(e2m1_round(-c[0]) == -c[1]);
  }
  for (int c = 0; c < 16; ++c) CHECK(e2m1_encode(e2m1_decode(static_cast<uint8_t>(c))) == (c == 8 ? 8 : c));
  // e2m1_encode counts thresholds; the code must be that of e2m1_round's value, on every tie, a
  // float either side of it, a grid of 1/1024 steps to 8, both signs, 0, -0, infinities and NaN
  const float values[] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  auto code_of_round = [&](float v) {
    const float r = e2m1_round(v);
    const uint8_t sign = std::signbit(r) ? 8 : 0;
    for (uint8_t c = 0; c < 8; ++c)
      if (std::fabs(r) == values[c]) return static_cast<uint8_t>(sign | c);
    return static_cast<uint8_t>(sign | 7);  // NaN
  };
  std::vector<float> xs = {0.0f, INFINITY, NAN, 1e30f, 1e-40f};
  for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f})
    xs.insert(xs.end(), {t, std::nextafter(t, 0.0f), std::nextafter(t, 10.0f)});
  for (int i = 0; i <= 8 * 1024; ++i) xs.push_back(i / 1024.0f);
  long bad = 0;
  for (float x : xs) bad += (e2m1_encode(x) != code_of_round(x)) + (e2m1_encode(-x) != code_of_round(-x));
  CHECK(bad == 0);
}

TEST_CASE("power-of-two scales from the exponent bits") {
  CHECK(pow2_ceil(1.0f) == 1.0f);
  CHECK(pow2_ceil(1.5f) == 2.0f);
  CHECK(pow2_ceil(0.75f) == 1.0f);
  CHECK(pow2_ceil(0.5f) == 0.5f);
  CHECK(pow2_ceil(3e-7f) == std::ldexp(1.0f, -21));
  uint8_t e8m0 = 0;
  CHECK((f32_to_e8m0(0.25f, &e8m0) && e8m0_to_f32(e8m0) == 0.25f));
}

static bool on_grid_e4m3(float v) { return e4m3_round(v) == v; }
static bool on_grid_e2m1(float v) { return e2m1_round(v) == v; }

TEST_CASE("fp8 pow2 round trip (block 32)") {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(64);
  for (float& v : x) v = bf16_round(nd(rng));
  std::vector<float> y = x;
  roundtrip_row(y.data(), 64, kFp8Block, RoundTrip::kFp8Pow2);
  for (int b = 0; b < 64; b += 32) {
    float s = fp8_pow2_scale(&x[b], 32);
    CHECK(s == pow2_ceil(s));  // a power of two
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(x[b + i]));
    CHECK(amax / s <= 448.0f);
    for (int i = 0; i < 32; ++i) {
      CHECK(on_grid_e4m3(y[b + i] / s));
      CHECK(y[b + i] == bf16_round(y[b + i]));
      CHECK(std::fabs(y[b + i] - x[b + i]) <= std::fabs(x[b + i]) * 0.0625f + s * std::ldexp(1.0f, -9));
    }
  }
  // all-zero block: the 1e-4 floor keeps the scale finite, zeros stay zeros
  std::vector<float> z(32, 0.0f);
  roundtrip_row(z.data(), 32, kFp8Block, RoundTrip::kFp8Pow2);
  for (float v : z) CHECK(v == 0.0f);
}

TEST_CASE("fp4 round trips: pow2 scale (block 32) and e4m3 scale (block 16)") {
  std::vector<float> x = {6.0f, -3.0f, 1.0f, 0.5f, 0.24f, -0.26f, 2.5f, 1.75f, 0.0f, -6.0f, 4.0f, 5.0f, 3.5f, 0.75f, 1.25f, -1.5f};
  SUBCASE("pow2: amax 6 gives scale 1 and the e2m1 ties") {
    std::vector<float> y = x;
    fp4_pow2_roundtrip(y.data(), static_cast<int>(y.size()));
    const float expect[] = {6, -3, 1, 0.5f, 0, -0.5f, 2, 2, 0, -6, 4, 4, 4, 1, 1, -1.5f};
    for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == expect[i]);
  }
  SUBCASE("e4m3 scale: s = e4m3(amax / 6)") {
    std::vector<float> y(16);
    for (int i = 0; i < 16; ++i) y[i] = x[i] * 0.3f;
    float amax = 6.0f * 0.3f;
    float s = fp4_e4m3_scale(y.data(), 16);
    CHECK(s == e4m3_round(amax / 6.0f));
    std::vector<float> z = y;
    fp4_e4m3_roundtrip(z.data(), 16);
    for (int i = 0; i < 16; ++i) {
      CHECK(on_grid_e2m1(bf16_round(z[i] / s)) == true);
      CHECK(z[i] == bf16_round(e2m1_round(std::fmin(std::fmax(y[i] / s, -6.0f), 6.0f)) * s));
    }
  }
  SUBCASE("all-zero blocks stay zero") {
    std::vector<float> z(32, 0.0f);
    fp4_pow2_roundtrip(z.data(), 32);
    fp4_e4m3_roundtrip(z.data(), 16);
    for (float v : z) CHECK(v == 0.0f);
  }
}

TEST_CASE("torch.clamp: bounds, values inside kept bit for bit, NaN stays NaN") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  CHECK(torch_clamp(12.0f, -10.0f, 10.0f) == 10.0f);
  CHECK(torch_clamp(-inf, -10.0f, 10.0f) == -10.0f);
  CHECK(torch_clamp(inf, -10.0f, 10.0f) == 10.0f);
  CHECK(std::signbit(torch_clamp(-0.0f, -10.0f, 10.0f)));
  CHECK(torch_clamp(3.5f, -10.0f, 10.0f) == 3.5f);
  CHECK(std::isnan(torch_clamp(nan, -10.0f, 10.0f)));  // fminf(fmaxf(NaN, -10), 10) would give 10
  CHECK(torch_clamp_max(-inf, 10.0f) == -inf);
  CHECK(torch_clamp_max(11.0f, 10.0f) == 10.0f);
  CHECK(std::isnan(torch_clamp_max(nan, 10.0f)));
}

TEST_CASE("torch-order sum equals the left-to-right sum on exact data and is close otherwise") {
  for (int n : {1, 7, 8, 31, 32, 64, 255, 256, 1000, 5000}) {
    CAPTURE(n);
    std::vector<float> ints(n);
    for (int i = 0; i < n; ++i) ints[i] = static_cast<float>(i % 17);
    double exact = 0;
    for (float v : ints) exact += v;
    CHECK(torch_order_sum(n, [&](long i) { return ints[i]; }) == static_cast<float>(exact));
    std::vector<float> r(n);
    std::mt19937 rng(n);
    std::uniform_real_distribution<float> u(-1, 1);
    double d = 0, mag = 0;
    for (float& v : r) v = u(rng), d += v, mag += std::fabs(v);
    CHECK(std::fabs(torch_order_sum(n, [&](long i) { return r[i]; }) - d) <= 1e-6 * mag + 1e-7);
  }
}

TEST_CASE("short rows: torch's scalar row sum and reduce_all's slow path take their own orders") {
  // 1 + 2^-24 rounds back to 1 while 2^-24 + 2^-24 = 2^-23 does not, so each order gives its own float
  const float e = std::ldexp(1.0f, -24);
  // row_sum with 4 partial sums: ((x0 + x4) + x5) + x1 + x2 + x3 = ((e + e) + 1) + ... keeps 2^-23
  const float six[6] = {e, 1.0f, 0.0f, 0.0f, e, 0.0f};
  const float row = torch_order_sum(6, [&](long i) { return six[i]; });
  CHECK(row == 1.0f + 2 * e);  // left to right would give (e + 1) + ... + e = 1
  // reduce_all below 8 lanes: left to right
  const float seven[7] = {1.0f, e, 0.0f, 0.0f, 0.0f, e, 0.0f};
  CHECK(torch_reduce_all_sum(seven, 7) == 1.0f);  // 1 + e = 1, + e = 1 (the 8-lane tree: e + e first, 1 + 2^-23)
}

TEST_CASE("log1p_scalar is this libm's log1pf bit for bit (softplus's scalar tail)") {
  // through a volatile pointer: a call at run time, never a compiler-folded (correctly rounded) constant
  float (*volatile libm_log1pf)(float) = ::log1pf;
  long tested = 0, mismatches = 0;
  uint32_t first_bad = 0;
  auto check = [&](uint32_t b) {
    const float x = bits_f32(b);
    ++tested;
    if (f32_bits(log1p_scalar(x)) != f32_bits(libm_log1pf(x)) && mismatches++ == 0) first_bad = b;
  };
  auto around = [&](uint32_t b, uint32_t w) {
    for (uint32_t d = 0; d <= w; ++d) check(b + d), check(b - d);
  };
  // specials: ±0, -1, below -1, denormals, largest finite, ±inf, quiet and signalling NaNs
  for (uint32_t b : {0x00000000u, 0x80000000u, 0xbf800000u, 0xbf800001u, 0xc0000000u, 0xff7fffffu, 0x00000001u,
                     0x007fffffu, 0x80000001u, 0x807fffffu, 0x7f7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                     0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fa12345u})
    check(b);
  // the algorithm's thresholds on x (both signs where the test is on |x|): 0.41421, -0.29289, 2^-29,
  // 2^-54, 2^53, -1, the denormal/normal boundary
  for (uint32_t b : {0x3ed413d7u, 0xbe95f61fu, 0x31000000u, 0xb1000000u, 0x24800000u, 0xa4800000u, 0x5a000000u,
                     0xbf800000u, 0x00800000u, 0x80800000u, 0x7f7fffffu - 64})
    around(b, 64);
  // thresholds on the reduced 1 + x = 2^k u: u at sqrt(2) (mantissa 0x3504f7) and at a power of two
  // (f = 0, the |f| < 2^-20 branch), for every exponent
  for (uint32_t e = 0; e < 254; ++e) {
    const float at_sqrt2 = bits_f32((e << 23) | 0x3504f7u), at_pow2 = bits_f32(e << 23);
    around(f32_bits(at_sqrt2 - 1.0f), 64);
    around(f32_bits(at_pow2 - 1.0f), 64);
  }
  // pseudo-random bit patterns, and positive values up to exp(20) (softplus feeds log1p exp(z), z <= 20)
  std::mt19937 rng(41);
  for (int i = 0; i < 3000000; ++i) check(static_cast<uint32_t>(rng()));
  std::uniform_int_distribution<uint32_t> pos(0, f32_bits(4.9e8f));
  for (int i = 0; i < 2000000; ++i) check(pos(rng));
  INFO("tested " << tested << ", first mismatching input: bits " << first_bad << " = " << bits_f32(first_bad));
  CHECK(mismatches == 0);
}

#if defined(__AVX2__) && defined(__FMA__)
TEST_CASE("exp_sleef_u10_8 is exp_sleef_u10 bit for bit on every lane (the host softmax's exps)") {
  long tested = 0, mismatches = 0;
  uint32_t first_bad = 0;
  std::vector<uint32_t> batch;
  auto flush = [&] {
    while (batch.size() % 8) batch.push_back(batch.back());
    for (size_t i = 0; i < batch.size(); i += 8) {
      alignas(32) float x[8], got[8];
      for (int j = 0; j < 8; ++j) x[j] = bits_f32(batch[i + j]);
      _mm256_store_ps(got, avx2::exp_sleef_u10_8(_mm256_load_ps(x)));
      for (int j = 0; j < 8; ++j) {
        ++tested;
        const float ref = exp_sleef_u10(x[j]);
        const bool same = std::isnan(ref) ? f32_bits(got[j]) == f32_bits(x[j]) : f32_bits(got[j]) == f32_bits(ref);
        if (!same && mismatches++ == 0) first_bad = batch[i + j];
      }
    }
    batch.clear();
  };
  // specials, the range ends (-104, 100) and their neighbours, and where q = rint(x·log2 e) steps
  for (uint32_t b : {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                     0xffc00000u, 0x7fa12345u, 0x7f7fffffu, 0xff7fffffu})
    batch.push_back(b);
  for (float edge : {-104.0f, 100.0f, -87.33655f, 88.72284f})
    for (int d = -64; d <= 64; ++d) batch.push_back(f32_bits(edge) + d);
  for (int q = -151; q <= 145; ++q) {
    const float at = (q + 0.5f) / 1.442695040888963407359924681001892137426645954152985934135449406931f;
    for (int d = -16; d <= 16; ++d) batch.push_back(f32_bits(at) + d);
  }
  // every 97th float of either sign up to |x| = 110 (the softmax feeds s - max <= 0)
  for (uint32_t b = 0; b <= f32_bits(110.0f); b += 97) {
    batch.push_back(b), batch.push_back(b | 0x80000000u);
    if (batch.size() >= 4096) flush();
  }
  flush();
  INFO("tested " << tested << ", first mismatching input: bits " << first_bad << " = " << bits_f32(first_bad));
  CHECK(mismatches == 0);
  CHECK(tested > 20000000);
}
#endif

TEST_CASE("swiglu_run: each element swiglu_entry's bits, vector runs and scalar tails alike") {
  // rows of an [n, I] gate as the experts run them: runs starting and ending anywhere, positions
  // on torch's vector and scalar exp paths (row-local and over the whole tensor), with and without
  // a clamp and a routing weight; values ordinary, clamped, huge, tiny, signed zeros, inf, NaN
  std::mt19937 rng(71);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 1e30f, -1e30f, 90.0f, -90.0f,
                            120.0f, -120.0f, 1e-40f, 10.0f, -10.0f, std::nextafter(10.0f, 20.0f)};
  long bad = 0, runs = 0;
  for (const long I : {37L, 64L, 72L, 2304L}) {
    const long n = 3;
    std::vector<float> g(n * I), u(n * I);
    for (long e = 0; e < n * I; ++e) {
      g[e] = rng() % 9 == 0 ? specials[rng() % 16] : normal(rng);
      u[e] = rng() % 9 == 0 ? specials[rng() % 16] : normal(rng);
    }
    for (float lim : {0.0f, 10.0f})
      for (bool weighted : {false, true})
        for (bool row_local : {false, true}) {
          const float weight = 0.37f;
          for (long i = 0; i < n; ++i) {
            std::vector<float> got(g.begin() + i * I, g.begin() + (i + 1) * I);
            const long pos0 = row_local ? 0 : i * I, npos = row_local ? I : n * I;
            for (long c0 = 0; c0 < I;) {  // the row in runs of random lengths
              const long c1 = std::min(I, c0 + 1 + static_cast<long>(rng() % 40));
              swiglu_run(got.data(), u.data() + i * I, c0, c1, lim, weighted ? &weight : nullptr, pos0, npos);
              ++runs;
              c0 = c1;
            }
            for (long c = 0; c < I; ++c) {
              const float want =
                  swiglu_entry(g[i * I + c], u[i * I + c], lim, weighted ? &weight : nullptr, pos0 + c, npos);
              // a NaN as NaN: which of two NaN operands a product passes on is the operand order
              // the compiler picked for the scalar form (IEEE 754 leaves it open), not arithmetic
              const bool same = std::isnan(want) ? std::isnan(got[c]) : f32_bits(got[c]) == f32_bits(want);
              bad += !same;
            }
          }
        }
  }
  CHECK(runs > 1000);
  CHECK(bad == 0);
}

TEST_CASE("RMSNorm of a row") {
  std::vector<float> x = {3.0f, 4.0f, 0.0f, -5.0f}, w = {1.0f, 0.5f, 2.0f, 1.0f}, y(4);
  rmsnorm_row(x.data(), w.data(), y.data(), 4, 1e-20f);
  double rms = std::sqrt((9.0 + 16 + 0 + 25) / 4);
  for (int i = 0; i < 4; ++i) CHECK(y[i] == doctest::Approx(w[i] * x[i] / rms).epsilon(4e-3));
  for (float v : y) CHECK(v == bf16_round(v));
}

TEST_CASE("RoPE: rotation then inverse returns the input (to bf16 precision)") {
  RopeParams p;
  p.rope_dim = 16;
  p.base = 10000.0;
  std::vector<float> c, s;
  rope_table(rope_frequencies(p), 64, c, s);
  std::vector<float> x(16), y;
  for (int i = 0; i < 16; ++i) x[i] = bf16_round(0.1f * (i - 7));
  for (long pos : {0L, 1L, 37L, 63L}) {
    y = x;
    rope_rotate(y.data(), &c[pos * 8], &s[pos * 8], 8, false);
    rope_rotate(y.data(), &c[pos * 8], &s[pos * 8], 8, true);
    for (int i = 0; i < 16; ++i) CHECK(y[i] == doctest::Approx(x[i]).epsilon(0.02).scale(0.01));
    if (pos == 0)
      for (int i = 0; i < 16; ++i) CHECK(y[i] == x[i]);  // angle 0 is the identity
  }
  SUBCASE("YaRN keeps the highest frequencies and divides the lowest by the factor") {
    RopeParams q = p;
    q.original_seq_len = 16;
    q.factor = 4.0;
    q.base = 160000.0;
    auto plain = rope_frequencies({16, 160000.0, 0, 1.0, 32, 1});
    auto yarn = rope_frequencies(q);
    CHECK(yarn[0] == plain[0]);
    CHECK(yarn[7] == doctest::Approx(plain[7] / 4.0f));
  }
}

TEST_CASE("Sinkhorn: columns sum to one, pre in (0,1]+eps, post in (0,2)") {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  for (int hc : {1, 2, 4, 8}) {
    const int mix = (2 + hc) * hc;
    std::vector<float> m(mix), base(mix), pre(hc), post(hc), comb(hc * hc);
    for (auto& v : m) v = nd(rng);
    for (auto& v : base) v = nd(rng);
    float scale[3] = {0.7f, 1.1f, 1.3f};
    hc_split_sinkhorn(m.data(), scale, base.data(), hc, 20, 1e-6f, pre.data(), post.data(), comb.data());
    for (int j = 0; j < hc; ++j) {
      float col = 0;
      for (int i = 0; i < hc; ++i) col += comb[i * hc + j];
      CHECK(col == doctest::Approx(1.0f).epsilon(1e-5));
      CHECK(pre[j] > 0.0f);
      CHECK(pre[j] <= 1.0f + 1e-6f);
      CHECK(post[j] > 0.0f);
      CHECK(post[j] < 2.0f);
    }
  }
}

TEST_CASE("top-k: descending, lower index first on ties, unreachable (-inf, high index) fills first") {
  const float v[] = {0.5f, 2.0f, -1.0f, 2.0f, 0.7f};
  int idx[3];
  float val[3];
  topk_row(v, 5, 3, idx, val);
  CHECK(idx[0] == 1);
  CHECK(idx[1] == 3);
  CHECK(idx[2] == 4);
  CHECK(val[2] == 0.7f);
  const float w[] = {1.0f, -INFINITY, 3.0f, -INFINITY, -INFINITY};
  int k4[4];
  topk_row(w, 5, 4, k4, nullptr);
  CHECK(k4[0] == 2);
  CHECK(k4[1] == 0);
  CHECK(k4[2] == 4);
  CHECK(k4[3] == 3);
  // NaN is -inf wherever it sits, also once kept (a NaN kept first used to stay first)
  const float with_nan[] = {NAN, 1.0f, 2.0f};
  int k2[2];
  topk_row(with_nan, 3, 2, k2, nullptr);
  CHECK(k2[0] == 2);
  CHECK(k2[1] == 1);
  int32_t sel[4];
  index_topk_row(w, 5, 4, 3, 10, sel);  // positions >= 3 unreachable -> -1, others + offset
  CHECK(sel[0] == 10);
  CHECK(sel[1] == 12);
  CHECK(sel[2] == -1);
  CHECK(sel[3] == -1);
}

TEST_CASE("the device sorts' key orders scores as topk_before does, NaN first, -0 with +0 by index") {
  // CudaBackend::topk_rows and the fast policy's block sort take the k largest keys: among numbers
  // that is topk_before's total order (topk_row's selection); NaN comes before every number, as
  // torch's comparator puts it (lower column first among NaNs)
  std::mt19937 rng(7);
  const float pool[] = {0.0f, -0.0f, 1.5f, -1.5f, -INFINITY, INFINITY, NAN, 3e-39f, -3e-39f, 2.0f};
  long rows_without_nan = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<float> v(n);
    for (float& x : v) x = pool[rng() % std::size(pool)];
    std::vector<int> by_key(n), by_before(n);
    for (int i = 0; i < n; ++i) by_key[i] = by_before[i] = i;
    std::sort(by_key.begin(), by_key.end(), [&](int a, int b) { return topk_order_key(v[a], a) > topk_order_key(v[b], b); });
    std::sort(by_before.begin(), by_before.end(), [&](int a, int b) {
      const bool na = std::isnan(v[a]), nb = std::isnan(v[b]);
      if (na != nb) return na;
      if (na) return a < b;
      return topk_before(v[a], a, v[b], b);
    });
    CHECK(by_key == by_before);
    if (std::none_of(v.begin(), v.end(), [](float x) { return std::isnan(x); })) {
      ++rows_without_nan;
      std::vector<int> ref(n);
      topk_row(v.data(), n, n, ref.data(), nullptr);
      CHECK(by_key == ref);
    }
  }
  CHECK(rows_without_nan > 20);
  // -0 at column 1, +0 at column 3: equal values, the lower column first (a distinct key each)
  CHECK(topk_order_key(-0.0f, 1) > topk_order_key(0.0f, 3));
  CHECK(topk_order_key(0.0f, 1) > topk_order_key(-0.0f, 3));
}

TEST_CASE("top-k: torch's selection (the host's) and topk_row's (the device's) keep the same values") {
  // they may differ only in which of tied members they keep (tests/test_topk.cpp checks torch's
  // exact choice against torch): the kept values, best first, are the same
  std::mt19937 rng(43);
  std::normal_distribution<float> gauss;
  std::uniform_int_distribution<int> small(-3, 3);
  long cases = 0;
  for (int n : {1, 2, 9, 64, 640, 2048, 16384})
    for (int k : {1, 6, 8, 9, 100, 512, 16384}) {
      if (k > n) continue;
      for (int kind = 0; kind < 3; ++kind) {
        std::vector<float> v(n);
        for (int i = 0; i < n; ++i) {
          switch (kind) {
            case 0: v[i] = gauss(rng); break;                         // distinct values
            case 1: v[i] = static_cast<float>(small(rng)); break;      // many ties
            default: v[i] = rng() % 3 ? -INFINITY : gauss(rng); break;  // masked
          }
        }
        std::vector<int> ref(k), got(k);
        std::vector<float> ref_v(k), got_v(k);
        std::vector<TopkEntry> scratch(n);
        topk_row(v.data(), n, k, ref.data(), ref_v.data());
        torch_topk_row(v.data(), n, k, true, got.data(), got_v.data(), scratch.data());
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(kind);
        // torch sorts only the first k-1 (nth_element's k-th is the k-th best anyway)
        CHECK(got_v == ref_v);
        if (kind == 0) CHECK(got == ref);  // no ties: the same indices in the same order
        for (int j = 0; j < k; ++j) CHECK(v[got[j]] == got_v[j]);
        ++cases;
      }
    }
  CHECK(cases == 3 * 29);
}

TEST_CASE("candidate blocks: block maxima, the newest block pinned, -inf blocks dropped") {
  // 7 positions in blocks of 2: block scores 5, 1, 9, 0(+pin: newest is position 6 -> block 3)
  const float s[] = {5, 1, 0.5f, 1, 9, 2, 0};
  float blocks[4];
  int idx[2];
  int32_t mask[7];
  candidate_blocks_row(s, 7, 7, 2, 2, blocks, idx, nullptr, mask);
  const int32_t expect[] = {0, 0, 0, 0, 1, 1, 1};  // pinned block 3 and block 2 (9)
  for (int i = 0; i < 7; ++i) CHECK(mask[i] == expect[i]);
  const float none[] = {-INFINITY, -INFINITY, -INFINITY};
  float b2[2];
  int i2[2];
  int32_t m2[3];
  candidate_blocks_row(none, 3, 0, 2, 2, b2, i2, nullptr, m2);
  for (int32_t m : m2) CHECK(m == 0);
}

TEST_CASE("sparse attention with a sink: weights, -1 skipped, all-masked row is zero") {
  // two keys, D = 2; scores 0 and 1 (scale 1); sink -inf-ish contributes nothing
  const float q[] = {1.0f, 0.0f};
  const float kv[] = {0.0f, 1.0f, 1.0f, 0.0f};
  const int idx[] = {0, 1, -1};
  float out[2];
  sparse_attn_head(q, kv, 2, idx, 3, 2, -1e30f, 1.0f, out);
  float p0 = 1.0f / (1.0f + std::exp(1.0f)), p1 = 1.0f - p0;
  CHECK(out[0] == doctest::Approx(p1).epsilon(1e-2));
  CHECK(out[1] == doctest::Approx(p0).epsilon(1e-2));
  const int none[] = {-1, -1};
  sparse_attn_head(q, kv, 2, none, 2, 2, 0.0f, 1.0f, out);
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == 0.0f);
}

TEST_CASE("fp8/fp4 Linear: the input is act_quant'ed (e4m3, pow2 scale per 32) before the block-scaled sums") {
  // Block 0: amax 3 -> s = 2^ceil(log2(3/448)) = 2^-7, so q = x·128: 3 -> 384, -0.3 -> -38.4 -> -40
  // (e4m3 neighbours 36 and 40), 1e-6 -> 1.28e-4 -> 0 (below half the smallest subnormal 2^-9).
  // Block 1: every |x| <= 1e-6, amax clamped to 1e-4 -> s = 2^ceil(log2(1e-4/448)) = 2^-22;
  // 1e-6·2^22 = 4.194 -> 4 (neighbours 4 and 4.5).
  const int K = 64;
  std::vector<float> x(K, 0.0f);
  x[0] = 3.0f, x[1] = -0.3f, x[2] = 1e-6f;
  x[32] = 1e-6f, x[33] = -1e-6f;
  float q[K], sx[2];
  act_quant_row(x.data(), K, q, sx);
  CHECK(sx[0] == 0x1p-7f);
  CHECK(sx[1] == 0x1p-22f);
  CHECK(q[0] == 384.0f);
  CHECK(q[1] == -40.0f);
  CHECK(q[2] == 0.0f);
  CHECK(q[32] == 4.0f);
  CHECK(q[33] == -4.0f);
  // fp8: codes 1.5 at k = 0, 1, 32, 33 (0 elsewhere); block scales 2 and 0.5
  std::vector<uint8_t> codes(K, 0);
  for (int k : {0, 1, 32, 33}) codes[k] = e4m3_encode(1.5f);
  codes[33] = e4m3_encode(-1.5f);
  const float s8[] = {2.0f, 0.5f};
  MatrixView v{WeightFormat::kFp8Block32, 1, K, codes.data(), s8};
  const float part0 = 384.0f * 1.5f + -40.0f * 1.5f;  // 516, exact
  const float part1 = 4.0f * 1.5f + (-4.0f) * (-1.5f);  // 12
  const float expect8 = (0.0f + part0 * 0x1p-7f * 2.0f) + part1 * 0x1p-22f * 0.5f;
  CHECK(v.dot(x.data(), 0) == expect8);
  CHECK(v.dot(q, 0, sx) == expect8);  // pre-quantised input: the same value
  // without the input quantisation the result would differ: 3·1.5 - 0.3·1.5 + ... = 8.1 + ...
  CHECK(std::fabs(v.dot(x.data(), 0) - 8.1f * 2.0f) > 0.1f);
  // fp4: every value 1.5 (code 3), two per byte, scales 1 then 4
  std::vector<uint8_t> packed(K / 2, 0x33);
  const float s4[] = {1.0f, 4.0f};
  MatrixView f{WeightFormat::kFp4Block32, 1, K, packed.data(), s4};
  const float expect4 = (0.0f + (384.0f * 1.5f + -40.0f * 1.5f + 0.0f) * 0x1p-7f * 1.0f) +
                        (4.0f * 1.5f + -4.0f * 1.5f) * 0x1p-22f * 4.0f;
  CHECK(f.dot(x.data(), 0) == expect4);
  // an inf or NaN anywhere in the row makes the output NaN (the reference's inf/inf, NaN·w)
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    std::vector<float> xb = x;
    xb[40] = bad;
    CHECK(std::isnan(v.dot(xb.data(), 0)));
    CHECK(std::isnan(f.dot(xb.data(), 0)));
  }
  // bf16 weights take x as it is
  std::vector<uint16_t> wb(K, bf16_bits(1.0f));
  MatrixView b{WeightFormat::kBF16, 1, K, wb.data(), nullptr};
  float expect_b = 0.0f;
  for (int k = 0; k < K; ++k) expect_b += x[k];
  CHECK(b.dot(x.data(), 0) == expect_b);
}

}  // namespace test_numerics
