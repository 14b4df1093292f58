// ds41-gguf — a GGUF model file as ds41 sees it (issue 39 item 6):
//
//   ds41-gguf info FIRST_SHARD                    dialect, the model's facts, a census of tensor types
//                                                 with bytes, and what ds41 loads, widens or refuses;
//                                                 the engram tables' types and how they are read;
//                                                 for a DSpark draft file, its family and the draft
//                                                 head's facts (docs/GGUF.md "DSpark draft files")
//   ds41-gguf dequant FIRST_SHARD TENSOR --out F  a tensor's values as raw little-endian float32 (the
//                                                 GGUF name; ggml's dequantization, as gguf-py's dump)
//   ds41-gguf write GOLDEN.json OUT_PREFIX [...]  a golden's model as GGUF (ds41-gguf-write's options)
//
// Exit 0 on success, 2 on bad input (one line on stderr).
#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>
#include "ds41/core/numeric.hpp"
#include "ds41/io/gguf.hpp"

int gguf_write_main(int argc, char** argv);  // ds41_gguf_write.cpp

namespace {

namespace gguf = ds41::gguf;

const char* const kHelp =
    "usage: ds41-gguf COMMAND ...\n"
    "  info FIRST_SHARD                    the dialect, the model's facts (layers, dim, heads, experts,\n"
    "                                      vocab, engram layers), a census of tensor types (tensors,\n"
    "                                      elements, bytes) and what ds41 does with each type: kept as\n"
    "                                      stored, widened to f32 at load, or refused; tensors ds41 does\n"
    "                                      not use; the engram tables' types and how they are read;\n"
    "                                      whether ds41 loads the model. For a DSpark draft file\n"
    "                                      (llama.cpp's dflash or ds4's support GGUF): its family, stages,\n"
    "                                      block size, target layers, noise token, Markov rank, experts and\n"
    "                                      the main model it needs (dim, vocab)\n"
    "  dequant FIRST_SHARD TENSOR --out F  TENSOR's values (its GGUF name, e.g. blk.0.attn_q_a.weight) as\n"
    "                                      raw little-endian float32 in F, in the file's element order;\n"
    "                                      block types as ggml's dequantize_row_<type> gives them\n"
    "  write GOLDEN.json OUT_PREFIX [...]  ds41-gguf-write: a golden's model as GGUF shards; `write --help`\n"
    "                                      lists its options (--shards, --type, --dense-type, --dialect, ...)\n"
    "  --help                              this text\n";

int usage(const std::string& msg) {
  std::fprintf(stderr, "ds41-gguf: %s\n", msg.c_str());
  return 2;
}

/// What ds41 does with a tensor type at load.
const char* treatment(gguf::TensorType t) {
  using TT = gguf::TensorType;
  if (!gguf::readable_tensor_type(t)) return "refused";
  switch (t) {
    case TT::kF32: case TT::kBF16: case TT::kMXFP4: case TT::kDs41Fp8Row: case TT::kDs41Fp8Block32: return "kept";
    case TT::kI8: return "kept (engram row264)";
    case TT::kF16: return "matrices kept as stored, vectors widened to f32";
    default: return "matrices kept as stored";
  }
}

/// A census of tensor types (tensors, elements, bytes, what ds41 does at load); the tensors for
/// which `used` is false are listed as not used. Returns the used tensors of a type ds41 does not read.
template <class Used>
std::vector<std::string> census(const gguf::GgufShards& s, Used&& used) {
  struct Census {
    long tensors = 0;
    unsigned long long elements = 0, bytes = 0;
  };
  std::map<std::string, Census> census;
  std::map<std::string, gguf::TensorType> type_of;
  std::vector<std::string> unused, refused;
  for (const auto& [name, t] : s.tensors()) {
    const std::string tn = gguf::tensor_type_name(t.type);
    Census& k = census[tn];
    type_of[tn] = t.type;
    ++k.tensors;
    unsigned long long n = 1;
    for (uint64_t d : t.dims) n *= d;
    k.elements += n;
    k.bytes += t.bytes;
    if (!used(name)) unused.push_back(name);
    else if (!gguf::readable_tensor_type(t.type)) refused.push_back(name + " (" + tn + ")");
  }
  std::printf("tensors: %zu\n%-16s %8s %16s %18s  %s\n", s.tensors().size(), "type", "tensors", "elements", "bytes",
              "at load");
  for (const auto& [tn, k] : census)
    std::printf("%-16s %8ld %16llu %18llu  %s\n", tn.c_str(), k.tensors, k.elements, k.bytes, treatment(type_of[tn]));
  if (!unused.empty()) {
    std::printf("not used by ds41 (%zu):", unused.size());
    for (size_t i = 0; i < unused.size() && i < 8; ++i) std::printf(" %s", unused[i].c_str());
    std::printf("%s\n", unused.size() > 8 ? " ..." : "");
  }
  return refused;
}

/// How ds41 reads an engram table of type t (nullptr: it does not).
const char* engram_reading(gguf::TensorType t) {
  using TT = gguf::TensorType;
  if (gguf::engram_value_type(t)) return "rows of ggml's f32 values";
  switch (t) {
    case TT::kDs41Fp8Row: return "rows of e4m3 codes and e8m0 scales";
    case TT::kI8: return "row264: rows of e4m3 codes and e8m0 scales";
    case TT::kMXFP4: return "read as the fp8 rows of ggml's values";
    default: return nullptr;
  }
}

/// The engram tables by type and how ds41 reads them (resident or row by row); the tables of a
/// type it does not read go into `problems`.
void engram_tables(const gguf::GgufShards& s, gguf::Dialect dialect, std::vector<std::string>& problems) {
  std::map<std::string, long> count;
  for (const auto& [name, t] : s.tensors()) {
    const std::optional<std::string> ref = gguf::from_gguf(name, dialect);
    if (!ref || ref->size() < 12 || ref->compare(ref->size() - 12, 12, "engram.embed") != 0) continue;
    const std::string tn = gguf::tensor_type_name(t.type);
    if (engram_reading(t.type)) {
      ++count[tn + " tables: loaded, " + engram_reading(t.type) + " (resident or row by row)"];
    } else {
      problems.push_back("tensor " + name + " (" + tn + "): an engram table type ds41 does not read (it reads " +
                         gguf::kEngramRowTypes + ")");
    }
  }
  for (const auto& [what, n] : count) std::printf("engram: %ld %s\n", n, what.c_str());
}

/// info for a DSpark draft file: the family, the head's facts and what main model it needs.
int draft_info(const gguf::GgufShards& s) {
  std::vector<std::string> problems;
  std::optional<gguf::DraftFields> d;
  try {
    const gguf::DraftFamily f = gguf::detect_draft_family(s);
    d = gguf::DraftMeta(s).read(f);
    const gguf::TensorInfo* mp = s.find(gguf::draft_root_gguf(f, gguf::kDraftRoots[0], d->stages));
    const long dim = mp ? mp->shape().at(0) : 0;
    std::string targets;
    for (int t : d->target_layer_ids) targets += (targets.empty() ? "" : ",") + std::to_string(t);
    std::printf("DSpark draft file: %s family (%s), %d stages, block size %ld, target layers [%s], noise token %ld, "
                "Markov rank %ld, %ld routed experts top-%ld\n",
                gguf::draft_family_name(f),
                f == gguf::DraftFamily::kDflash ? "llama.cpp's draft architecture" : "ds4's support GGUF", d->stages,
                d->block_size, targets.c_str(), d->noise_token_id, d->markov_rank, d->experts, d->active_experts);
    std::printf("for a main model of dim %ld, vocab %ld, with layers %s (ds41-decode --gguf MAIN --gguf-draft THIS)\n",
                dim, d->vocab, targets.c_str());
  } catch (const ds41::Error& e) {
    problems.push_back(e.what());
    std::printf("DSpark draft file: its metadata cannot be read: %s\n", e.what());
  }
  const std::vector<std::string> refused = census(s, [&](const std::string& name) {
    return !d || gguf::from_draft_gguf(name, d->family, d->stages).has_value();
  });
  for (const std::string& r : refused) problems.push_back("tensor " + r + ": a type ds41 does not read");
  if (problems.empty()) {
    std::printf("ds41 loads this draft: yes (beside a main model it fits)\n");
  } else {
    std::printf("ds41 loads this draft: no\n");
    for (const std::string& p : problems) std::printf("  - %s\n", p.c_str());
  }
  return 0;
}

int info(const std::string& path) {
  const gguf::GgufShards s(path, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  std::printf("file: %s (%d shard%s, GGUF v%u, alignment %llu)\n", path.c_str(), s.shard_count(),
              s.shard_count() == 1 ? "" : "s", s.meta().version(), static_cast<unsigned long long>(s.meta().alignment()));
  const gguf::Value* arch = s.meta().find("general.architecture");
  std::printf("architecture: %s\n", arch && arch->type == gguf::ValueType::kString ? arch->str.c_str() : "(none)");
  if (s.find("fc.weight") || s.find("mtp.0.main_proj.weight")) return draft_info(s);
  std::optional<gguf::Dialect> dialect;
  std::vector<std::string> problems;
  try {
    dialect = gguf::detect_dialect(s);
    std::printf("dialect: %s\n", gguf::dialect_name(*dialect));
  } catch (const ds41::Error& e) {
    problems.push_back(e.what());
    std::printf("dialect: none recognised (%s)\n", e.what());
  }
  if (dialect) {
    try {
      std::vector<gguf::DerivedFact> derived;
      const ds41::ModelConfig c = gguf::read_config(s, *dialect, &derived);
      std::printf("model: %d layers, dim %d, %d heads x %d, vocab %ld, max_seq_len %ld, %d routed experts top-%d "
                  "x %d, window %d, hc %d, %zu engram layers\n",
                  c.n_layers, c.dim, c.n_heads, c.head_dim, c.vocab_size, c.max_seq_len, c.n_routed_experts,
                  c.n_activated_experts, c.moe_inter_dim, c.window_size, c.hc_mult, c.engram_layer_ids.size());
      // facts the file states no key for (docs/GGUF.md "Derived facts")
      for (const gguf::DerivedFact& d : derived) std::printf("derived: %s = %s\n", d.key.c_str(), d.from.c_str());
    } catch (const ds41::Error& e) {
      problems.push_back(e.what());
      std::printf("model: its config cannot be read: %s\n", e.what());
    }
  }
  const std::vector<std::string> refused = census(s, [&](const std::string& name) {
    return !dialect || gguf::from_gguf(name, *dialect).has_value();
  });
  for (const std::string& r : refused) problems.push_back("tensor " + r + ": a type ds41 does not read");
  if (dialect) engram_tables(s, *dialect, problems);
  if (problems.empty()) {
    std::printf("ds41 loads this model: yes\n");
  } else {
    std::printf("ds41 loads this model: no\n");
    for (const std::string& p : problems) std::printf("  - %s\n", p.c_str());
  }
  return 0;
}

int dequant(const std::string& path, const std::string& tensor, const std::string& out) {
  const gguf::GgufShards s(path);
  const gguf::TensorInfo* t = s.find(tensor);
  DS41_CHECK(t, "gguf ", path, ": no tensor named '", tensor, "' (tensor names as the file spells them)");
  const std::vector<uint8_t> raw = s.read_tensor(*t);
  uint64_t n = 1;
  for (uint64_t d : t->dims) n *= d;
  std::vector<float> v(n);
  using TT = gguf::TensorType;
  const std::string what = "tensor '" + tensor + "' (" + gguf::tensor_type_name(t->type) + ")";
  if (t->type == TT::kF32) {
    std::memcpy(v.data(), raw.data(), n * 4);
  } else if (t->type == TT::kF16 || t->type == TT::kBF16) {
    for (uint64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, raw.data() + 2 * i, 2);
      v[i] = t->type == TT::kF16 ? gguf::f16_to_f32(h) : ds41::bf16_to_f32(h);
    }
  } else {  // ggml's block types: the loader's own widening (io/gguf_model.hpp), refusals included
    v = gguf::dequantize_blocks(t->type, raw.data(), raw.size(), what);
  }
  std::ofstream f(out, std::ios::binary);
  DS41_CHECK(f.good(), "--out ", out, ": cannot create the file");
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  f.close();
  DS41_CHECK(f.good(), "--out ", out, ": write failed");
  std::printf("%s: %llu float32 values (shape", what.c_str(), static_cast<unsigned long long>(n));
  for (long d : t->shape()) std::printf(" %ld", d);
  std::printf(") -> %s\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  static_assert(std::endian::native == std::endian::little, "raw little-endian output written as the host's floats");
  if (argc < 2) return usage("no command (info, dequant, write; --help)");
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kHelp, stdout);
    return 0;
  }
  if (cmd == "write") return gguf_write_main(argc - 1, argv + 1);
  try {
    if (cmd == "info") {
      if (argc != 3) return usage("info takes one file: ds41-gguf info FIRST_SHARD");
      return info(argv[2]);
    }
    if (cmd == "dequant") {
      std::string file, tensor, out;
      for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--out") {
          if (i + 1 >= argc) return usage("--out needs a file");
          out = argv[++i];
        } else if (!a.empty() && a[0] == '-') {
          return usage("dequant: unknown option " + a);
        } else if (file.empty()) {
          file = a;
        } else if (tensor.empty()) {
          tensor = a;
        } else {
          return usage("dequant: too many arguments (" + a + ")");
        }
      }
      if (file.empty() || tensor.empty() || out.empty()) return usage("usage: ds41-gguf dequant FIRST_SHARD TENSOR --out F");
      return dequant(file, tensor, out);
    }
  } catch (const ds41::Error& e) {
    return usage(e.what());
  }
  return usage("unknown command '" + cmd + "' (info, dequant, write; --help)");
}
