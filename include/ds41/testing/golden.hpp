// ds41/testing/golden.hpp — golden files (`ds41-golden/1`, SCHEMA.md): loading with nlohmann/json,
// regenerating every parameter from its rule, and comparing captures.
//
// Every error names the file and the JSON key that is missing or malformed.
#pragma once
#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>
#include "../core/error.hpp"
#include "../model/config.hpp"
#include "../model/tap.hpp"
#include "../model/weights.hpp"
#include "filler.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::golden {

using json = nlohmann::json;

struct Capture {
  std::vector<long> shape;
  CapType dtype = CapType::kF32;
  long n = 0, stride = 1;
  double ck = 0;
  std::vector<double> data;  // samples at 0, stride, 2·stride, …
};

struct Step {
  int index = 0;
  std::string kind;  // "prefill" | "decode"
  long start_pos = 0;
  std::vector<int32_t> tokens;
  int32_t argmax = -1;
  std::map<std::string, Capture> captures;
  std::vector<std::string> order;  // capture names in file order
};

struct ParamRule {
  std::string name;
  std::vector<long> shape;
  std::string param_dtype, storage;
  double scale = 0, offset = 0;
  std::vector<long> logical_shape;  // fp4 experts: [out, in] (shape is the packed [out, in/2])
};

struct Golden {
  std::string path;
  std::string name;
  ModelConfig config;
  int prompt_len = 0, decode_steps = 0;
  std::vector<int32_t> prompt_tokens, decode_tokens;
  std::vector<ParamRule> params;
  json spot_checks;
  std::vector<Step> steps;
};

// ------------------------------------------------------------------------------------ parsing
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  const json& req(const json& j, const std::string& key, const std::string& where) const {
    DS41_CHECK(j.is_object(), "golden ", file_, ": '", where, "' is not an object");
    auto it = j.find(key);
    DS41_CHECK(it != j.end(), "golden ", file_, ": missing key '", join(where, key), "'");
    return *it;
  }
  double num(const json& j, const std::string& key, const std::string& where) const {
    const json& v = req(j, key, where);
    DS41_CHECK(v.is_number(), "golden ", file_, ": '", join(where, key), "' is not a number");
    return v.get<double>();
  }
  long integer(const json& j, const std::string& key, const std::string& where) const {
    const json& v = req(j, key, where);
    DS41_CHECK(v.is_number_integer(), "golden ", file_, ": '", join(where, key), "' is not an integer");
    return v.get<long>();
  }
  bool boolean(const json& j, const std::string& key, const std::string& where) const {
    const json& v = req(j, key, where);
    DS41_CHECK(v.is_boolean(), "golden ", file_, ": '", join(where, key), "' is not a boolean");
    return v.get<bool>();
  }
  std::string str(const json& j, const std::string& key, const std::string& where) const {
    const json& v = req(j, key, where);
    DS41_CHECK(v.is_string(), "golden ", file_, ": '", join(where, key), "' is not a string");
    return v.get<std::string>();
  }
  template <class T>
  std::vector<T> int_list(const json& j, const std::string& key, const std::string& where) const {
    const json& v = req(j, key, where);
    DS41_CHECK(v.is_array(), "golden ", file_, ": '", join(where, key), "' is not a list");
    std::vector<T> out;
    for (size_t i = 0; i < v.size(); ++i) {
      DS41_CHECK(v[i].is_number_integer(), "golden ", file_, ": '", join(where, key), "[", i, "]' is not an integer");
      out.push_back(static_cast<T>(v[i].get<long long>()));
    }
    return out;
  }
  /// Decimal strings parsed as 64-bit integers (never through a double).
  std::vector<int64_t> decimal_list(const json& j, const std::string& key, const std::string& where) const {
    const json& v = req(j, key, where);
    DS41_CHECK(v.is_array(), "golden ", file_, ": '", join(where, key), "' is not a list");
    std::vector<int64_t> out;
    for (size_t i = 0; i < v.size(); ++i) {
      DS41_CHECK(v[i].is_string(), "golden ", file_, ": '", join(where, key), "[", i,
                 "]' must be a decimal string (64-bit values do not survive a double)");
      const std::string s = v[i].get<std::string>();
      uint64_t u = 0;
      auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), u);
      DS41_CHECK(ec == std::errc() && p == s.data() + s.size() && !s.empty() && u <= INT64_MAX, "golden ", file_,
                 ": '", join(where, key), "[", i, "]' = \"", s, "\" is not a decimal integer in [0, 2^63)");
      out.push_back(static_cast<int64_t>(u));
    }
    return out;
  }
  const std::string& file() const { return file_; }
  static std::string join(const std::string& where, const std::string& key) {
    return where.empty() ? key : where + "." + key;
  }

 private:
  std::string file_;
};

