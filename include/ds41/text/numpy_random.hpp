// ds41/text/numpy_random.hpp — numpy's default_rng(seed).integers(low, high, size, dtype=int64),
// reproduced bit for bit.
//
// The Engram hash multipliers come from `numpy.random.default_rng(10007 * layer).integers(...)`
// (engram.py), so a runtime that derives them must replay numpy's exact chain: SeedSequence (a
// hash of the seed's 32-bit words into a 4-word pool) → PCG64 (128-bit LCG, XSL-RR output, seeded
// with state and increment from SeedSequence.generate_state(4, uint64)) → the bounded-integer
// draw that Generator.integers uses (Lemire's multiply-and-reject, never the masked method, with
// ranges below 2^32 served from 32-bit halves of 64-bit outputs). Checked against numpy 1.24.2 by
// tests/test_engram_params.cpp (vectors in tests/data/engram/).
#pragma once
#include <array>
#include <cstdint>
#include <vector>
#include "../core/error.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text {

/// numpy.random.SeedSequence with an integer entropy and no spawn key (what default_rng(int) builds).
class SeedSequence {
 public:
  /// entropy as numpy sees a Python int: its 32-bit words, least significant first ({0} for 0).
  explicit SeedSequence(std::vector<uint32_t> entropy_words) { mix_entropy(entropy_words); }
  explicit SeedSequence(unsigned __int128 entropy) : SeedSequence(words_of(entropy)) {}

  /// The Python int's 32-bit words, least significant first; zero gives one word.
  static std::vector<uint32_t> words_of(unsigned __int128 n) {
    std::vector<uint32_t> w;
    do {
      w.push_back(static_cast<uint32_t>(n));
      n >>= 32;
    } while (n != 0);
    return w;
  }

  const std::array<uint32_t, 4>& pool() const { return pool_; }

  /// generate_state(n_words, dtype=uint32).
  std::vector<uint32_t> generate_state32(size_t n_words) const {
    std::vector<uint32_t> out(n_words);
    uint32_t hash_const = kInitB;
    for (size_t i = 0; i < n_words; ++i) {
      uint32_t v = pool_[i % pool_.size()];
      v ^= hash_const;
      hash_const *= kMultB;
      v *= hash_const;
      v ^= v >> kXShift;
      out[i] = v;
    }
    return out;
  }
  /// generate_state(n_words, dtype=uint64): twice as many 32-bit words, paired little-endian
  /// (numpy views the uint32 array as uint64 on a little-endian host).
  std::vector<uint64_t> generate_state64(size_t n_words) const {
    std::vector<uint32_t> w = generate_state32(2 * n_words);
    std::vector<uint64_t> out(n_words);
    for (size_t i = 0; i < n_words; ++i) out[i] = static_cast<uint64_t>(w[2 * i + 1]) << 32 | w[2 * i];
    return out;
  }

 private:
  static constexpr uint32_t kInitA = 0x43b0d7e5u, kMultA = 0x931e8875u;
  static constexpr uint32_t kInitB = 0x8b51f9ddu, kMultB = 0x58f38dedu;
  static constexpr uint32_t kMixMultL = 0xca01f9ddu, kMixMultR = 0x4973f715u;
  static constexpr int kXShift = 16;

  static uint32_t hashmix(uint32_t v, uint32_t& hash_const) {
    v ^= hash_const;
    hash_const *= kMultA;
    v *= hash_const;
    v ^= v >> kXShift;
    return v;
  }
  static uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t r = kMixMultL * x - kMixMultR * y;
    return r ^ (r >> kXShift);
  }
  void mix_entropy(const std::vector<uint32_t>& e) {
    uint32_t hash_const = kInitA;
    const size_t n = pool_.size();
    for (size_t i = 0; i < n; ++i) pool_[i] = hashmix(i < e.size() ? e[i] : 0u, hash_const);
    for (size_t s = 0; s < n; ++s)
      for (size_t d = 0; d < n; ++d)
        if (s != d) pool_[d] = mix(pool_[d], hashmix(pool_[s], hash_const));
    for (size_t s = n; s < e.size(); ++s)  // words beyond the pool fold into every pool word
      for (size_t d = 0; d < n; ++d) pool_[d] = mix(pool_[d], hashmix(e[s], hash_const));
  }

  std::array<uint32_t, 4> pool_{};
};

