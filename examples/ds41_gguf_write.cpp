// ds41-gguf-write — writes a golden fixture's model (weights regenerated from its rules, config and
// engram hash parameters as deepseek41.* metadata) as GGUF shards OUT_PREFIX-0000k-of-0000n.gguf.
//
//   ds41-gguf-write GOLDEN.json OUT_PREFIX [--shards N] [--type TYPE] [--dense-type TYPE]
//                   [--engram-i8 | --engram-ds41-row | --engram-type TYPE] [--dialect llama.cpp|ds4|mxxm]
//                   [--omit-key KEY]
//                   [--tokenizer tokenizer.json]
//                   [--draft DRAFT.gguf [--draft-family dflash|ds4]]
// --type writes the routed experts in TYPE, --dense-type the attention projections, shared experts,
// indexer.attn_q_b, engram_wkv and output (gguf::dense_quantized_weight): the tensors published
// V4.1 GGUFs quantize; TYPE is any block type ds41 reads but I8, or f16, bf16, f32. A tensor whose
// rows are not whole blocks of TYPE (the K-quants and IQ types: 256) keeps its own encoding and is
// listed. The engram tables are I8 row264 (--engram-i8, the default; --engram-ds41-row: ds41's own
// DS41_FP8_ROW id, the same bytes);
// --engram-type writes them as blocks of TYPE (any block type but I8, or f16, bf16, f32) of
// their values, as vcruz305's rungs quantize them (a table whose rows are not whole blocks keeps its
// fp8 rows and is listed).
// --dialect writes the metadata keys and tensor names of one of the published dialects
// (docs/GGUF.md "Dialects"; default llama.cpp).
// --draft also writes the model's DSpark draft head (a golden with dspark_* config and mtp.* weights)
// as a separate draft file (docs/GGUF.md "DSpark draft files"): llama.cpp's dflash family by default,
// ds4's support GGUF with --draft-family ds4; --type and --dense-type apply to its stages as to the
// backbone's layers (--dense-type also to main_proj).
// --tokenizer embeds a tokenizer as tokenizer.ggml.* metadata in the first shard (bos/eos/pad ids
// from the tokenizer_config.json beside it, when there is one); needs the text layer (PCRE2, utf8proc).
// Shards are written under temporary names and renamed at the end: a failure leaves no file.
// Exit 0 on success, 2 on bad input.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>
#include "ds41/io/gguf.hpp"
#include "ds41/testing/golden.hpp"
#if DS41_WITH_TEXT
#include <filesystem>
#include "ds41/text/gguf_tokenizer.hpp"
#endif

/// The types --type and --dense-type take, and those --engram-type takes (names in either case).
static const std::string kTypes = ds41::gguf::tensor_type_names(ds41::gguf::writable_tensor_type);
static const std::string kEngramTypes = ds41::gguf::tensor_type_names(
    [](ds41::gguf::TensorType t) { return ds41::gguf::engram_value_type(t) || t == ds41::gguf::TensorType::kMXFP4; });

/// A ", "-separated list on lines of at most 100 columns, the lines after the first indented to
/// the help's second column.
static std::string wrapped(const std::string& list) {
  std::string out, line;
  size_t at = 0;
  while (at < list.size()) {
    const size_t end = std::min(list.find(", ", at) == std::string::npos ? list.size() : list.find(", ", at) + 2, list.size());
    if (line.size() + (end - at) > 77) {  // the line ends in ", ": keep the comma
      out += line.substr(0, line.size() - 1) + "\n" + std::string(23, ' ');
      line.clear();
    }
    line += list.substr(at, end - at);
    at = end;
  }
  return out + line;
}