inline ModelConfig parse_config(const Reader& r, const json& fixture) {
  const json& c = r.req(fixture, "config", "fixture");
  const std::string w = "fixture.config";
  ModelConfig m;
  auto I = [&](const char* k) { return static_cast<int>(r.integer(c, k, w)); };
  auto D = [&](const char* k) { return r.num(c, k, w); };
  m.max_seq_len = r.integer(c, "max_seq_len", w);
  m.vocab_size = r.integer(c, "vocab_size", w);
  m.dim = I("dim");
  m.moe_inter_dim = I("moe_inter_dim");
  m.n_layers = I("n_layers");
  m.n_heads = I("n_heads");
  m.n_routed_experts = I("n_routed_experts");
  m.n_shared_experts = I("n_shared_experts");
  m.n_activated_experts = I("n_activated_experts");
  const std::string sf = r.str(c, "score_func", w);
  if (sf == "softmax") m.score_func = ScoreFunc::kSoftmax;
  else if (sf == "sigmoid") m.score_func = ScoreFunc::kSigmoid;
  else if (sf == "sqrtsoftplus") m.score_func = ScoreFunc::kSqrtSoftplus;
  else fail("golden ", r.file(), ": 'fixture.config.score_func' = \"", sf, "\" is not softmax|sigmoid|sqrtsoftplus");
  m.gate_temp = D("gate_temp");
  m.norm_topk_prob = r.boolean(c, "norm_topk_prob", w);
  m.route_scale = D("route_scale");
  m.swiglu_limit = D("swiglu_limit");
  m.q_lora_rank = I("q_lora_rank");
  m.head_dim = I("head_dim");
  m.rope_head_dim = I("rope_head_dim");
  m.norm_eps = D("norm_eps");
  m.o_groups = I("o_groups");
  m.o_lora_rank = I("o_lora_rank");
  m.window_size = I("window_size");
  m.compress_ratios = r.int_list<int>(c, "compress_ratios", w);
  m.kv_source_layers = r.int_list<int>(c, "kv_source_layers", w);
  m.index_source_layers = r.int_list<int>(c, "index_source_layers", w);
  m.compress_rope_theta = D("compress_rope_theta");
  m.original_seq_len = r.integer(c, "original_seq_len", w);
  m.rope_theta = D("rope_theta");
  m.rope_factor = D("rope_factor");
  m.beta_fast = D("beta_fast");
  m.beta_slow = D("beta_slow");
  m.index_n_heads = I("index_n_heads");
  m.index_head_dim = I("index_head_dim");
  m.index_topk = I("index_topk");
  m.candidate_source_layer = I("candidate_source_layer");
  m.candidate_topk_blocks = I("candidate_topk_blocks");
  m.candidate_block_size = I("candidate_block_size");
  m.hc_mult = I("hc_mult");
  m.hc_sinkhorn_iters = I("hc_sinkhorn_iters");
  m.hc_eps = D("hc_eps");
  m.engram_layer_ids = r.int_list<int>(c, "engram_layer_ids", w);
  m.engram_num_embeddings = r.int_list<long>(c, "engram_num_embeddings", w);
  m.engram_max_ngram_size = I("engram_max_ngram_size");
  m.engram_n_heads = I("engram_n_heads");
  m.engram_head_dim = I("engram_head_dim");
  m.engram_pad_id = r.integer(c, "engram_pad_id", w);
  m.engram_compressed_vocab_size = r.integer(c, "engram_compressed_vocab_size", w);
  if (c.contains("engram_vocab_size")) m.engram_vocab_size = r.integer(c, "engram_vocab_size", w);
  // DSpark (SCHEMA §11): absent keys mean a golden without a draft head
  auto opt_int = [&](const char* k) { return c.contains(k) && !c[k].is_null() ? r.integer(c, k, w) : 0L; };
  m.n_mtp_layers = static_cast<int>(opt_int("n_mtp_layers"));
  m.dspark_block_size = static_cast<int>(opt_int("dspark_block_size"));
  m.dspark_noise_token_id = opt_int("dspark_noise_token_id");
  if (c.contains("dspark_target_layer_ids") && !c["dspark_target_layer_ids"].is_null())
    m.dspark_target_layer_ids = r.int_list<int>(c, "dspark_target_layer_ids", w);
  m.dspark_markov_rank = static_cast<int>(opt_int("dspark_markov_rank"));
  m.dspark_n_routed_experts = static_cast<int>(opt_int("dspark_n_routed_experts"));
  m.dspark_n_activated_experts = static_cast<int>(opt_int("dspark_n_activated_experts"));

  const json& e = r.req(fixture, "engram", "fixture");
  if (!e.is_null()) {
    const std::string we = "fixture.engram";
    m.engram.token_map = r.int_list<int32_t>(e, "token_map", we);
    m.engram.pad_id = r.integer(e, "pad_id", we);
    m.engram.primes = r.int_list<int64_t>(e, "primes", we);
    m.engram.offsets = r.int_list<int64_t>(e, "offsets", we);
    m.engram.multipliers = r.decimal_list(e, "multipliers", we);
    for (size_t i = 0; i < m.engram.token_map.size(); ++i)
      DS41_CHECK(m.engram.token_map[i] >= 0 && m.engram.token_map[i] < m.engram_compressed_vocab_size, "golden ",
                 r.file(), ": 'fixture.engram.token_map[", i, "]' = ", m.engram.token_map[i],
                 " outside the compressed vocab [0, ", m.engram_compressed_vocab_size, ")");
  } else {
    DS41_CHECK(m.engram_layer_ids.empty(), "golden ", r.file(),
               ": 'fixture.engram' is null but fixture.config.engram_layer_ids is not empty");
  }
  try {
    m.validate();
  } catch (const Error& ex) {
    fail("golden ", r.file(), ": ", ex.what());
  }
  return m;
}

