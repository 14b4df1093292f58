// ds41/io/gguf_draft.hpp — DSpark draft files: DeepSeek-V4.1's draft head (mtp.*, SCHEMA §11) as
// the separate GGUF published conversions ship it next to the main model (docs/GGUF.md "DSpark
// draft files"). Two families exist:
//
//  (A) dflash — llama.cpp's draft architecture (general.architecture "dflash"; the V4.1 forks'
//      converters, JigSawPT's DeepseekV41DSparkModel): root tensors fc (main_proj),
//      enc.output_norm (main_norm), output_norm (the last stage's norm), markov_w1 / markov_w2
//      (the Markov head's embedding / head), conf_proj (confidence); stage s as blk.s.* with
//      llama.cpp's deepseek suffixes; keys dflash.block_count (stages), dflash.block_size,
//      dflash.target_layers (V4.1 ids as they are), dflash.dsv41_semantics,
//      tokenizer.ggml.mask_token_id (the noise token), dflash.expert_count / expert_used_count
//      and the backbone's shape keys under dflash.;
//  (B) ds4 "support GGUF" — antirez's ds4 and its forks: mtp.s.* with ds4's suffixes, the roots
//      as mtp.0.main_proj / mtp.0.main_norm / mtp.{S-1}.norm / mtp.{S-1}.markov_head.markov_w1,
//      markov_w2 / mtp.{S-1}.confidence_head.proj; keys dspark.* (or deepseek4.dspark_* /
//      deepseek4.dspark.*, as the forks spell them); the stage count from the largest mtp.N.
//
// GgufDraft reads one (the family recognised from its tensor names), checks that it fits the
// main model and serves the reference names mtp.* (GgufWeights composes it with the main file);
// write_draft (gguf_weights.hpp) writes one.
#pragma once
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include "../model/config.hpp"
#include "../model/weights.hpp"
#include "gguf_config.hpp"
#include "gguf_model.hpp"
#include "gguf_names.hpp"
#include "gguf_reader.hpp"
#include "gguf_writer.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::gguf {

enum class DraftFamily { kDflash, kDs4 };
inline const char* draft_family_name(DraftFamily f) { return f == DraftFamily::kDflash ? "dflash" : "ds4"; }
/// "dflash" or "ds4" -> the family; nothing for another name.
inline std::optional<DraftFamily> draft_family_from_name(const std::string& n) {
  if (n == "dflash") return DraftFamily::kDflash;
  if (n == "ds4") return DraftFamily::kDs4;
  return std::nullopt;
}

/// The draft head's own tensors (not a stage's layer tensors): the reference suffix after
/// "mtp.{stage}.", on stage 0 (main_*) or the last stage, and each family's GGUF name (dflash:
/// the whole name; ds4: the suffix after "mtp.{stage}.").
struct DraftRootName {
  const char* ref;
  bool last_stage;
  const char* dflash;
  const char* ds4;
};
inline constexpr DraftRootName kDraftRoots[] = {
    {"main_proj.weight", false, "fc.weight", "main_proj.weight"},
    {"main_norm.weight", false, "enc.output_norm.weight", "main_norm.weight"},
    {"norm.weight", true, "output_norm.weight", "norm.weight"},
    {"markov_head.embed.weight", true, "markov_w1.weight", "markov_head.markov_w1.weight"},
    {"markov_head.head.weight", true, "markov_w2.weight", "markov_head.markov_w2.weight"},
    {"confidence_head.proj.weight", true, "conf_proj.weight", "confidence_head.proj.weight"},
};
/// The architecture ds41 writes for a ds4 support file (fireworm71's and its forks' spelling).
inline constexpr const char* kDs4DraftArch = "deepseek41-dspark";

inline std::string draft_stage_prefix(DraftFamily f, int s) {
  return (f == DraftFamily::kDflash ? "blk." : "mtp.") + std::to_string(s) + ".";
}
inline Dialect draft_dialect(DraftFamily f) { return f == DraftFamily::kDflash ? Dialect::kLlamaCpp : Dialect::kDs4; }
inline std::string draft_root_gguf(DraftFamily f, const DraftRootName& r, int stages) {
  if (f == DraftFamily::kDflash) return r.dflash;
  return "mtp." + std::to_string(r.last_stage ? stages - 1 : 0) + "." + r.ds4;
}

