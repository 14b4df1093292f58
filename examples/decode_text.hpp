// decode_text.hpp — ds41-decode's text side (built with the text layer, ds41::text): which tokenizer,
// the prompt's ids from --prompt-text / --chat / --messages, the end-of-sentence id, and the engram
// hash parameters of a checkpoint derived from its tokenizer and config (engram.py's derivation).
#pragma once
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "decode_options.hpp"
#include "ds41/core/error.hpp"
#include "ds41/io/gguf_reader.hpp"
#include "ds41/io/hf_config.hpp"
#include "ds41/text/chat.hpp"
#include "ds41/text/checkpoint_engram.hpp"
#include "ds41/text/engram_params.hpp"
#include "ds41/text/gguf_tokenizer.hpp"
#include "ds41/text/tokenizer.hpp"

namespace decode_text {

namespace fs = std::filesystem;

inline bool is_gguf_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char m[4] = {};
  return f.read(m, 4) && std::string(m, 4) == "GGUF";
}

inline nlohmann::ordered_json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  DS41_CHECK(f.good(), path, ": cannot open");
  try {
    return nlohmann::ordered_json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    ds41::fail(path, ": not valid JSON (", e.what(), ")");
  }
}

/// A tokenizer from a tokenizer.json or from a GGUF file's metadata.
inline std::unique_ptr<ds41::text::Tokenizer> load_tokenizer(const std::string& path) {
  DS41_CHECK(fs::exists(path), "tokenizer ", path, ": no such file");
  if (is_gguf_file(path)) {
    ds41::gguf::GgufFile f(path);
    return std::make_unique<ds41::text::Tokenizer>(ds41::text::from_gguf(f));
  }
  return std::make_unique<ds41::text::Tokenizer>(ds41::text::Tokenizer::from_json_file(path));
}

/// Where the model's tokenizer is: --tokenizer, else the GGUF file itself when it carries one, else
/// DIR/tokenizer.json of a checkpoint; "" when none.
inline std::string tokenizer_path(const DecodeOptions& o) {
  if (!o.tokenizer.empty()) return o.tokenizer;
  if (!o.gguf.empty()) {
    ds41::gguf::GgufFile f(o.gguf);
    return f.has("tokenizer.ggml.tokens") ? o.gguf : "";
  }
  if (!o.checkpoint.empty() && fs::exists(fs::path(o.checkpoint) / "tokenizer.json"))
    return (fs::path(o.checkpoint) / "tokenizer.json").string();
  return "";
}

inline int32_t required_token(const ds41::text::Tokenizer& tok, const std::string& token, const std::string& what,
                              const std::string& path) {
  const auto id = tok.token_to_id(token);
  DS41_CHECK(id.has_value(), what, " needs the token ", token, ", which the tokenizer ", path, " does not have");
  return *id;
}

/// The prompt's ids from --prompt-text, --chat or --messages.
inline std::vector<int32_t> prompt_ids(const DecodeOptions& o, const ds41::text::Tokenizer& tok, const std::string& path) {
  const std::string bos = "<｜begin▁of▁sentence｜>";
  if (o.has_prompt_text) {
    std::vector<int32_t> ids;
    if (!o.no_bos) ids.push_back(required_token(tok, bos, "--prompt-text (without --no-bos)", path));
    const std::vector<int32_t> text = tok.encode(o.prompt_text);
    ids.insert(ids.end(), text.begin(), text.end());
    return ids;
  }
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // ordered: tool schemas keep their key order
  if (!o.messages.empty()) {
    messages = read_json(o.messages);
    DS41_CHECK(messages.is_array(), "--messages ", o.messages, ": not a JSON list of messages");
  } else {
    if (o.has_system) messages.push_back({{"role", "system"}, {"content", o.system}});
    messages.push_back({{"role", "user"}, {"content", o.chat}});
  }
  ds41::text::ChatOptions opt;
  opt.mode = o.thinking ? ds41::text::ThinkingMode::kThinking : ds41::text::ThinkingMode::kChat;
  if (!o.reasoning_effort.empty()) {
    const std::string& e = o.reasoning_effort;
    if (e.find_first_not_of("0123456789") == std::string::npos && e.size() <= 3) opt.reasoning_effort = std::stoi(e);
    else opt.reasoning_effort = e;
  }
  const std::string prompt = ds41::text::encode_messages(messages, opt).text;
  // every marker of the format must be one added token of this tokenizer: otherwise the model would see
  // the marker spelt out as ordinary text
  for (const char* marker : {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜System｜>", "<｜User｜>",
                             "<｜Assistant｜>", "<think>", "</think>", "<｜latest_reminder｜>"})
    if (prompt.find(marker) != std::string::npos) {
      const int32_t id = required_token(tok, marker, "the chat format", path);
      DS41_CHECK(tok.is_added(id), "the chat format needs ", marker, " as an added token; in ", path,
                 " it is an ordinary vocabulary entry");
    }
  return tok.encode(prompt);
}

/// The end-of-sentence id: the tokenizer's own (a GGUF file's tokenizer.ggml.eos_token_id), else
/// tokenizer_config.json's eos_token beside a tokenizer.json, else the checkpoint's config.json
/// eos_token_id, else the release's <｜end▁of▁sentence｜> token when the tokenizer has it.
inline std::optional<int32_t> eos_id(const DecodeOptions& o, const ds41::text::Tokenizer* tok, const std::string& tok_path) {
  if (tok && tok->eos_id()) return *tok->eos_id();
  if (!tok_path.empty() && !is_gguf_file(tok_path)) {
    const fs::path cfg = fs::path(tok_path).parent_path() / "tokenizer_config.json";
    if (fs::exists(cfg)) {
      const nlohmann::ordered_json j = read_json(cfg.string());
      if (j.contains("eos_token")) {
        const nlohmann::ordered_json& e = j["eos_token"];
        const std::string name = e.is_string() ? e.get<std::string>()
                                 : e.is_object() && e.contains("content") && e["content"].is_string()
                                     ? e["content"].get<std::string>() : "";
        if (!name.empty() && tok)
          if (auto id = tok->token_to_id(name)) return *id;
      }
    }
  }
  if (!o.checkpoint.empty()) {
    const fs::path cfg = fs::path(o.checkpoint) / "config.json";
    if (fs::exists(cfg)) {  // HF allows one id or a list (the first ends a sentence)
      const auto ids = ds41::safetensors::map_config(read_json(cfg.string()), cfg.string()).generation.eos_token_ids;
      if (!ids.empty()) return static_cast<int32_t>(ids.front());
    }
  }
  if (tok)
    if (auto id = tok->token_to_id("<｜end▁of▁sentence｜>")) return *id;
  return std::nullopt;
}

}  // namespace decode_text
