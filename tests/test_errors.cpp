// Bad input gives a clear ds41::Error naming what is wrong — never a crash, never garbage.
#include <doctest/doctest.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include "ds41/ds41.hpp"
#include "ds41/testing/golden.hpp"
#include "golden_checks.hpp"
#include "temp_dir.hpp"

namespace test_errors {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
using json = nlohmann::json;

#define CHECK_ERROR_MENTIONS(expr, text)                                              \
  do {                                                                                \
    bool thrown = false;                                                              \
    try {                                                                             \
      expr;                                                                           \
    } catch (const ds41::Error& e) {                                                  \
      thrown = true;                                                                  \
      INFO("message: " << e.what());                                                  \
      CHECK(std::string(e.what()).find(text) != std::string::npos);                   \
    }                                                                                 \
    CHECK_MESSAGE(thrown, "expected ds41::Error mentioning '" << text << "'");        \
  } while (0)

namespace {
const json& raw_golden() {
  static json j = [] {
    std::ifstream in(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
    return json::parse(in);
  }();
  return j;
}
/// Writes `text` to a file in this binary's temporary directory (removed at exit with its files).
std::string write_temp(const std::string& name, const std::string& text) {
  static testing::TempDir dir("ds41-errors");
  const std::string p = dir.file(name);
  std::ofstream(p) << text;
  return p;
}
}  // namespace

TEST_CASE("model API misuse") {
  const auto& g = testing::tiny_golden();
  Model<HostBackend> m(g.config, testing::tiny_weights());
  CHECK_ERROR_MENTIONS(m.decode(1), "decode before prefill");
  CHECK_ERROR_MENTIONS(m.prefill({}), "empty prompt");
  CHECK_ERROR_MENTIONS(m.prefill({1, 2, static_cast<int32_t>(g.config.vocab_size)}), "out of range");
  CHECK_ERROR_MENTIONS(m.prefill({-1}), "out of range");
  CHECK_FALSE(m.active());  // failed prefills leave nothing behind
  std::vector<int32_t> too_long(g.config.max_seq_len + 1, 3);
  CHECK_ERROR_MENTIONS(m.prefill(too_long), "max_seq_len");
  std::vector<int32_t> fills(g.config.max_seq_len - 1, 3);
  m.prefill(fills);
  CHECK_ERROR_MENTIONS(m.prefill({1}), "already in flight");
  CHECK_ERROR_MENTIONS(m.decode(static_cast<int32_t>(g.config.vocab_size) + 5), "out of range");
  m.decode(4);  // the last position
  CHECK(m.position() == g.config.max_seq_len);
  CHECK_ERROR_MENTIONS(m.decode(4), "max_seq_len");
  m.release();
  CHECK_FALSE(m.active());
  CHECK_ERROR_MENTIONS(m.decode(1), "decode before prefill");
  // after release a new sequence runs and gives the golden's answer again
  CHECK(m.prefill(g.prompt_tokens).argmax == g.steps[0].argmax);
}

TEST_CASE("weight sets with a missing or wrongly shaped tensor") {
  const auto& g = testing::tiny_golden();
  WeightSet w = testing::tiny_weights();
  HostTensor bad = w.at("layers.2.attn.wq_b.weight", {256, 32});
  bad.shape = {256, 31};
  w.put("layers.2.attn.wq_b.weight", bad);
  CHECK_ERROR_MENTIONS((Model<HostBackend>(g.config, w)), "layers.2.attn.wq_b.weight");
  WeightSet w2;
  CHECK_ERROR_MENTIONS((Model<HostBackend>(g.config, w2)), "missing tensor 'embed.weight'");
}

TEST_CASE("invalid configurations are rejected with the field named") {
  ModelConfig c = testing::tiny_golden().config;
  c.n_shared_experts = 2;
  CHECK_ERROR_MENTIONS(c.validate(), "n_shared_experts");
  c = testing::tiny_golden().config;
  c.index_source_layers = {3, 5};  // layers 1 and 2 then have no index source before them
  CHECK_ERROR_MENTIONS(c.validate(), "no index source precedes it");
  c = testing::tiny_golden().config;
  c.engram.multipliers.pop_back();
  CHECK_ERROR_MENTIONS(c.validate(), "multipliers");
  c = testing::tiny_golden().config;
  c.engram.offsets.back() += 100000;  // hash rows would fall past the table
  CHECK_ERROR_MENTIONS(c.validate(), "exceeds the table");
}

TEST_CASE("golden files: load_fixture reads the fixture as load() does, wherever it lies, and nothing after it") {
  const json& j = raw_golden();
  const golden::Golden full = golden::parse(j.dump(), "raw");
  auto check_same = [&](const golden::Golden& f) {
    CHECK(f.name == full.name);
    CHECK(f.prompt_tokens == full.prompt_tokens);
    CHECK(f.decode_tokens == full.decode_tokens);
    CHECK(f.config.dim == full.config.dim);
    CHECK(f.config.n_layers == full.config.n_layers);
    CHECK(f.config.vocab_size == full.config.vocab_size);
    CHECK(f.config.max_seq_len == full.config.max_seq_len);
    CHECK(f.config.compress_ratios == full.config.compress_ratios);
    CHECK(f.config.engram.multipliers == full.config.engram.multipliers);
    CHECK(f.params.empty());
    CHECK(f.steps.empty());
  };
  // nlohmann::json writes its keys sorted: coverage and margins come before the fixture is
  // complete (schema follows it), steps and weights_meta after
  check_same(golden::load_fixture(write_temp("sorted.json", j.dump())));
  // the fixture last: every member before it skipped
  nlohmann::ordered_json last;
  for (const char* k : {"steps", "weights_meta", "schema", "coverage", "fixture"}) last[k] = j[k];
  check_same(golden::load_fixture(write_temp("last.json", last.dump())));
  // schema and fixture first: reading stops there; what follows is never parsed (load() refuses it)
  const std::string head = "{\"schema\": \"ds41-golden/1\", \"fixture\": " + j["fixture"].dump();
  check_same(golden::load_fixture(write_temp("first.json", head + ", \"steps\": [1, 2, this is not json")));
  CHECK_ERROR_MENTIONS(golden::load(write_temp("first2.json", head + ", \"steps\": [1, 2, this is not json")),
                       "not valid JSON");
  golden::TopLevelMembers sax({"schema", "fixture"});
  CHECK_FALSE(json::sax_parse(head + ", \"steps\": [1, 2, this is not json", &sax));  // stopped...
  CHECK(sax.complete());
  CHECK(sax.error().empty());  // ...at the fixture's end, not at the error after it
  CHECK(sax.root.size() == 2);

  CHECK_ERROR_MENTIONS(golden::load_fixture("/nonexistent/golden.json"), "cannot open");
  CHECK_ERROR_MENTIONS(golden::load_fixture(write_temp("fx_empty.json", "")), "not valid JSON");
  CHECK_ERROR_MENTIONS(golden::load_fixture(write_temp("fx_array.json", "[{\"fixture\": 1}]")), "not an object");
  const std::string schema = "{\"schema\": \"ds41-golden/1\", ";
  CHECK_ERROR_MENTIONS(golden::load_fixture(write_temp("fx_bad.json", schema + "\"fixture\": {\"x\": ]")),
                       "not valid JSON");
  CHECK_ERROR_MENTIONS(golden::load_fixture(write_temp("fx_none.json", schema + "\"steps\": []}")),
                       "missing key 'fixture'");
  json k = j;
  k["fixture"]["config"].erase("dim");
  CHECK_ERROR_MENTIONS(golden::load_fixture(write_temp("fx_nodim.json", k.dump())), "fixture.config.dim");
  k = j;
  k["schema"] = "ds41-golden/2";
  CHECK_ERROR_MENTIONS(golden::load_fixture(write_temp("fx_schema.json", k.dump())), "schema");
}

TEST_CASE("golden files: missing, not JSON, missing keys, bad values") {
  CHECK_ERROR_MENTIONS(golden::load("/nonexistent/golden.json"), "cannot open");
  CHECK_ERROR_MENTIONS(golden::load(write_temp("notjson.json", "{ this is not json")), "not valid JSON");
  CHECK_ERROR_MENTIONS(golden::load(write_temp("empty.json", "")), "not valid JSON");
  CHECK_ERROR_MENTIONS(golden::load(write_temp("array.json", "[1,2]")), "not an object");

  json j = raw_golden();
  j["fixture"]["config"].erase("dim");
  CHECK_ERROR_MENTIONS(golden::load(write_temp("nodim.json", j.dump())), "fixture.config.dim");

  j = raw_golden();
  j["fixture"]["engram"]["multipliers"][1] = "12x4";
  CHECK_ERROR_MENTIONS(golden::load(write_temp("badmult.json", j.dump())), "fixture.engram.multipliers[1]");
  j = raw_golden();
  j["fixture"]["engram"]["multipliers"][0] = 37968138307073165.0;  // a number: would lose bits
  CHECK_ERROR_MENTIONS(golden::load(write_temp("nummult.json", j.dump())), "decimal string");

  j = raw_golden();
  j["steps"][2]["captures"]["layers.0.q"]["data"].erase(0);
  CHECK_ERROR_MENTIONS(golden::load(write_temp("shortdata.json", j.dump())), "steps[2].captures.layers.0.q.data");

  j = raw_golden();
  j["steps"][0]["captures"]["embed"]["shape"] = json::array({23, 65});
  CHECK_ERROR_MENTIONS(golden::load(write_temp("badshape.json", j.dump())), "steps[0].captures.embed.n");

  j = raw_golden();
  j["schema"] = "ds41-golden/2";
  CHECK_ERROR_MENTIONS(golden::load(write_temp("schema.json", j.dump())), "schema");

  j = raw_golden();
  j["fixture"]["config"]["score_func"] = "relu";
  CHECK_ERROR_MENTIONS(golden::load(write_temp("score.json", j.dump())), "score_func");

  j = raw_golden();
  j["weights_meta"]["params"][3]["storage"] = "int4";
  golden::Golden g = golden::load(write_temp("storage.json", j.dump()));
  CHECK_ERROR_MENTIONS(golden::regenerate_weights(g), "unknown storage");
  CHECK_ERROR_MENTIONS(golden::RegeneratedWeights{g}, "unknown storage");  // when made, not when asked

  // a derived scale whose source holds no scales (the engram table made bf16)
  j = raw_golden();
  bool table = false;
  for (auto& p : j["weights_meta"]["params"])
    if (p["storage"] == "e4m3_pow2_block32") p["storage"] = "bf16", table = true;
  REQUIRE(table);
  g = golden::load(write_temp("derived.json", j.dump()));
  CHECK_ERROR_MENTIONS(golden::regenerate_weights(g), "has no quantised source parameter");
  CHECK_ERROR_MENTIONS(golden::RegeneratedWeights{g}, "has no quantised source parameter");
}

TEST_CASE("golden comparison reports mismatches") {
  const auto& g = testing::tiny_golden();
  const golden::Capture& c = g.steps[1].captures.at("layers.0.attn_in");
  std::vector<float> mine(c.data.begin(), c.data.end());
  auto r = golden::compare("x", c, c.shape, CapType::kBF16, &mine, nullptr);
  CHECK(r.pass);
  CHECK(r.exact);
  mine[3] += 0.5f;
  r = golden::compare("x", c, c.shape, CapType::kBF16, &mine, nullptr);
  CHECK_FALSE(r.pass);
  CHECK(r.mismatches == 1);
  r = golden::compare("x", c, {2, 32}, CapType::kBF16, &mine, nullptr);
  CHECK_FALSE(r.pass);
  const golden::Capture& ids = g.steps[0].captures.at("layers.0.moe_indices");
  std::vector<int32_t> mi(ids.data.begin(), ids.data.end());
  CHECK(golden::compare("i", ids, ids.shape, CapType::kI32, nullptr, &mi).pass);
  mi[5] ^= 1;
  CHECK_FALSE(golden::compare("i", ids, ids.shape, CapType::kI32, nullptr, &mi).pass);
}

#undef CHECK_ERROR_MENTIONS

}  // namespace test_errors