/// "mtp.N.rest" -> N and rest; nothing for another name.
inline std::optional<std::pair<int, std::string>> split_stage(const std::string& name, const char* prefix) {
  const size_t n = std::char_traits<char>::length(prefix);
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  char* end = nullptr;
  const long s = std::strtol(name.c_str() + n, &end, 10);
  if (end == name.c_str() + n || *end != '.' || s < 0 || s > 1024) return std::nullopt;
  return std::pair<int, std::string>{static_cast<int>(s), std::string(end + 1)};
}

/// The GGUF location of a draft reference tensor (mtp.*) in family f of a draft of `stages`
/// stages, or nothing when the name is not one the draft head uses.
inline std::optional<NameRef> to_draft_gguf(const std::string& ref, DraftFamily f, int stages) {
  const auto sr = split_stage(ref, "mtp.");
  if (!sr || sr->first >= stages) return std::nullopt;
  const int s = sr->first;
  const std::string& rest = sr->second;
  for (const DraftRootName& r : kDraftRoots)
    if (rest == r.ref) {
      if (s != (r.last_stage ? stages - 1 : 0)) return std::nullopt;
      return NameRef{draft_root_gguf(f, r, stages)};
    }
  const std::string p = draft_stage_prefix(f, s);
  for (const LayerName& n : kLayerNames)
    if (rest == n.ref) return NameRef{p + layer_suffix(draft_dialect(f), n)};
  const std::string ex = "ffn.experts.";
  if (rest.rfind(ex, 0) == 0) {
    char* end = nullptr;
    const char* q = rest.c_str() + ex.size();
    const long e = std::strtol(q, &end, 10);
    if (end == q || e < 0) return std::nullopt;
    const std::string w(end);
    for (int k = 1; k <= 3; ++k)
      if (w == ".w" + std::to_string(k) + ".weight") return NameRef{p + expert_tensor(k), Part::kExpertSlice, static_cast<int>(e)};
  }
  return std::nullopt;
}

/// The reference name a draft file's tensor holds (merged experts: "mtp.s.ffn.experts.wK.weight"),
/// or nothing (a tensor ds41 ignores or does not know).
inline std::optional<std::string> from_draft_gguf(const std::string& name, DraftFamily f, int stages) {
  for (const DraftRootName& r : kDraftRoots)
    if (name == draft_root_gguf(f, r, stages))
      return "mtp." + std::to_string(r.last_stage ? stages - 1 : 0) + "." + r.ref;
  const auto sr = split_stage(name, f == DraftFamily::kDflash ? "blk." : "mtp.");
  if (!sr || sr->first >= stages) return std::nullopt;
  const std::string p = "mtp." + std::to_string(sr->first) + ".";
  for (const LayerName& n : kLayerNames)
    if (sr->second == layer_suffix(draft_dialect(f), n)) return p + n.ref;
  for (int k = 1; k <= 3; ++k)
    if (sr->second == expert_tensor(k)) return p + "ffn.experts.w" + std::to_string(k) + ".weight";
  return std::nullopt;
}

/// Tensors of published draft files that ds41 accepts and does not use: the vision router bias
/// (exp_probs_b_vl), V4's hc_head (dflash output_hc_*, ds4 forks' derived mtp.{S-1}.hc_head_*),
/// and a confidence bias (GgufDraft checks it is zero: V4.1's confidence head has none).
inline bool ignored_draft_tensor(const std::string& name, DraftFamily f) {
  auto ends = [&](const std::string& s) {
    return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends(".exp_probs_b_vl.bias")) return true;
  if (f == DraftFamily::kDflash) return name.rfind("output_hc_", 0) == 0 || name == "conf_proj.bias";
  return (name.rfind("mtp.", 0) == 0 && name.find(".hc_head_") != std::string::npos) ||
         (name.rfind("mtp.", 0) == 0 && ends(".confidence_head.proj.bias"));
}