inline CapType parse_dtype(const Reader& r, const std::string& s, const std::string& where) {
  if (s == "bf16") return CapType::kBF16;
  if (s == "f32") return CapType::kF32;
  if (s == "i32") return CapType::kI32;
  if (s == "bool") return CapType::kBool;
  fail("golden ", r.file(), ": '", where, ".dtype' = \"", s, "\" is not bf16|f32|i32|bool");
}

inline Capture parse_capture(const Reader& r, const json& j, const std::string& where) {
  Capture c;
  c.shape = r.int_list<long>(j, "shape", where);
  c.dtype = parse_dtype(r, r.str(j, "dtype", where), where);
  c.n = r.integer(j, "n", where);
  c.stride = r.integer(j, "stride", where);
  c.ck = r.num(j, "ck", where);
  long prod = 1;
  for (long d : c.shape) {
    DS41_CHECK(d >= 0 && d <= (1L << 31), "golden ", r.file(), ": '", where, ".shape' has a dimension ", d,
               " outside [0, 2^31]");
    DS41_CHECK(d == 0 || prod <= (1L << 40) / d, "golden ", r.file(), ": '", where, ".shape' holds more than 2^40 elements");
    prod *= d;
  }
  DS41_CHECK(prod == c.n, "golden ", r.file(), ": '", where, ".n' = ", c.n, " but shape ",
             shape_str({c.shape.begin(), c.shape.end()}), " holds ", prod);
  DS41_CHECK(c.stride >= 1 && c.stride <= (1L << 40), "golden ", r.file(), ": '", where, ".stride' = ", c.stride,
             " must be in [1, 2^40]");
  const json& d = r.req(j, "data", where);
  DS41_CHECK(d.is_array(), "golden ", r.file(), ": '", where, ".data' is not a list");
  const long expect = (c.n + c.stride - 1) / c.stride;
  DS41_CHECK(static_cast<long>(d.size()) == expect, "golden ", r.file(), ": '", where, ".data' has ", d.size(),
             " samples, expected ", expect, " (n ", c.n, ", stride ", c.stride, ")");
  c.data.reserve(d.size());
  for (size_t i = 0; i < d.size(); ++i) {
    DS41_CHECK(d[i].is_number(), "golden ", r.file(), ": '", where, ".data[", i, "]' is not a number");
    c.data.push_back(d[i].get<double>());
  }
  return c;
}

