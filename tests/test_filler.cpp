// The deterministic filler against the golden's own spot checks (SCHEMA §1.6) and the hash
// primitives against independently known values.
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include "ds41/testing/golden.hpp"

namespace test_filler {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;

TEST_CASE("fnv1a64 and splitmix64 known values") {
  CHECK(filler::fnv1a64("") == 0xcbf29ce484222325ull);
  CHECK(filler::fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(filler::splitmix64(0) == 0xe220a8397b1dcdafull);
}

TEST_CASE("every spot check of the public golden is reproduced bit for bit") {
  golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
  WeightSet w = golden::regenerate_weights(g);
  REQUIRE(g.spot_checks.is_array());
  REQUIRE(g.spot_checks.size() > 10);
  std::map<std::string, const golden::ParamRule*> rules;
  for (const auto& p : g.params) rules[p.name] = &p;
  int engram_checks = 0;
  for (const auto& sc : g.spot_checks) {
    const std::string name = sc["name"].get<std::string>();
    const uint64_t index = sc["index"].get<uint64_t>();
    CAPTURE(name);
    CAPTURE(index);
    REQUIRE(rules.count(name));
    const golden::ParamRule& rule = *rules[name];
    if (sc.contains("raw")) CHECK(std::to_string(filler::fixed_raw(name, index)) == sc["raw"].get<std::string>());
    CHECK(filler::fixed_value(name, index, rule.scale, rule.offset) == sc["f32"].get<float>());
    std::vector<float> all = w.at(name, rule.shape).to_f32();
    if (sc.contains("code")) {
      ++engram_checks;
      const long row = sc["row"].get<long>(), col = sc["col"].get<long>();
      const std::string scale_name = name.substr(0, name.size() - 6) + "scale";
      const golden::ParamRule& srule = *rules[scale_name];
      std::vector<float> scales = w.at(scale_name, srule.shape).to_f32();
      const float code = all[index];
      const float block_scale = scales[row * srule.shape[1] + col / 32];
      CHECK(code == sc["code"].get<float>());
      CHECK(block_scale == sc["block_scale"].get<float>());
      CHECK(code * block_scale == sc["value"].get<float>());
    } else {
      CHECK(all[index] == sc["value"].get<float>());
    }
  }
  CHECK(engram_checks > 0);
}

TEST_CASE("the input tokens and the engram token map follow their rules") {
  golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
  const std::string salt = "inputs." + std::to_string(90) + ".tokens";
  for (int i = 0; i < g.prompt_len; ++i)
    CHECK(static_cast<long>(filler::fixed_int(salt, i, g.config.vocab_size)) == g.prompt_tokens[i]);
  // the token map uses every compressed id
  std::vector<int> used(g.config.engram_compressed_vocab_size, 0);
  for (int32_t c : g.config.engram.token_map) used.at(c) = 1;
  for (int u : used) CHECK(u == 1);
}

// The quantisers multiply by 2^-k instead of dividing by 2^k (filler.hpp: with e2m1_encode's old
// ladder, 30 of rel_fp8's 42 s; test_numerics pins e2m1_encode's count of thresholds itself):
// the definition's codes (SCHEMA §10.2), computed here the plain way, on every e2m1 tie and e4m3
// rounding edge at scales from subnormal to 2^100 and on random values, odd widths included.
TEST_CASE("the quantisers give the codes of their definition (SCHEMA 10.2)") {
  const float edges[] = {0.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 0.5f, 1.0f, 1.5f, 3.0f, 4.0f,
                         0.2499999f, 0.2500001f, 0.7499999f, 5.0000005f, 448.0f, 0.015625f, 0.0146484375f, 1.0625f};
  std::mt19937 rng(7);
  long bad_scales = 0, bad_e2m1 = 0, bad_e4m3 = 0, bad_rows = 0;  // counted, not asserted per element
  for (int trial = 0; trial < 600; ++trial) {
    const long rows = 1 + rng() % 40, cols = 1 + rng() % 80;
    const int e = static_cast<int>(rng() % 260) - 140;  // 2^-140 (subnormal codes' values) .. 2^119
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (float& x : v)
      x = std::ldexp((rng() & 1 ? -1.0f : 1.0f) * (trial % 2 ? edges[rng() % std::size(edges)]
                                                            : static_cast<float>(rng() % 100000) / 16384.0f), e);
    const long nb = (cols + 31) / 32;
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    filler::quantize_e2m1_block32(v, rows, cols, codes, scales);
    // each block's amax in one pass (blocks of 1 x 32 for e2m1, 32 x 32 for e4m3)
    std::vector<float> row_amax(static_cast<size_t>(rows * nb), 0.0f);
    std::vector<float> tile_amax(static_cast<size_t>((rows + 31) / 32 * nb), 0.0f);
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < cols; ++c) {
        row_amax[r * nb + c / 32] = std::fmax(row_amax[r * nb + c / 32], std::fabs(v[r * cols + c]));
        tile_amax[(r / 32) * nb + c / 32] = std::fmax(tile_amax[(r / 32) * nb + c / 32], std::fabs(v[r * cols + c]));
      }
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < cols; ++c) {
        const float s = std::ldexp(1.0f, filler::pow2_block_exponent(row_amax[r * nb + c / 32], 6.0));
        bad_scales += scales[r * nb + c / 32] != s;
        const uint8_t byte = codes[r * ((cols + 1) / 2) + c / 2];
        bad_e2m1 += ((c & 1) ? byte >> 4 : byte & 15) != e2m1_encode(v[r * cols + c] / s);
      }
    filler::quantize_e4m3_block32x32(v, rows, cols, codes, scales);
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < cols; ++c) {
        const float s = std::ldexp(1.0f, filler::e4m3_block_exponent(tile_amax[(r / 32) * nb + c / 32]));
        bad_scales += scales[(r / 32) * nb + c / 32] != s;
        bad_e4m3 += codes[r * cols + c] != e4m3_encode(v[r * cols + c] / s);
      }
    std::vector<float> row(v.begin(), v.begin() + cols), row_scales(static_cast<size_t>(nb));
    filler::quantize_e4m3_pow2_row(row.data(), static_cast<int>(cols), row_scales.data());
    for (long c = 0; c < cols; ++c) {
      const float s = std::ldexp(1.0f, filler::e4m3_block_exponent(row_amax[c / 32]));  // row 0
      bad_scales += row_scales[c / 32] != s;
      const float want = e4m3_round(v[c] / s);
      bad_rows += std::memcmp(&row[c], &want, sizeof want) != 0;  // -0 stays -0
    }
  }
  CHECK(bad_scales == 0);
  CHECK(bad_e2m1 == 0);
  CHECK(bad_e4m3 == 0);
  CHECK(bad_rows == 0);
}

