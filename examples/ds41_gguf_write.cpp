// ds41-gguf-write — writes a golden fixture's model (weights regenerated from its rules, config and
// engram hash parameters as deepseek41.* metadata) as GGUF shards OUT_PREFIX-0000k-of-0000n.gguf.
//
//   ds41-gguf-write GOLDEN.json OUT_PREFIX [--shards N] [--tokenizer tokenizer.json]   (N >= 2, default 2)
// --tokenizer embeds a tokenizer as tokenizer.ggml.* metadata in the first shard (bos/eos/pad ids
// from the tokenizer_config.json beside it, when there is one); needs the text layer (PCRE2, utf8proc).
// Shards are written under temporary names and renamed at the end: a failure leaves no file.
// Exit 0 on success, 2 on bad input.
#include <cstdio>
#include <string>
#include "ds41/io/gguf.hpp"
#include "ds41/testing/golden.hpp"
#if DS41_WITH_TEXT
#include <filesystem>
#include "ds41/text/gguf_tokenizer.hpp"
#endif

static int usage(const std::string& msg) {
  std::fprintf(stderr, "ds41-gguf-write: %s\nusage: ds41-gguf-write GOLDEN.json OUT_PREFIX [--shards N] [--tokenizer tokenizer.json]\n", msg.c_str());
  return 2;
}

int main(int argc, char** argv) {
  std::string golden_path, prefix, tokenizer_path;
  int shards = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--shards") {
      if (i + 1 >= argc) return usage("--shards needs a value");
      std::string v = argv[++i];
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos || v.size() > 5)
        return usage("--shards: not a count: " + v);
      shards = std::stoi(v);
      if (shards < 2) return usage("--shards must be >= 2 (a model split across files)");
    } else if (a == "--tokenizer") {
      if (i + 1 >= argc) return usage("--tokenizer needs a tokenizer.json");
      tokenizer_path = argv[++i];
#if !DS41_WITH_TEXT
      return usage("--tokenizer: built without the text layer (PCRE2, utf8proc)");
#endif
    } else if (a == "-h" || a == "--help") {
      return usage("help"), 0;
    } else if (golden_path.empty()) {
      golden_path = a;
    } else if (prefix.empty()) {
      prefix = a;
    } else {
      return usage("unexpected argument " + a);
    }
  }
  if (golden_path.empty() || prefix.empty()) return usage("GOLDEN.json and OUT_PREFIX are required");
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
    const ds41::WeightSet w = ds41::golden::regenerate_weights(g);
    const auto paths = ds41::gguf::write_model(g.config, w, prefix, shards);
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
    return 0;
  } catch (const ds41::Error& e) {
    std::fprintf(stderr, "ds41-gguf-write: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds41-gguf-write: unexpected error: %s\n", e.what());
    return 2;
  }
}