// ------------------------------------------------------------------------------------ metadata
/// The ds4 family's key spellings for one field: "dspark.<name>" and the forks'
/// "deepseek4.dspark_<name>" / "deepseek4.dspark.<name>" (and deepseek41. likewise), each
/// name in `names`.
inline std::vector<std::string> ds4_draft_keys(std::initializer_list<const char*> names) {
  std::vector<std::string> out;
  for (const char* n : names)
    for (const char* p : {"dspark.", "deepseek4.dspark_", "deepseek4.dspark.", "deepseek41.dspark_", "deepseek41.dspark."})
      out.push_back(std::string(p) + n);
  return out;
}

/// Which family a draft file is, from its tensor names (and dflash's architecture); a file that is
/// neither is refused, saying what it looks like.
inline DraftFamily detect_draft_family(const GgufShards& s) {
  const Value* a = s.meta().find("general.architecture");
  const std::string arch = a && a->type == ValueType::kString ? a->str : "";
  const bool fc = s.find("fc.weight") != nullptr, mtp = s.find("mtp.0.main_proj.weight") != nullptr;
  if (fc && (arch == "dflash" || arch == "dspark")) return DraftFamily::kDflash;
  if (mtp) return DraftFamily::kDs4;
  const std::string pre = "gguf draft " + s.path() + ": ";
  if (arch == "dflash" || arch == "dspark")
    fail(pre, "a '", arch, "' draft file without its tensor 'fc.weight' (main_proj); the file is incomplete");
  if (arch == kArch || s.find("token_embd.weight"))
    fail(pre, "not a DSpark draft file but a main model file (general.architecture \"", arch, "\", ", s.tensors().size(),
         " tensors, no draft tensors fc.weight or mtp.0.main_proj.weight); give the draft head's own file");
  fail(pre, "not a DSpark draft file (general.architecture \"", arch.empty() ? std::string("(none)") : arch,
       "\", no tensor fc.weight (llama.cpp's dflash) or mtp.0.main_proj.weight (ds4's support GGUF))");
}

/// What a draft file states about its head, read from its metadata and tensors alone (no main
/// model): ds41-gguf info shows it, GgufDraft fits it to the main model.
struct DraftFields {
  DraftFamily family = DraftFamily::kDflash;
  std::string arch;
  int stages = 0;            // dflash: block_count; ds4: 1 + the largest mtp.N (stage_count must agree)
  long block_size = 0;
  long noise_token_id = 0;   // dflash: tokenizer.ggml.mask_token_id
  std::vector<int> target_layer_ids;
  long markov_rank = 0;      // the Markov embedding's columns (a key, where present, must agree)
  long vocab = 0;            // the Markov embedding's rows
  long experts = 0;          // stacked in stage 0's ffn_gate_exps (a key, where present, must agree)
  long active_experts = 0;
};