static void print_usage(std::FILE* to) {
  std::fprintf(to,
               "usage: ds41-gguf-write GOLDEN.json OUT_PREFIX [options]\n"
               "  --shards N           write N >= 2 shards (default 2)\n"
               "  --type TYPE          routed experts in TYPE (either case):\n"
               "                       %s\n"
               "  --dense-type TYPE    attention projections, shared experts, indexer.attn_q_b, engram_wkv and\n"
               "                       output in TYPE (the router, compressor, norms, hc, embedding stay as they are)\n"
               "                       (a tensor whose rows are not whole blocks of TYPE keeps its own encoding)\n"
               "  --engram-i8          engram tables as I8 [K + K/32, rows] (row264; the default)\n"
               "  --engram-ds41-row    engram tables as DS41_FP8_ROW (ds41's own type id 1000, the same bytes as\n"
               "                       row264; no other GGUF reader knows it)\n"
               "  --engram-type TYPE   engram tables as blocks of TYPE of their values (rows not whole blocks\n"
               "                       keep their fp8 rows):\n"
               "                       %s\n"
               "  --dialect NAME       metadata keys and tensor names: llama.cpp (default), ds4 (antirez's) or\n"
               "                       mxxm (mxxm-t's); docs/GGUF.md \"Dialects\"\n"
               "  --omit-key KEY       leave the metadata key KEY out (repeatable), to write a file as another\n"
               "                       converter would; 'ds41' names ds41's own keys, which vcruz305's files lack\n"
               "                       and ds41 derives (docs/GGUF.md \"Derived facts\")\n"
               "  --tokenizer FILE     embed tokenizer.json as tokenizer.ggml.* metadata\n"
               "  --draft FILE         also write the DSpark draft head as a separate draft file (a golden with\n"
               "                       a draft head); --type and --dense-type apply to it too\n"
               "  --draft-family NAME  the draft file's names and keys: dflash (llama.cpp's, default) or ds4\n"
               "                       (ds4's support GGUF); docs/GGUF.md \"DSpark draft files\"\n"
               "  -h, --help           this help\n",
               wrapped(kTypes).c_str(), wrapped(kEngramTypes).c_str());
}
static int usage(const std::string& msg) {
  std::fprintf(stderr, "ds41-gguf-write: %s\n", msg.c_str());
  print_usage(stderr);
  return 2;
}
/// A --type value: one of kTypes (either case).
static bool parse_type(const std::string& v, ds41::gguf::TensorType* t) {
  return ds41::gguf::tensor_type_from_name(v, t) && ds41::gguf::writable_tensor_type(*t);
}