/// The schema and the fixture of a golden's root object: its name, model configuration and tokens.
inline void parse_fixture(const Reader& r, const json& root, Golden& g) {
  const std::string& path = r.file();
  DS41_CHECK(root.is_object(), "golden ", path, ": top level is not an object");
  const std::string schema = r.str(root, "schema", "");
  DS41_CHECK(schema == "ds41-golden/1", "golden ", path, ": 'schema' = \"", schema, "\", expected \"ds41-golden/1\"");
  const json& fx = r.req(root, "fixture", "");
  g.name = r.str(fx, "name", "fixture");
  g.config = parse_config(r, fx);
  g.prompt_len = static_cast<int>(r.integer(fx, "prompt_len", "fixture"));
  g.decode_steps = static_cast<int>(r.integer(fx, "decode_steps", "fixture"));
  g.prompt_tokens = r.int_list<int32_t>(fx, "prompt_tokens", "fixture");
  g.decode_tokens = r.int_list<int32_t>(fx, "decode_tokens", "fixture");
  DS41_CHECK(static_cast<int>(g.prompt_tokens.size()) == g.prompt_len, "golden ", path,
             ": 'fixture.prompt_tokens' has ", g.prompt_tokens.size(), " tokens, prompt_len is ", g.prompt_len);
  DS41_CHECK(static_cast<int>(g.decode_tokens.size()) == g.decode_steps, "golden ", path,
             ": 'fixture.decode_tokens' has ", g.decode_tokens.size(), " tokens, decode_steps is ", g.decode_steps);
}

/// nlohmann/json SAX events to a root object holding only the top-level members named in `keep`,
/// the others skipped without being built; parsing stops once every kept member has been read.
class TopLevelMembers {
 public:
  explicit TopLevelMembers(std::vector<std::string> keep) : keep_(std::move(keep)), read_(keep_.size(), false) {}
  json root;
  bool complete() const { return std::count(read_.begin(), read_.end(), true) == static_cast<long>(read_.size()); }
  const std::string& error() const { return error_; }