/// Typed reads of a draft file's metadata; errors name the file and the keys tried.
class DraftMeta {
 public:
  explicit DraftMeta(const GgufShards& s) : s_(s) {}
  std::string where() const { return "gguf draft " + s_.path() + ": "; }
  const TensorInfo* need(const std::string& n, const std::string& why) const {
    const TensorInfo* t = s_.find(n);
    DS41_CHECK(t, where(), "missing tensor '", n, "' (", why, ")");
    return t;
  }
  /// The first of `keys` present (nullptr when none); every other one present must agree.
  const Value* one_of(const std::vector<std::string>& keys) const {
    const Value* v = nullptr;
    std::string first;
    for (const std::string& k : keys)
      if (const Value* x = s_.meta().find(k)) {
        if (!v) {
          v = x, first = k;
          continue;
        }
        DS41_CHECK(same_value(*x, *v), where(), "keys '", first, "' and '", k, "' disagree");
      }
    return v;
  }
  long int_key(const std::vector<std::string>& keys, const char* what, std::optional<long> fallback = std::nullopt) const {
    const Value* v = one_of(keys);
    if (!v) {
      DS41_CHECK(fallback, where(), "missing key '", keys.front(), "' (", what, ")", keys.size() > 1 ? "; also read: " : "",
                 keys.size() > 1 ? join(keys, 1) : std::string());
      return *fallback;
    }
    DS41_CHECK(v->is_int(), where(), "key for ", what, " has type ", value_type_name(v->type), ", expected an integer");
    return static_cast<long>(v->as_i64());
  }
  std::vector<int> ints_key(const std::vector<std::string>& keys, const char* what) const {
    const Value* v = one_of(keys);
    DS41_CHECK(v, where(), "missing key '", keys.front(), "' (", what, ")", keys.size() > 1 ? "; also read: " : "",
               keys.size() > 1 ? join(keys, 1) : std::string());
    DS41_CHECK(v->type == ValueType::kArray, where(), "key for ", what, " has type ", value_type_name(v->type),
               ", expected an array of integers");
    std::vector<int> out;
    for (const Value& x : v->arr) {
      DS41_CHECK(x.is_int() && x.as_i64() >= -1 && x.as_i64() < (1 << 20), where(), "key for ", what,
                 " holds a value that is not a layer id");
      out.push_back(static_cast<int>(x.as_i64()));
    }
    return out;
  }

  /// The fields of a draft file of family f.
  DraftFields read(DraftFamily family) const {
    DraftFields d;
    d.family = family;
    const GgufFile& f = s_.meta();
    if (const Value* a = f.find("general.architecture"); a && a->type == ValueType::kString) d.arch = a->str;
    int from_tensors = 0;
    const char* prefix = family == DraftFamily::kDflash ? "blk." : "mtp.";
    for (const auto& kv : s_.tensors())
      if (auto sr = split_stage(kv.first, prefix)) from_tensors = std::max(from_tensors, sr->first + 1);
    DS41_CHECK(from_tensors > 0, where(), "no stage tensors (", prefix, "N.*)");
    d.stages = from_tensors;
    std::optional<long> E, R;
    if (family == DraftFamily::kDflash) {
      const std::string p = d.arch + ".";
      d.stages = static_cast<int>(int_key({p + "block_count"}, "the stage count", from_tensors));
      d.block_size = int_key({p + "block_size"}, "the draft block size");
      d.target_layer_ids = ints_key({p + "target_layers"}, "the target layer ids");
      d.noise_token_id = int_key({"tokenizer.ggml.mask_token_id"}, "the noise token id");
      if (f.has(p + "expert_count")) E = int_key({p + "expert_count"}, "the draft's routed experts");
      d.active_experts = int_key({p + "expert_used_count"}, "the draft's activated experts");
      if (f.has(p + "markov_rank")) R = int_key({p + "markov_rank"}, "the Markov rank");
      if (const Value* v = f.find(p + "dsv41_semantics")) {
        DS41_CHECK(v->type == ValueType::kBool && v->bits == 1, where(), "key '", p,
                   "dsv41_semantics' is not true: a DeepSeek-V4 (0731) draft, whose target layer ids are stored +1 and "
                   "which needs hc_head; ds41 reads V4.1 drafts");
      } else {
        DS41_CHECK(!s_.find("output_hc_fn.weight"), where(), "a DeepSeek-V4 (0731) draft (output_hc_fn.weight, no '", p,
                   "dsv41_semantics'): its target layer ids are stored +1 and it needs hc_head; ds41 reads V4.1 drafts");
      }
    } else {
      if (one_of(ds4_draft_keys({"stage_count"})))
        d.stages = static_cast<int>(int_key(ds4_draft_keys({"stage_count"}), "the stage count"));
      d.block_size = int_key(ds4_draft_keys({"block_size"}), "the draft block size");
      d.target_layer_ids = ints_key(ds4_draft_keys({"target_layer_ids"}), "the target layer ids");
      d.noise_token_id = int_key(ds4_draft_keys({"noise_token_id"}), "the noise token id");
      if (one_of(ds4_draft_keys({"markov_rank"}))) R = int_key(ds4_draft_keys({"markov_rank"}), "the Markov rank");
      const auto ek = ds4_draft_keys({"expert_count", "n_routed_experts"});
      if (one_of(ek)) E = int_key(ek, "the draft's routed experts");
      d.active_experts = int_key(ds4_draft_keys({"expert_used_count", "num_experts_per_tok", "n_activated_experts"}),
                                 "the draft's activated experts");
      if (const Value* t = one_of(ds4_draft_keys({"target_architecture"})))
        DS41_CHECK(t->type == ValueType::kString && t->str == kArch, where(), "key 'dspark.target_architecture' = \"",
                   t->str, "\", ds41 reads drafts for \"", kArch, "\"");
    }
    DS41_CHECK(d.stages == from_tensors, where(), "the metadata states ", d.stages, " stages, the tensors have ",
               from_tensors);
    DS41_CHECK(d.block_size > 0, where(), "draft block size ", d.block_size, " (must be at least 1)");
    // the Markov rank and the draft's expert count from the tensors (checked against the keys)
    const TensorInfo* me = need(draft_root_gguf(family, kDraftRoots[3], d.stages), "the Markov head's embedding");
    const std::vector<long> mes = me->shape();
    DS41_CHECK(mes.size() == 2, where(), "tensor '", me->name, "' is not a matrix");
    DS41_CHECK(!R || *R == mes[1], where(), "the Markov rank key says ", *R, ", tensor '", me->name, "' has ", mes[1]);
    d.vocab = mes[0];
    d.markov_rank = mes[1];
    const TensorInfo* gate = need(draft_stage_prefix(family, 0) + expert_tensor(1), "stage 0's routed experts");
    DS41_CHECK(gate->dims.size() == 3, where(), "tensor '", gate->name, "' is not a stacked [E, rows, cols] tensor");
    d.experts = static_cast<long>(gate->dims[2]);
    DS41_CHECK(!E || *E == d.experts, where(), "the expert count key says ", *E, ", tensor '", gate->name, "' stacks ",
               d.experts);
    return d;
  }