// The writer's entry: ds41-gguf-write's main (ds41_gguf_write_main.cpp) and ds41-gguf's `write`
// command both call it, so this file is compiled once for both
int gguf_write_main(int argc, char** argv) {
  std::string golden_path, prefix, tokenizer_path, draft_path;
  ds41::gguf::WriteOptions opt;
  std::optional<std::string> engram_rows;  // --engram-i8 or --engram-ds41-row, where given
  std::optional<ds41::gguf::DraftFamily> family;
  int& shards = opt.shards;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--shards") {
      if (i + 1 >= argc) return usage("--shards needs a value");
      std::string v = argv[++i];
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 5)
        return usage("--shards: not a count: " + v);
      shards = std::stoi(v);
      if (shards < 2) return usage("--shards must be >= 2 (a model split across files)");
    } else if (a == "--type" || a == "--dense-type") {
      if (i + 1 >= argc) return usage(a + " needs a type");
      ds41::gguf::TensorType t;
      if (!parse_type(argv[++i], &t)) return usage(a + ": not a type ds41 writes: " + argv[i] + " (" + kTypes + ")");
      (a == "--type" ? opt.experts : opt.dense) = t;
    } else if (a == "--engram-i8" || a == "--engram-ds41-row") {
      if (engram_rows) return usage(a + " and " + *engram_rows + " name two engram table types");
      engram_rows = a;
      opt.engram_i8 = a == "--engram-i8";
    } else if (a == "--engram-type") {
      if (i + 1 >= argc) return usage(a + " needs a type");
      ds41::gguf::TensorType t;
      if (!ds41::gguf::tensor_type_from_name(argv[++i], &t) ||
          !(ds41::gguf::engram_value_type(t) || t == ds41::gguf::TensorType::kMXFP4))
        return usage(a + ": not a type ds41 writes engram tables in: " + argv[i] + " (" + kEngramTypes + ")");
      opt.engram_type = t;
    } else if (a == "--omit-key") {
      if (i + 1 >= argc) return usage("--omit-key needs a key");
      const std::string k = argv[++i];
      if (k == "ds41") {
        const auto& own = ds41::gguf::ds41_only_keys();
        opt.omit_keys.insert(opt.omit_keys.end(), own.begin(), own.end());
      } else {
        opt.omit_keys.push_back(k);
      }
    } else if (a == "--dialect") {
      if (i + 1 >= argc) return usage("--dialect needs a name");
      const auto d = ds41::gguf::dialect_from_name(argv[++i]);
      if (!d) return usage(std::string("--dialect: not a dialect: ") + argv[i] + " (llama.cpp, ds4, mxxm)");
      opt.dialect = *d;
    } else if (a == "--draft") {
      if (i + 1 >= argc) return usage("--draft needs a file name");
      draft_path = argv[++i];
    } else if (a == "--draft-family") {
      if (i + 1 >= argc) return usage("--draft-family needs a name");
      family = ds41::gguf::draft_family_from_name(argv[++i]);
      if (!family) return usage(std::string("--draft-family: not a family: ") + argv[i] + " (dflash, ds4)");
    } else if (a == "--tokenizer") {
      if (i + 1 >= argc) return usage("--tokenizer needs a tokenizer.json");
      tokenizer_path = argv[++i];
#if !DS41_WITH_TEXT
      return usage("--tokenizer: built without the text layer (PCRE2, utf8proc)");
#endif
    } else if (a == "-h" || a == "--help") {
      print_usage(stdout);
      return 0;
    } else if (golden_path.empty()) {
      golden_path = a;
    } else if (prefix.empty()) {
      prefix = a;
    } else {
      return usage("unexpected argument " + a);
    }
  }
  if (golden_path.empty() || prefix.empty()) return usage("GOLDEN.json and OUT_PREFIX are required");
  if (family && draft_path.empty()) return usage("--draft-family goes with --draft FILE");
  if (engram_rows && opt.engram_type) return usage(*engram_rows + " and --engram-type name two engram table types");
  try {
    const ds41::golden::Golden g = ds41::golden::load(golden_path);
#if DS41_WITH_TEXT
    std::optional<ds41::text::Tokenizer> tok;  // loaded first: a bad tokenizer writes nothing
    if (!tokenizer_path.empty()) {
      tok = ds41::text::Tokenizer::from_json_file(tokenizer_path);
      const auto config = std::filesystem::path(tokenizer_path).parent_path() / "tokenizer_config.json";
      if (std::filesystem::exists(config)) ds41::text::set_special_ids_from_config(*tok, config.string());
    }
#endif
    DS41_CHECK(draft_path.empty() || (g.config.has_dspark() && g.config.n_mtp_layers > 0), "--draft: ", golden_path,
               " has no DSpark draft head (n_mtp_layers ", g.config.n_mtp_layers, ", dspark_block_size ",
               g.config.dspark_block_size, ")");
    const ds41::WeightSet w = ds41::golden::regenerate_weights(g);
    const ds41::gguf::WriteResult res = ds41::gguf::write_model(g.config, w, prefix, opt);
    const auto& paths = res.paths;
    for (const std::string& k : res.kept) std::printf("kept: %s\n", k.c_str());
    if (opt.experts || opt.dense || opt.engram_type)
      std::printf("%ld tensors written in the requested types\n", res.converted);
#if DS41_WITH_TEXT
    if (tok) {
      ds41::text::add_tokenizer_to_gguf_file(paths.front(), *tok);
      std::printf("%s: tokenizer (%ld tokens) embedded\n", paths.front().c_str(), tok->vocab_size());
    }
#endif
    for (const auto& p : paths) {
      ds41::gguf::GgufFile f(p);  // read back: every shard parses
      std::printf("%s: %zu tensors\n", p.c_str(), f.tensors().size());
    }
    std::printf("wrote %s (%zu parameters) as %d shards\n", g.name.c_str(), w.size(), shards);
    if (!draft_path.empty()) {
      const auto f = family.value_or(ds41::gguf::DraftFamily::kDflash);
      const ds41::gguf::WriteResult dr = ds41::gguf::write_draft(g.config, w, draft_path, opt, f);
      for (const std::string& k : dr.kept) std::printf("draft kept: %s\n", k.c_str());
      if (opt.experts || opt.dense) std::printf("draft: %ld tensors written in the requested types\n", dr.converted);
      ds41::gguf::GgufFile df(draft_path);  // read back
      std::printf("%s: DSpark draft file (%s family, %d stages), %zu tensors\n", draft_path.c_str(),
                  ds41::gguf::draft_family_name(f), g.config.n_mtp_layers, df.tensors().size());
    }
    return 0;
  } catch (const ds41::Error& e) {
    std::fprintf(stderr, "ds41-gguf-write: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds41-gguf-write: unexpected error: %s\n", e.what());
    return 2;
  }
}
