// ds41-release-write — writes a golden fixture's model laid out as DeepSeek's release is downloaded:
// config.json (Hugging Face form) + inference/config.json (ModelArgs form) + tokenizer.json +
// tokenizer_config.json + safetensors shards + model.safetensors.index.json (docs/SAFETENSORS.md).
//
//   ds41-release-write GOLDEN.json DIR [--tokenizer tokenizer.json] [--shards N]
// Without --tokenizer, a tokenizer in the release's format is made for the fixture's vocabulary
// (ds41/testing/tiny_tokenizer.hpp: byte-level BPE, the release's special and chat tokens) whose
// Engram token map has the config's engram_compressed_vocab_size keys, so that `ds41-decode
// --checkpoint DIR` runs on text and derives the engram hash parameters with no golden. With
// --tokenizer FILE, that file (and the tokenizer_config.json beside it, if any) is copied verbatim.
// DIR must not exist or be empty; a failure leaves nothing. Exit 0 on success, 2 on bad input.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include "ds41/testing/golden.hpp"
#include "ds41/io/safetensors_writer.hpp"
#include "ds41/testing/tiny_tokenizer.hpp"

namespace {

constexpr const char* kUsage = "usage: ds41-release-write GOLDEN.json DIR [--tokenizer tokenizer.json] [--shards N]";

int usage(const std::string& msg) {
  std::fprintf(stderr, "ds41-release-write: %s (%s)\n", msg.c_str(), kUsage);
  return 2;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  DS41_CHECK(f.good(), path, ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string golden_path, dir, tokenizer;
  int shards = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("%s\n"
                  "Writes a golden fixture's model (weights regenerated, SCHEMA.md) in the layout of DeepSeek's release.\n"
                  "  --tokenizer FILE  a tokenizer.json to ship (default: one made for the fixture's vocabulary)\n"
                  "  --shards N        safetensors shards, 1 to 99 (default 2)\n",
                  kUsage);
      return 0;
    }
    if (a == "--tokenizer" || a == "--shards") {
      if (i + 1 >= argc) return usage(a + " needs a value");
      const std::string v = argv[++i];
      if (a == "--tokenizer") tokenizer = v;
      else {
        if (v.empty() || v.size() > 2 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) < 1)
          return usage("--shards: not a count in [1, 99]: " + v);
        shards = std::stoi(v);
      }
    } else if (a.rfind("--", 0) == 0) {
      return usage("unknown option " + a);
    } else if (golden_path.empty()) {
      golden_path = a;
    } else if (dir.empty()) {
      dir = a;
    } else {
      return usage("unexpected argument " + a);
    }
  }
  if (golden_path.empty() || dir.empty()) return usage("GOLDEN.json and DIR are required");
  try {
    const ds41::golden::Golden g = ds41::golden::load(golden_path);
    const ds41::WeightSet w = ds41::golden::regenerate_weights(g);
    ds41::safetensors::ReleaseFiles files;
    if (tokenizer.empty()) {
      files.tokenizer_json = ds41::testing::tiny_tokenizer_json(g.config.vocab_size, g.config.engram_compressed_vocab_size);
      files.tokenizer_config_json = ds41::testing::tiny_tokenizer_config_json();
    } else {
      files.tokenizer_json = read_file(tokenizer);
      const auto cfg = std::filesystem::path(tokenizer).parent_path() / "tokenizer_config.json";
      if (std::filesystem::exists(cfg)) files.tokenizer_config_json = read_file(cfg.string());
    }
    const auto paths = ds41::safetensors::write_release_checkpoint(g.config, w, dir, files, shards);
    std::printf("wrote %s as DeepSeek's release layout in %s: config.json, inference/config.json, tokenizer.json, "
                "%zu shards\n", g.name.c_str(), dir.c_str(), paths.size());
    return 0;
  } catch (const ds41::Error& e) {
    std::fprintf(stderr, "ds41-release-write: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds41-release-write: unexpected error: %s\n", e.what());
    return 2;
  }
}
