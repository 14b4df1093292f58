// ds41-tokenize — the DeepSeek-V4.1 tokenizer from the command line (exactly HF tokenizers'):
//   ds41-tokenize TOKENIZER TEXT                ids of TEXT, one line, separated by single spaces
//   ds41-tokenize TOKENIZER --decode 1,2,3      the decoded text and one newline
//   ds41-tokenize TOKENIZER --decode-skip-special 1,2,3   the same without special added tokens
//   ds41-tokenize TOKENIZER --engram CONFIG     the Engram hash parameters engram.py derives from
//                                               TOKENIZER and CONFIG (inference/config.json or HF
//                                               config.json), with the token map's SHA-256
// TOKENIZER is a tokenizer.json or a GGUF file carrying tokenizer.ggml.* metadata (told apart by the
// "GGUF" magic). Exit 0 on success, 2 on bad input with one line on stderr.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>
#include "ds41/io/gguf_reader.hpp"
#include "ds41/text/engram_params.hpp"
#include "ds41/text/gguf_tokenizer.hpp"
#include "ds41/text/tokenizer.hpp"
#ifdef DS41_WITH_OPENSSL
#include <openssl/evp.h>
#endif

namespace {

const char* kUsage =
    "usage: ds41-tokenize TOKENIZER TEXT                      print the ids of TEXT\n"
    "       ds41-tokenize TOKENIZER --decode IDS              print the text of IDS (comma-separated)\n"
    "       ds41-tokenize TOKENIZER --decode-skip-special IDS the same, leaving out special added tokens\n"
    "       ds41-tokenize TOKENIZER --engram CONFIG           the Engram hash parameters derived from\n"
    "                                                         TOKENIZER and CONFIG (inference/config.json\n"
    "                                                         or HF config.json), token map SHA-256\n"
    "       ds41-tokenize --help                              this text\n"
    "TOKENIZER: a tokenizer.json, or a GGUF file with tokenizer.ggml.* metadata.\n";

int bad(const std::string& msg) {
  std::fprintf(stderr, "ds41-tokenize: %s\n", msg.c_str());
  return 2;
}

ds41::text::Tokenizer load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  DS41_CHECK(f, "tokenizer ", path, ": cannot open");
  char magic[4] = {};
  f.read(magic, 4);
  if (f.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0) return ds41::text::from_gguf(ds41::gguf::GgufFile(path));
  return ds41::text::Tokenizer::from_json_file(path);
}

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  DS41_CHECK(!s.empty(), "--decode: no ids given");
  while (i <= s.size()) {
    const size_t comma = std::min(s.find(',', i), s.size());
    const std::string item = s.substr(i, comma - i);
    DS41_CHECK(!item.empty() && item.size() <= 10 && item.find_first_not_of("0123456789") == std::string::npos,
               "--decode: '", item, "' is not a token id (expected comma-separated non-negative integers)");
    const long long v = std::stoll(item);
    DS41_CHECK(v <= INT32_MAX, "--decode: id ", item, " is out of range");
    ids.push_back(static_cast<int32_t>(v));
    i = comma + 1;
  }
  return ids;
}

int encode_mode(const std::vector<std::string>& a) {
  if (a.size() != 2) return bad("expected TOKENIZER TEXT (see --help)");
  const auto tok = load(a[0]);
  const std::vector<int32_t> ids = tok.encode(a[1]);
  std::string line;
  for (size_t k = 0; k < ids.size(); ++k) line += (k ? " " : "") + std::to_string(ids[k]);
  std::printf("%s\n", line.c_str());
  return 0;
}

