// The deterministic filler against the golden's own spot checks (SCHEMA §1.6) and the hash
// primitives against independently known values.
#include <doctest/doctest.h>
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

}  // namespace test_filler