 private:
  static bool same_value(const Value& a, const Value& b) {
    if (a.is_int() && b.is_int()) return a.as_i64() == b.as_i64();
    if (a.type != b.type || a.str != b.str || a.arr.size() != b.arr.size()) return false;
    if (a.type != ValueType::kArray) return a.bits == b.bits;
    for (size_t i = 0; i < a.arr.size(); ++i)
      if (!same_value(a.arr[i], b.arr[i])) return false;
    return true;
  }
  static std::string join(const std::vector<std::string>& v, size_t from) {
    std::string s;
    for (size_t i = from; i < v.size(); ++i) s += (i > from ? ", " : "") + v[i];
    return s;
  }
  const GgufShards& s_;
};

/// A DSpark draft file fitted to a main model: the main config with the DSpark fields from the
/// draft's metadata and tensors, and the draft head's tensors by reference name (mtp.*).
class GgufDraft : public WeightSource {
 public:
  using Progress = GgufShards::Progress;

  GgufDraft(const std::string& path, const ModelConfig& main, const Progress& progress = {})
      : shards_(std::make_shared<GgufShards>(path, progress)), family_(detect_draft_family(*shards_)),
        fields_(DraftMeta(*shards_).read(family_)), cfg_(main) {
    fit(main);
    check_tensors();
  }

  DraftFamily family() const { return family_; }
  const DraftFields& fields() const { return fields_; }
  const GgufShards& shards() const { return *shards_; }
  std::shared_ptr<const GgufShards> shared_shards() const { return shards_; }
  /// The main model's config with the draft's DSpark fields.
  const ModelConfig& config() const { return cfg_; }
  int stages() const { return cfg_.n_mtp_layers; }

  std::pair<NameRef, const TensorInfo*> locate(const std::string& name) const {
    auto ref = to_draft_gguf(name, family_, stages());
    DS41_CHECK(ref, where(), "no tensor of the draft file corresponds to reference tensor '", name, "'");
    const TensorInfo* t = shards_->find(ref->gguf);
    DS41_CHECK(t, where(), "missing tensor '", ref->gguf, "' (reference '", name, "')");
    return {*ref, t};
  }