static bool same_tensor(const HostTensor& a, const HostTensor& b) {
  return a.shape == b.shape && a.format == b.format && a.ggml_type == b.ggml_type && a.payload == b.payload &&
         a.scales.size() == b.scales.size() &&
         (a.scales.empty() ||  // memcmp of a null pointer is undefined, even for 0 bytes
          std::memcmp(a.scales.data(), b.scales.data(), a.scales.size() * sizeof(float)) == 0);
}

// RegeneratedWeights (a model's weights made as it asks for them) against regenerate_weights, on
// the fp8 golden: every kind of storage, derived scales asked for before and after their source.
TEST_CASE("RegeneratedWeights gives regenerate_weights' tensors, one by one") {
  const golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_fp8_golden.json");
  const WeightSet all = golden::regenerate_weights(g);
  long derived = 0;
  for (bool scales_first : {false, true}) {
    golden::RegeneratedWeights lazy(g);
    CHECK(lazy.has("embed.weight"));
    CHECK_FALSE(lazy.has("no.such.weight"));
    std::vector<std::string> names;
    for (const auto& [name, t] : all.all()) names.push_back(name);
    std::stable_partition(names.begin(), names.end(), [&](const std::string& n) {
      return scales_first == (n.size() > 6 && n.compare(n.size() - 6, 6, ".scale") == 0);
    });
    for (const std::string& name : names) {
      const HostTensor& want = all.all().at(name);
      INFO(name);
      CHECK(same_tensor(lazy.load(name, want.shape), want));
      derived += name.size() > 6 && name.compare(name.size() - 6, 6, ".scale") == 0;
    }
  }
  CHECK(derived > 0);  // the golden has derived scales (fp8 Linears, the engram table)
  golden::RegeneratedWeights lazy(g);
  std::string e;
  try { lazy.load("no.such.weight", {2, 3}); } catch (const Error& x) { e = x.what(); }
  CHECK(e.find("missing tensor 'no.such.weight'") != std::string::npos);
  e.clear();
  try { lazy.load("embed.weight", {1, 1}); } catch (const Error& x) { e = x.what(); }
  CHECK(e.find("tensor 'embed.weight' has shape") != std::string::npos);
}

}  // namespace test_filler