/// numpy.random.PCG64 (the 128-bit XSL-RR generator), including the bit generator's one-word
/// buffer that serves 32-bit requests from halves of a 64-bit output (low half first).
class PCG64 {
 public:
  using u128 = unsigned __int128;
  /// Seeded as PCG64(SeedSequence(seed)) is: state words s[0..1], increment words s[2..3], each
  /// pair read high word first.
  explicit PCG64(const SeedSequence& seq) {
    std::vector<uint64_t> s = seq.generate_state64(4);
    const u128 init_state = static_cast<u128>(s[0]) << 64 | s[1];
    const u128 init_seq = static_cast<u128>(s[2]) << 64 | s[3];
    state_ = 0;
    inc_ = init_seq << 1 | 1u;
    step();
    state_ += init_state;
    step();
  }
  uint64_t next64() {
    step();
    const uint64_t hi = static_cast<uint64_t>(state_ >> 64), lo = static_cast<uint64_t>(state_);
    const unsigned rot = static_cast<unsigned>(state_ >> 122);
    const uint64_t x = hi ^ lo;
    return rot == 0 ? x : (x >> rot) | (x << (64 - rot));
  }
  uint32_t next32() {
    if (has_half_) {
      has_half_ = false;
      return half_;
    }
    const uint64_t v = next64();
    has_half_ = true;
    half_ = static_cast<uint32_t>(v >> 32);
    return static_cast<uint32_t>(v);
  }

 private:
  static constexpr u128 kMult = static_cast<u128>(2549297995355413924ULL) << 64 | 4865540595714422341ULL;
  void step() { state_ = state_ * kMult + inc_; }
  u128 state_ = 0, inc_ = 0;
  bool has_half_ = false;
  uint32_t half_ = 0;
};

/// numpy.random.Generator over PCG64, as `numpy.random.default_rng(seed)` returns it.
class Generator {
 public:
  explicit Generator(unsigned __int128 seed) : bitgen_(SeedSequence(seed)) {}
  explicit Generator(const SeedSequence& seq) : bitgen_(seq) {}
  PCG64& bit_generator() { return bitgen_; }

  /// integers(low, high, size, dtype=int64), endpoint=False: values in [low, high).
  std::vector<int64_t> integers(int64_t low, int64_t high, size_t size) {
    DS41_CHECK(low < high, "numpy integers: low (", low, ") must be below high (", high, ")");
    // numpy works on the inclusive range as unsigned 64-bit and adds the offset modulo 2^64
    const uint64_t rng = static_cast<uint64_t>(high) - 1 - static_cast<uint64_t>(low);
    const uint64_t off = static_cast<uint64_t>(low);
    std::vector<int64_t> out(size);
    for (auto& v : out) v = static_cast<int64_t>(off + bounded(rng));
    return out;
  }

 private:
  /// One value in [0, rng] by numpy's random_bounded_uint64_fill with use_masked=false.
  uint64_t bounded(uint64_t rng) {
    if (rng == 0) return 0;  // no draw at all
    if (rng == 0xFFFFFFFFULL) return bitgen_.next32();  // Lemire32 cannot hold rng + 1
    if (rng < 0xFFFFFFFFULL) return lemire32(static_cast<uint32_t>(rng));
    if (rng == ~0ULL) return bitgen_.next64();
    return lemire64(rng);
  }
  uint32_t lemire32(uint32_t rng) {
    const uint32_t excl = rng + 1;
    uint64_t m = static_cast<uint64_t>(bitgen_.next32()) * excl;
    uint32_t leftover = static_cast<uint32_t>(m);
    if (leftover < excl) {
      const uint32_t threshold = (UINT32_MAX - rng) % excl;
      while (leftover < threshold) {
        m = static_cast<uint64_t>(bitgen_.next32()) * excl;
        leftover = static_cast<uint32_t>(m);
      }
    }
    return static_cast<uint32_t>(m >> 32);
  }
  uint64_t lemire64(uint64_t rng) {
    const uint64_t excl = rng + 1;
    unsigned __int128 m = static_cast<unsigned __int128>(bitgen_.next64()) * excl;
    uint64_t leftover = static_cast<uint64_t>(m);
    if (leftover < excl) {
      const uint64_t threshold = (UINT64_MAX - rng) % excl;
      while (leftover < threshold) {
        m = static_cast<unsigned __int128>(bitgen_.next64()) * excl;
        leftover = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

  PCG64 bitgen_;
};

}  // namespace ds41::text
#include "../core/fp_exact_end.hpp"