  bool has(const std::string& name) const override {
    auto ref = to_draft_gguf(name, family_, stages());
    return ref && holds(*ref, shards_->find(ref->gguf));
  }

  /// As GgufWeights::load; besides the exact shape, a tensor holding the same rows in another
  /// arrangement is read as `shape` (same elements, same innermost dimension: the same bytes),
  /// as published drafts store conf_proj 1-D ([dim+R]) and attn_output_a 3-D ([G, R_o, H·D/G]).
  HostTensor load(const std::string& name, const std::vector<long>& shape) const override {
    auto [ref, t] = locate(name);
    const std::string what = "gguf draft " + shards_->shard(t->shard).path() + ": tensor '" + t->name + "'";
    const TensorSlice slice = slice_of(ref, *t, what);
    std::vector<long> have = slice.shape;
    const uint64_t offset = slice.offset, bytes = slice.bytes;
    if (have != shape && numel(have) == numel(shape) && !have.empty() && !shape.empty() && have.back() == shape.back())
      have = shape;
    check_shape(name, have, shape);
    std::vector<uint8_t> raw(bytes);
    shards_->read(t->shard, raw.data(), bytes, offset, "tensor data");
    return decode_tensor(t->type, shape, raw.data(), bytes, Part::kWhole, what);
  }

 private:
  static long numel(const std::vector<long>& s) {
    long n = 1;
    for (long d : s) n *= d;
    return n;
  }
  std::string where() const { return "gguf draft " + shards_->path() + ": "; }

  /// The draft's fields into the main config, checked against the main model.
  void fit(const ModelConfig& main) {
    const DraftMeta m(*shards_);
    const DraftFields& d = fields_;
    DS41_CHECK(d.vocab == main.vocab_size, where(), "the Markov embedding has ", d.vocab,
               " rows, the main model's vocabulary is ", main.vocab_size, ": a draft for another model");
    if (family_ == DraftFamily::kDflash) {  // the backbone's shapes, where the file states them
      const std::string p = d.arch + ".";
      struct Fit {
        const char* key;
        long want;
      };
      for (const Fit& x : {Fit{"embedding_length", main.dim}, Fit{"hyper_connection.count", main.hc_mult},
                           Fit{"attention.head_count", main.n_heads}, Fit{"attention.key_length", main.head_dim},
                           Fit{"attention.q_lora_rank", main.q_lora_rank}, Fit{"attention.output_group_count", main.o_groups},
                           Fit{"attention.output_lora_rank", main.o_lora_rank},
                           Fit{"attention.sliding_window", main.window_size},
                           Fit{"expert_feed_forward_length", main.moe_inter_dim},
                           Fit{"expert_shared_count", main.n_shared_experts}, Fit{"vocab_size", main.vocab_size}})
        if (shards_->meta().has(p + x.key)) {
          const long got = m.int_key({p + x.key}, x.key);
          DS41_CHECK(got == x.want, where(), "key '", p, x.key, "' = ", got, ", the main model has ", x.want,
                     ": a draft for another model");
        }
      if (shards_->meta().has(p + "attention.compress_ratios"))
        for (int r : m.ints_key({p + "attention.compress_ratios"}, "the stages' compress ratios"))
          DS41_CHECK(r == 0, where(), "key '", p, "attention.compress_ratios' has ", r,
                     "; DSpark stages are window-only (ratio 0)");
    }
    if (main.has_dspark())  // a main file that states DSpark's fields (ds4's config JSON): the draft must match
      DS41_CHECK(main.dspark_target_layer_ids == d.target_layer_ids && main.dspark_block_size == d.block_size &&
                     main.dspark_noise_token_id == d.noise_token_id && main.n_mtp_layers == d.stages,
                 where(), "the draft's stages / block size / noise token / target layers disagree with the main file's "
                 "DSpark configuration: a draft for another model");
    cfg_.n_mtp_layers = d.stages;
    cfg_.dspark_block_size = static_cast<int>(d.block_size);
    cfg_.dspark_noise_token_id = d.noise_token_id;
    cfg_.dspark_target_layer_ids = d.target_layer_ids;
    cfg_.dspark_markov_rank = static_cast<int>(d.markov_rank);
    cfg_.dspark_n_routed_experts = static_cast<int>(d.experts);
    cfg_.dspark_n_activated_experts = static_cast<int>(d.active_experts);
    try {
      cfg_.validate();
    } catch (const Error& e) {
      fail(where(), "does not fit the main model: ", e.what());
    }
  }