  bool null() { return value(nullptr); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(json::number_integer_t v) { return value(v); }
  bool number_unsigned(json::number_unsigned_t v) { return value(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return value(v); }
  bool string(json::string_t& v) { return value(v); }
  bool binary(json::binary_t& v) { return value(json::binary(v)); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    if (depth_ == 1) {
      member_ = static_cast<size_t>(std::find(keep_.begin(), keep_.end(), k) - keep_.begin());
      kept_ = member_ < keep_.size();
    }
    key_ = k;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    error_ = ex.what();
    return false;
  }

 private:
  // a value at the current place: the root, a kept member or inside one (else skipped)
  json* place(json v) {
    if (depth_ == 0) {
      root = std::move(v);
      return &root;
    }
    if (!kept_ || !root.is_object()) return nullptr;
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    return &(parent[key_] = std::move(v));
  }
  template <class V>
  bool value(V&& v) {
    place(json(std::forward<V>(v)));
    if (depth_ == 1 && kept_) read_[member_] = true;
    return !complete();
  }
  bool open(json v) {
    json* p = place(std::move(v));
    ++depth_;
    if (p) open_.push_back(p);
    return true;
  }
  bool close() {
    if (depth_ == 1 || (depth_ > 1 && kept_)) open_.pop_back();
    --depth_;
    if (depth_ == 1 && kept_) read_[member_] = true;
    return !complete();
  }
  std::vector<std::string> keep_;
  std::vector<json*> open_;  // the kept containers being filled, innermost last (the root first)
  std::vector<bool> read_;   // each kept member: read whole
  std::string key_, error_;
  size_t depth_ = 0, member_ = 0;  // member_: the kept member being read (kept_)
  bool kept_ = false;
};

/// Parse and check a golden held in memory; `path` names it in messages. Throws ds41::Error
/// naming the file and the key on any problem.
inline Golden parse(std::string_view text, const std::string& path) {
  json root;
  try {
    root = json::parse(text.begin(), text.end());
  } catch (const std::exception& ex) {
    fail("golden ", path, ": not valid JSON (", ex.what(), ")");
  }
  Reader r(path);
  Golden g;
  g.path = path;
  parse_fixture(r, root, g);

  const json& wm = r.req(root, "weights_meta", "");
  const json& params = r.req(wm, "params", "weights_meta");
  DS41_CHECK(params.is_array(), "golden ", path, ": 'weights_meta.params' is not a list");
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string where = "weights_meta.params[" + std::to_string(i) + "]";
    ParamRule p;
    p.name = r.str(params[i], "name", where);
    p.shape = r.int_list<long>(params[i], "shape", where);
    long numel = 1;
    for (long d : p.shape) {
      DS41_CHECK(d > 0 && d <= (1L << 31) && numel <= (1L << 36) / d, "golden ", path, ": '", where,
                 ".shape' = ", shape_str({p.shape.begin(), p.shape.end()}), " is not a plausible parameter shape");
      numel *= d;
    }
    p.param_dtype = r.str(params[i], "param_dtype", where);
    p.storage = r.str(params[i], "storage", where);
    p.scale = r.num(params[i], "scale", where);
    p.offset = r.num(params[i], "offset", where);
    if (p.storage == "e2m1_pow2_block32") {  // SCHEMA §10.2: the logical [out, in] of a packed fp4 weight
      p.logical_shape = r.int_list<long>(params[i], "logical_shape", where);
      DS41_CHECK(p.shape.size() == 2 && p.logical_shape.size() == 2 && p.logical_shape[0] == p.shape[0] &&
                     p.logical_shape[1] > 0 && p.logical_shape[1] % 32 == 0 && p.logical_shape[1] == 2 * p.shape[1],
                 "golden ", path, ": '", where, ".logical_shape' = ",
                 shape_str({p.logical_shape.begin(), p.logical_shape.end()}), " does not fit packed shape ",
                 shape_str({p.shape.begin(), p.shape.end()}), " (expected [out, 2·in/2] with in a multiple of 32)");
    }
    g.params.push_back(std::move(p));
  }
  g.spot_checks = root.contains("spot_checks") ? root["spot_checks"] : json::array();

  const json& steps = r.req(root, "steps", "");
  DS41_CHECK(steps.is_array() && !steps.empty(), "golden ", path, ": 'steps' must be a non-empty list");
  DS41_CHECK(static_cast<int>(steps.size()) == 1 + g.decode_steps, "golden ", path, ": 'steps' has ", steps.size(),
             " entries, expected 1 prefill + ", g.decode_steps, " decode steps");
  for (size_t i = 0; i < steps.size(); ++i) {
    const std::string where = "steps[" + std::to_string(i) + "]";
    Step s;
    s.index = static_cast<int>(i);
    s.kind = r.str(steps[i], "kind", where);
    s.start_pos = r.integer(steps[i], "start_pos", where);
    s.tokens = r.int_list<int32_t>(steps[i], "tokens", where);
    s.argmax = static_cast<int32_t>(r.integer(steps[i], "argmax", where));
    const long expect_pos = i == 0 ? 0 : g.prompt_len + static_cast<long>(i) - 1;
    DS41_CHECK(s.kind == (i == 0 ? "prefill" : "decode"), "golden ", path, ": '", where, ".kind' = \"", s.kind,
               "\", expected ", (i == 0 ? "prefill" : "decode"));
    DS41_CHECK(s.start_pos == expect_pos, "golden ", path, ": '", where, ".start_pos' = ", s.start_pos,
               ", expected ", expect_pos);
    const json& caps = r.req(steps[i], "captures", where);
    DS41_CHECK(caps.is_object(), "golden ", path, ": '", where, ".captures' is not an object");
    for (auto it = caps.begin(); it != caps.end(); ++it) {
      s.captures[it.key()] = parse_capture(r, it.value(), where + ".captures." + it.key());
      s.order.push_back(it.key());
    }
    g.steps.push_back(std::move(s));
  }
  return g;
}

/// A golden file opened for reading, or an error naming it.
inline std::ifstream open_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DS41_CHECK(in.good(), "golden ", path, ": cannot open file");
  return in;
}