int decode_mode(const std::vector<std::string>& a, bool skip_special) {
  if (a.size() != 3) return bad("expected TOKENIZER --decode IDS (see --help)");
  const std::vector<int32_t> ids = parse_ids(a[2]);
  const auto tok = load(a[0]);
  const std::string text = tok.decode(ids, skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}

/// SHA-256 of the map as little-endian int32 bytes (the digest engram_params.json records), hex.
std::string token_map_sha256(const std::vector<int32_t>& map) {
#ifdef DS41_WITH_OPENSSL
  std::vector<unsigned char> bytes(map.size() * 4);
  for (size_t i = 0; i < map.size(); ++i)
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<unsigned char>(static_cast<uint32_t>(map[i]) >> (8 * b));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  DS41_CHECK(EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) == 1, "--engram: SHA-256 failed");
  std::string hex;
  for (unsigned i = 0; i < len; ++i) {
    char h[3];
    std::snprintf(h, sizeof h, "%02x", md[i]);
    hex += h;
  }
  return hex;
#else
  (void)map;
  return "unavailable (ds41-tokenize was built without OpenSSL)";
#endif
}

int engram_mode(const std::vector<std::string>& a) {
  if (a.size() != 3 || a[1] != "--engram") return bad("expected TOKENIZER --engram CONFIG (see --help)");
  std::ifstream f(a[2]);
  DS41_CHECK(f, "config ", a[2], ": cannot open");
  const nlohmann::json cfg = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  DS41_CHECK(!cfg.is_discarded(), "config ", a[2], ": not valid JSON");
  const ds41::text::EngramSpec spec = ds41::text::engram_spec_from_config(cfg, a[2]);
  const auto tok = load(a[0]);
  const ds41::EngramHashParams p = ds41::text::derive_engram_params(spec, tok);
  auto join = [](const int64_t* v, size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += (i ? " " : "") + std::to_string(v[i]);
    return s;
  };
  const size_t cols = static_cast<size_t>(spec.max_ngram_size - 1) * spec.n_heads, nm = spec.max_ngram_size;
  std::printf("engram: compressed vocab size %ld\n", spec.compressed_vocab_size);  // derived, checked equal
  std::printf("engram: pad id %lld (token %ld)\n", static_cast<long long>(p.pad_id), spec.pad_id);
  for (size_t l = 0; l < spec.layer_ids.size(); ++l) {
    std::printf("engram: layer %d primes %s\n", spec.layer_ids[l], join(&p.primes[l * cols], cols).c_str());
    std::printf("engram: layer %d offsets %s\n", spec.layer_ids[l], join(&p.offsets[l * cols], cols).c_str());
    std::printf("engram: layer %d multipliers %s\n", spec.layer_ids[l], join(&p.multipliers[l * nm], nm).c_str());
  }
  std::printf("engram: token map (%zu ids) sha256 %s\n", p.token_map.size(), token_map_sha256(p.token_map).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") return std::fputs(kUsage, stdout), 0;
  // modes are named by an option anywhere on the line; plain TOKENIZER TEXT otherwise
  struct Mode {
    const char* option;
    std::function<int(const std::vector<std::string>&)> run;
  };
  const Mode modes[] = {
      {"--decode", [](const std::vector<std::string>& a) { return decode_mode(a, false); }},
      {"--decode-skip-special", [](const std::vector<std::string>& a) { return decode_mode(a, true); }},
      {"--engram", engram_mode},
  };
  try {
    for (const Mode& m : modes) {
      for (size_t k = 0; k < args.size(); ++k) {
        if (args[k] != m.option) continue;
        if (k != 1 && std::string(m.option) != "--engram") return bad(std::string(m.option) + " must follow TOKENIZER (see --help)");
        std::vector<std::string> rest = args;
        rest[k] = m.option;  // kept in place: decode_mode reads a[2] as the ids
        return m.run(rest);
      }
    }
    for (const std::string& a : args)
      if (a.size() > 1 && a[0] == '-' && a[1] == '-') return bad("unknown option " + a + " (see --help)");
    return encode_mode(args);
  } catch (const ds41::Error& e) {
    return bad(e.what());
  } catch (const std::exception& e) {
    return bad(std::string("unexpected error: ") + e.what());
  }
}