  /// The shapes that tie the draft to the main model, and the tensors every stage has.
  void check_tensors() const {
    const DraftMeta m(*shards_);
    const ModelConfig& c = cfg_;
    const int S = c.n_mtp_layers;
    auto expect = [&](const std::string& n, std::vector<long> want, const std::string& why) {
      const TensorInfo* t = m.need(n, why);
      std::vector<long> have = t->shape();
      if (have.size() == 1 && want.size() == 2 && want[0] == 1) want.erase(want.begin());
      DS41_CHECK(have == want, where(), "tensor '", n, "' has shape ", shape_str({have.begin(), have.end()}),
                 ", the main model (dim ", c.dim, ", vocab ", c.vocab_size, ", hc ", c.hc_mult, ", ",
                 c.dspark_target_layer_ids.size(), " target layers) needs ", shape_str({want.begin(), want.end()}),
                 ": a draft for another model");
    };
    const long nt = static_cast<long>(c.dspark_target_layer_ids.size());
    expect(draft_root_gguf(family_, kDraftRoots[0], S), {c.dim, nt * c.dim}, "main_proj");
    expect(draft_root_gguf(family_, kDraftRoots[1], S), {c.dim}, "main_norm");
    expect(draft_root_gguf(family_, kDraftRoots[2], S), {c.dim}, "the last stage's norm");
    expect(draft_root_gguf(family_, kDraftRoots[4], S), {c.vocab_size, c.dspark_markov_rank}, "the Markov head");
    expect(draft_root_gguf(family_, kDraftRoots[5], S), {1, c.dim + c.dspark_markov_rank}, "the confidence head");
    const long hcm = (2L + c.hc_mult) * c.hc_mult;
    for (int s = 0; s < S; ++s) {
      const std::string p = draft_stage_prefix(family_, s), st = "stage " + std::to_string(s);
      expect(p + "hc_attn_fn.weight", {hcm, static_cast<long>(c.hc_mult) * c.dim}, st);
      for (const char* n : {"attn_norm.weight", "ffn_norm.weight", "attn_q_a.weight", "attn_kv.weight",
                            "attn_output_b.weight", "ffn_gate_inp.weight"})
        m.need(p + n, st);
      for (int w = 1; w <= 3; ++w) {
        const TensorInfo* t = m.need(p + expert_tensor(w), st + "'s routed experts");
        DS41_CHECK(t->dims.size() == 3 && static_cast<long>(t->dims[2]) == c.dspark_experts(), where(), "tensor '",
                   t->name, "' does not stack the draft's ", c.dspark_experts(), " experts");
      }
    }
    // a confidence bias: ds41's (the reference's) confidence head has none, so it must be zero
    const std::string bias =
        family_ == DraftFamily::kDflash ? "conf_proj.bias" : "mtp." + std::to_string(S - 1) + ".confidence_head.proj.bias";
    if (const TensorInfo* t = shards_->find(bias)) {
      const std::vector<uint8_t> raw = shards_->read_tensor(*t);
      const std::vector<long> sh = t->shape();
      const HostTensor b = decode_tensor(t->type, sh, raw.data(), raw.size(), Part::kWhole, where() + bias);
      for (float x : b.to_f32())
        DS41_CHECK(x == 0.0f, where(), "tensor '", bias, "' is not zero; V4.1's confidence head has no bias");
    }
  }

  std::shared_ptr<GgufShards> shards_;
  DraftFamily family_;
  DraftFields fields_;
  ModelConfig cfg_;
};

}  // namespace ds41::gguf
#include "../core/fp_exact_end.hpp"