/// Load and check a golden file.
inline Golden load(const std::string& path) {
  std::ifstream in = open_file(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  DS41_CHECK(!in.bad(), "golden ", path, ": read error");
  return parse(text, path);
}

/// A golden file's fixture alone: its name, model configuration and tokens (no parameter rules, no
/// steps), checked as load() checks them. What choosing goldens by their model needs: the file is
/// read up to the fixture's end, its steps (nearly all of it) neither parsed nor kept.
inline Golden load_fixture(const std::string& path) {
  std::ifstream in = open_file(path);
  TopLevelMembers sax({"schema", "fixture"});
  const bool whole = json::sax_parse(in, &sax);
  DS41_CHECK(!in.bad(), "golden ", path, ": read error");
  // stopped early (false) once both were read, or at the end of a file that lacks one of them
  DS41_CHECK(whole || sax.complete(), "golden ", path, ": not valid JSON (", sax.error(), ")");
  Reader r(path);
  Golden g;
  g.path = path;
  parse_fixture(r, sax.root, g);
  return g;
}

// ------------------------------------------------------------------------------------ compare
/// Bounds (SCHEMA §9). bf16 captures: 1e-3 relative L2 — a faithful implementation differs only by
/// rare 1-ulp roundings from accumulation order (one bf16 ulp is 2^-8 ≈ 3.9e-3 relative, so 1e-3
/// over a tensor tolerates a few such elements but not a systematic error). f32 captures: 1e-5 —
/// their inputs agree, so only float32 summation order differs (~1e-7 per op).
constexpr double kBf16Bound = 1e-3;
constexpr double kF32Bound = 1e-5;

struct Result {
  std::string name;
  std::vector<long> shape;
  CapType dtype = CapType::kF32;
  bool present_mine = true;
  bool shape_ok = true;
  double rel_l2 = 0;      // float captures
  double ck_rel = 0;      // |ck_mine - ck| / Σ|v|(i+1)
  long mismatches = 0;    // integer captures: differing elements; float: samples not bit-equal
  bool exact = false;     // every sample bit-identical (and ck within rounding)
  bool pass = false;
  std::string note;
  struct Diff {
    long index;
    double mine, gold;
  };
  std::vector<Diff> first_diffs;  // up to 8 differing samples (flat index, mine, golden)
};

/// Compare one capture of mine (full tensor) with the golden's.
inline Result compare(const std::string& name, const Capture& gold, const std::vector<long>& shape, CapType type,
                      const std::vector<float>* f32, const std::vector<int32_t>* i32) {
  Result r;
  r.name = name;
  r.shape = gold.shape;
  r.dtype = gold.dtype;
  if (shape != gold.shape) {
    r.shape_ok = false;
    r.note = "shape " + shape_str({shape.begin(), shape.end()}) + " != golden " +
             shape_str({gold.shape.begin(), gold.shape.end()});
    return r;
  }
  const bool is_int = gold.dtype == CapType::kI32 || gold.dtype == CapType::kBool;
  auto value = [&](long i) -> double { return f32 ? static_cast<double>((*f32)[i]) : static_cast<double>((*i32)[i]); };
  const long n = gold.n;
  if (is_int) {
    for (long i = 0, s = 0; i < n; i += gold.stride, ++s)
      if (value(i) != gold.data[s]) {
        ++r.mismatches;
        if (r.first_diffs.size() < 8) r.first_diffs.push_back({i, value(i), gold.data[s]});
      }
    double ck = 0;
    for (long i = 0; i < n; ++i) ck += value(i) * static_cast<double>(i + 1);
    if (ck != gold.ck) {
      r.note = "checksum differs";
      if (!r.mismatches) r.mismatches = 1;
    }
    r.exact = r.mismatches == 0;
    r.pass = r.exact;
    return r;
  }
  double num = 0, den = 0;
  long diff = 0;
  for (long i = 0, s = 0; i < n; i += gold.stride, ++s) {
    double g = static_cast<double>(static_cast<float>(gold.data[s]));
    double m = value(i);
    num += (m - g) * (m - g);
    den += g * g;
    if (m != g) {
      ++diff;
      if (r.first_diffs.size() < 8) r.first_diffs.push_back({i, m, g});
    }
  }
  r.rel_l2 = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  double ck = 0, mag = 0;
  for (long i = 0; i < n; ++i) {
    ck += value(i) * static_cast<double>(i + 1);
    mag += std::fabs(value(i)) * static_cast<double>(i + 1);
  }
  r.ck_rel = mag > 0 ? std::fabs(ck - gold.ck) / mag : std::fabs(ck - gold.ck);
  r.mismatches = diff;
  const double bound = gold.dtype == CapType::kBF16 ? kBf16Bound : kF32Bound;
  r.exact = diff == 0 && r.ck_rel <= 1e-12;
  r.pass = r.rel_l2 <= bound && r.ck_rel <= bound;
  (void)type;
  return r;
}

}  // namespace ds41::golden
#include "../core/fp_exact_end.hpp"
// the parameters a golden's rules make (regenerate_weights, RegeneratedWeights), after what they use
#include "golden_weights.hpp"
