// ds41/text/chat.hpp — DeepSeek-V4.1's chat prompt format: encode_messages() of the release's
// encoding/encoding.py, ported to C++ (docs/TEXT.md).
//
// The release ships no Jinja template; its prompts come from encoding.py. The only full public copy
// is fastllm's vendored tools/fastllm_pytools/encoding_dsv41.py (fd873f3a), which is not the
// official file byte for byte (tests/data/tokenizer/README.md §4). This is a port of that copy's
// encode_messages(): each step below names the Python function it follows, and keeps its
// quirks (consecutive user turns merge; unknown roles before the last user turn vanish in thinking
// mode; a latest_reminder without content renders "None"), because the prompt must match the one
// the model was trained on byte for byte. Where the Python would raise (an assert, a ValueError, a
// KeyError or TypeError on a malformed message), this throws ds41::Error.
//
// Messages are nlohmann::ordered_json: Python dicts keep insertion order, and the tool schemas and
// arguments are dumped in that order. A nlohmann::json converts implicitly, but its keys are
// already sorted.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <nlohmann/json.hpp>
#include "../core/error.hpp"
#include "py_json.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text {

enum class ThinkingMode { kChat, kThinking };

/// encode_messages' keyword arguments.
struct ChatOptions {
  ThinkingMode mode = ThinkingMode::kChat;
  bool drop_thinking = true;          ///< drop reasoning_content of turns before the last user turn
  bool add_default_bos_token = true;  ///< "<｜begin▁of▁sentence｜>" first (never with a context)
  /// An int 1..100 or "low" (50) / "high" (75) / "max" (100); unset = "high". Rendered in thinking
  /// mode only, but validated in both (as the Python does).
  std::optional<nlohmann::json> reasoning_effort;
  /// Earlier messages already in the KV cache: they shape the new ones (tool-call order, last
  /// user turn, dropped reasoning) but are not rendered, and no BOS is added.
  std::optional<nlohmann::ordered_json> context;
};

/// The prompt and, in order, one record per "<｜deepseek_image｜>" placeholder of the new messages
/// ({"type": "image", "url"|"source"|"data": ...}, the Python's media_data["images"]).
struct ChatPrompt {
  std::string text;
  std::vector<nlohmann::ordered_json> images;
};

namespace chat_detail {
using Json = nlohmann::ordered_json;
inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kSystem = "<｜System｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kImage = "<｜deepseek_image｜>";
inline constexpr std::string_view kDsml = "｜DSML｜";
inline constexpr std::pair<std::string_view, std::string_view> kTasks[] = {
    {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
    {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"}};
inline constexpr std::pair<std::string_view, int> kEfforts[] = {{"low", 50}, {"high", 75}, {"max", 100}};

// TOOLS_TEMPLATE with its fields filled in (DSML tag names " calls", " invoke", " parameter")
inline constexpr std::string_view kToolsHead =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
    "writing a \"<｜DSML｜ calls>\" block like the following:\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke "
    "name=\"$TOOL_NAME\">\n<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜ parameter>\n...\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜ "
    "invoke>\n</｜DSML｜ calls>\n\nString parameters should be specified as is and set `string=\"true\"`. For all "
    "other types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output your complete "
    "reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, output directly "
    "after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n";
inline constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
inline constexpr std::string_view kResponseFormat =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

// dict.get(key): nullptr when absent (a JSON null is Python's None too; see is_none)
inline const Json* get(const Json& o, const char* key) {
  auto it = o.find(key);
  return it == o.end() ? nullptr : &*it;
}
inline bool is_none(const Json* v) { return v == nullptr || v->is_null(); }
inline bool truthy(const Json* v) { return v != nullptr && py_truthy(*v); }
inline bool equals(const Json* v, std::string_view s) { return v != nullptr && v->is_string() && v->get_ref<const std::string&>() == s; }
// str(v) for an error message, whatever v is
inline std::string show(const Json& v) { return v.is_primitive() ? py_str(v, "") : v.dump(); }
// the first n bytes of s, cut back to a UTF-8 boundary (text[:n] for a message)
inline std::string head(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}
// dict.get(key, default)
inline Json get_or(const Json& o, const char* key, Json dflt) {
  const Json* v = get(o, key);
  return v ? *v : dflt;
}
inline std::string where(size_t index) { return "encode_messages: message " + std::to_string(index); }
// "\n\n".join(parts): Python's join takes strings only
inline std::string join_texts(const std::vector<const Json*>& parts, const std::string& what) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    DS41_CHECK(parts[i]->is_string(), what, ": a text that is ", a_type_name(*parts[i]), " (the encoder joins strings)");
    if (i) out += "\n\n";
    out += parts[i]->get_ref<const std::string&>();
  }
  return out;
}
// "x in text" for the value a text block carries (str: substring; list: element; dict: key)
inline bool contains_placeholder(const Json& text, const std::string& what) {
  if (text.is_string()) return text.get_ref<const std::string&>().find(kImage) != std::string::npos;
  if (text.is_array()) return std::any_of(text.begin(), text.end(), [](const Json& e) { return equals(&e, kImage); });
  if (text.is_object()) return text.contains(std::string(kImage));
  fail(what, ": a text block's text is ", a_type_name(text), ", not a string");
}

// _extract_image
inline Json extract_image(const Json& block, const std::string& what) {
  Json record = {{"type", "image"}};
  if (equals(get(block, "type"), "image_url")) {
    const Json* url = get(block, "image_url");
    if (url && url->is_string()) record["url"] = *url;
    else if (!truthy(url)) record["url"] = "";
    else if (url->is_object()) record["url"] = get_or(*url, "url", "");
    else fail(what, ": image_url is ", a_type_name(*url), ", not a string or an object");
  } else {
    for (const char* key : {"source", "url", "data"})
      if (const Json* v = get(block, key)) record[key] = *v;
  }
  bool any = false;
  for (const char* key : {"source", "url", "data"}) any = any || truthy(get(record, key));
  DS41_CHECK(any, what, ": Image block does not contain a valid source");
  return record;
}

// _process_image_blocks: image blocks become placeholder text blocks, in one ordered traversal
// (tool_result contents included)
inline Json process_image_blocks(const Json& blocks, std::vector<Json>& images, const std::string& what) {
  DS41_CHECK(blocks.is_array(), what, ": content blocks are ", a_type_name(blocks), ", not a list");
  Json out = Json::array();
  for (const Json& block : blocks) {
    if (!block.is_object()) {
      out.push_back(block);
      continue;
    }
    const Json* type = get(block, "type");
    if (equals(type, "image") || equals(type, "image_url")) {
      out.push_back(Json{{"type", "text"}, {"text", std::string(kImage)}});
      images.push_back(extract_image(block, what));
    } else if (equals(type, "tool_result") && get(block, "content") && block["content"].is_array()) {
      Json copy = block;
      copy["content"] = process_image_blocks(block["content"], images, what);
      out.push_back(std::move(copy));
    } else {
      if (equals(type, "text") && truthy(get(block, "text")))
        DS41_CHECK(!contains_placeholder(block["text"], what), what, ": Text block contains image placeholder '",
                   kImage, "': '", head(show(block["text"]), 100), "'. Images should be separate content blocks.");
      out.push_back(block);
    }
  }
  return out;
}

// process_image_messages: a list content becomes content_blocks (and its texts, joined, the content)
inline std::vector<Json> process_image_messages(const Json& messages, std::vector<Json>* images, const char* name) {
  DS41_CHECK(messages.is_array(), "encode_messages: ", name, " is ", a_type_name(messages), ", not a list of messages");
  std::vector<Json> out;
  std::vector<Json> sink;
  for (size_t i = 0; i < messages.size(); ++i) {
    Json msg = messages[i];
    const std::string what = std::string("encode_messages: ") + name + "[" + std::to_string(i) + "]";
    DS41_CHECK(msg.is_object(), what, " is ", a_type_name(msg), ", not a message object");
    const Json* content = get(msg, "content");
    DS41_CHECK(!(content && content->is_string() && content->get_ref<const std::string&>().find(kImage) != std::string::npos),
               what, ": Message content contains image special token '", kImage,
               "'. Images should be provided as image content blocks.");
    const Json* reasoning = get(msg, "reasoning_content");
    DS41_CHECK(!(reasoning && reasoning->is_string() && reasoning->get_ref<const std::string&>().find(kImage) != std::string::npos),
               what, ": reasoning_content contains image special token '", kImage, "'");
    if (content && content->is_array() && !msg.contains("content_blocks")) {
      msg["content_blocks"] = *content;
      msg.erase("content");
    }
    if (truthy(get(msg, "content_blocks"))) {
      msg["content_blocks"] = process_image_blocks(msg["content_blocks"], images ? *images : sink, what);
      if (!(get(msg, "content") && msg["content"].is_string())) {
        std::vector<const Json*> texts;
        const Json empty = "";
        for (const Json& b : msg["content_blocks"])
          if (b.is_object() && equals(get(b, "type"), "text")) texts.push_back(get(b, "text") ? &b["text"] : &empty);
        msg["content"] = join_texts(texts, what);
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// merge_tool_messages: a tool message becomes a tool_result block of a user turn; a user turn
// joins the previous user turn unless that one has a task
inline std::vector<Json> merge_tool_messages(const std::vector<Json>& messages) {
  std::vector<Json> merged;
  auto open_user = [&merged]() -> Json* {
    if (merged.empty() || !equals(get(merged.back(), "role"), "user") || !merged.back().contains("content_blocks")) return nullptr;
    Json& blocks = merged.back()["content_blocks"];
    DS41_CHECK(blocks.is_array(), "encode_messages: a user message's content_blocks are ", a_type_name(blocks), ", not a list");
    return &blocks;
  };
  for (const Json& m : messages) {
    Json msg = m;
    const Json* role = get(msg, "role");
    if (equals(role, "tool")) {
      Json block = {{"type", "tool_result"}, {"tool_use_id", get_or(msg, "tool_call_id", "")}, {"content", get_or(msg, "content", "")}};
      if (Json* blocks = open_user()) blocks->push_back(std::move(block));
      else merged.push_back(Json{{"role", "user"}, {"content_blocks", Json::array({std::move(block)})}});
    } else if (equals(role, "user")) {
      Json blocks = is_none(get(msg, "content_blocks")) ? Json::array({Json{{"type", "text"}, {"text", get_or(msg, "content", "")}}})
                                                       : msg["content_blocks"];
      Json* open = is_none(merged.empty() ? nullptr : get(merged.back(), "task")) ? open_user() : nullptr;
      if (open) {
        DS41_CHECK(blocks.is_array(), "encode_messages: a user message's content_blocks are ", a_type_name(blocks), ", not a list");
        for (Json& b : blocks) open->push_back(std::move(b));
      } else {
        msg["content_blocks"] = std::move(blocks);
        merged.push_back(std::move(msg));
      }
    } else {
      merged.push_back(std::move(msg));
    }
  }
  return merged;
}

// sort_tool_results_by_call_order: a user turn's tool_result blocks follow the order of the last
// assistant tool_calls before it (stable; an unknown id sorts as position 0). In place.
inline void sort_tool_results_by_call_order(std::vector<Json>& messages) {
  std::vector<std::pair<Json, long>> order;  // a dict keyed by call id, in insertion order
  auto position = [&order](const Json& id) -> long {
    DS41_CHECK(!id.is_array() && !id.is_object(), "encode_messages: a tool call id is ", a_type_name(id), " (unhashable)");
    for (const auto& [k, v] : order)
      if (k == id) return v;
    return -1;
  };
  for (Json& msg : messages) {
    const Json* role = get(msg, "role");
    if (equals(role, "assistant") && truthy(get(msg, "tool_calls"))) {
      order.clear();
      const Json& calls = msg["tool_calls"];
      DS41_CHECK(calls.is_array(), "encode_messages: tool_calls is ", a_type_name(calls), ", not a list");
      for (size_t idx = 0; idx < calls.size(); ++idx) {
        const Json& tc = calls[idx];
        DS41_CHECK(tc.is_object(), "encode_messages: a tool call is ", a_type_name(tc), ", not an object");
        Json id = get_or(tc, "id", nullptr);
        if (!py_truthy(id)) {
          const Json fn = get_or(tc, "function", Json::object());
          DS41_CHECK(fn.is_object(), "encode_messages: a tool call's function is ", a_type_name(fn), ", not an object");
          id = get_or(fn, "id", "");
        }
        if (!py_truthy(id)) continue;
        if (position(id) >= 0) {
          for (auto& kv : order)
            if (kv.first == id) kv.second = static_cast<long>(idx);
        } else {
          order.emplace_back(id, static_cast<long>(idx));
        }
      }
    } else if (equals(role, "user") && truthy(get(msg, "content_blocks"))) {
      Json& blocks = msg["content_blocks"];
      DS41_CHECK(blocks.is_array(), "encode_messages: a user message's content_blocks are ", a_type_name(blocks), ", not a list");
      std::vector<std::pair<long, Json>> tool_blocks;
      for (const Json& b : blocks) {
        DS41_CHECK(b.is_object(), "encode_messages: a user content block is ", a_type_name(b), ", not an object");
        if (equals(get(b, "type"), "tool_result")) tool_blocks.emplace_back(0, b);
      }
      if (tool_blocks.size() <= 1 || order.empty()) continue;
      for (auto& [key, b] : tool_blocks) key = std::max(position(get_or(b, "tool_use_id", "")), 0L);
      std::stable_sort(tool_blocks.begin(), tool_blocks.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      size_t next = 0;
      for (Json& b : blocks)
        if (equals(get(b, "type"), "tool_result")) b = tool_blocks[next++].second;
    }
  }
}

// find_last_user_index: a system message after the first counts as a user turn
inline long find_last_user_index(const std::vector<Json>& messages) {
  for (long i = static_cast<long>(messages.size()) - 1; i >= 0; --i) {
    const Json* role = get(messages[static_cast<size_t>(i)], "role");
    if (equals(role, "user") || (equals(role, "system") && i > 0)) return i;
  }
  return -1;
}

// _drop_thinking_messages: before the last user turn, assistant turns lose reasoning_content and
// roles other than user/system/tool/latest_reminder/direct_search_results are dropped
inline std::vector<Json> drop_thinking_messages(const std::vector<Json>& messages) {
  const long last_user = find_last_user_index(messages);
  std::vector<Json> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json* role = get(messages[i], "role");
    bool keep = static_cast<long>(i) >= last_user;
    for (const char* r : {"user", "system", "tool", "latest_reminder", "direct_search_results"}) keep = keep || equals(role, r);
    if (keep) {
      out.push_back(messages[i]);
    } else if (equals(role, "assistant")) {
      Json m = messages[i];
      m.erase("reasoning_content");
      out.push_back(std::move(m));
    }
  }
  return out;
}

// render_reasoning_effort: validated for every rendered message, rendered at index 0 in thinking mode
inline std::string render_reasoning_effort(size_t index, ThinkingMode mode, const std::optional<nlohmann::json>& effort) {
  int budget = 75;  // DEFAULT_REASONING_EFFORT "high"
  if (effort && !effort->is_null()) {
    const nlohmann::json& e = *effort;
    bool ok = false;
    if (e.is_number_integer()) {  // type(effort) is int: a bool or a float is not
      ok = e.is_number_unsigned() ? e.get<uint64_t>() >= 1 && e.get<uint64_t>() <= 100
                                  : e.get<int64_t>() >= 1 && e.get<int64_t>() <= 100;
      if (ok) budget = static_cast<int>(e.get<int64_t>());
    } else if (e.is_string()) {
      for (const auto& [name, value] : kEfforts)
        if (e.get_ref<const std::string&>() == name) ok = true, budget = value;
    }
    DS41_CHECK(ok, "encode_messages: Invalid reasoning effort for deepseek_v41: ", e.is_primitive() ? py_str(e, "") : e.dump(),
               ", should be int within [1,100] or ['low', 'high', 'max']");
  }
  if (index != 0 || mode != ThinkingMode::kThinking) return "";
  return "Reasoning Effort: " + std::to_string(budget) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

// encode_arguments_to_dsml: a dict (or a JSON string of one, even double-encoded) becomes one
// parameter line per key; anything else is the single parameter "arguments"
inline std::string encode_arguments_to_dsml(const Json& arguments) {
  Json args = arguments;
  if (!args.is_object()) {
    for (int pass = 0; pass < 2 && args.is_string(); ++pass) {
      const std::string& s = args.get_ref<const std::string&>();
      // Python's json.loads refuses a leading BOM, which nlohmann skips
      if (s.rfind("\xEF\xBB\xBF", 0) == 0) break;
      Json parsed = Json::parse(s, nullptr, /*allow_exceptions=*/false);
      if (parsed.is_discarded()) break;
      args = std::move(parsed);
    }
    if (!args.is_object()) args = Json{{"arguments", arguments}};
  }
  std::string out;
  for (auto it = args.begin(); it != args.end(); ++it) {
    const bool is_str = it.value().is_string();
    if (it != args.begin()) out += '\n';
    out += "<｜DSML｜ parameter name=\"" + it.key() + "\" string=\"" + (is_str ? "true" : "false") + "\">";
    out += is_str ? it.value().get<std::string>() : py_dumps(it.value());
    out += "</｜DSML｜ parameter>";
  }
  return out;
}

// "{content}".format(content=content or "")
inline std::string content_or_empty(const Json* v, const std::string& what) { return truthy(v) ? py_str(*v, what) : ""; }

// render_message
inline std::string render_message(size_t index, const std::vector<Json>& messages, ThinkingMode mode, bool drop_thinking,
                                  const std::optional<nlohmann::json>& effort) {
  const Json& msg = messages[index];
  const std::string what = where(index);
  const long last_user = find_last_user_index(messages);
  const bool thinking = mode == ThinkingMode::kThinking;
  const Json* role = get(msg, "role");
  const Json* content = get(msg, "content");

  // tools_from_openai_format / tool_calls_from_openai_format run for every role
  std::vector<Json> tools, tool_calls;
  if (truthy(get(msg, "tools"))) {
    DS41_CHECK(msg["tools"].is_array(), what, ": tools is ", a_type_name(msg["tools"]), ", not a list");
    for (const Json& t : msg["tools"]) {  // tool["function"], whatever it holds
      DS41_CHECK(t.is_object() && t.contains("function"), what, ": a tool has no \"function\" (OpenAI format expected)");
      tools.push_back(t["function"]);
    }
  }
  if (truthy(get(msg, "tool_calls"))) {
    DS41_CHECK(msg["tool_calls"].is_array(), what, ": tool_calls is ", a_type_name(msg["tool_calls"]), ", not a list");
    for (const Json& t : msg["tool_calls"]) {  // tool_call["function"]["name"] and ["arguments"]
      const Json* fn = t.is_object() ? get(t, "function") : nullptr;
      DS41_CHECK(fn && fn->is_object() && fn->contains("name") && fn->contains("arguments"), what,
                 ": a tool call lacks function.name or function.arguments (OpenAI format expected)");
      tool_calls.push_back(Json{{"name", (*fn)["name"]}, {"arguments", (*fn)["arguments"]}});
    }
  }

  const std::string effort_prompt = render_reasoning_effort(index, mode, effort);
  std::string prompt = index == 0 && (!effort_prompt.empty() || equals(role, "system")) ? std::string(kSystem) : "";
  prompt += effort_prompt;

  if (equals(role, "system")) {
    if (index > 0) prompt += kSystem;  // a mid-conversation system message
    prompt += content_or_empty(content, what);
    if (!tools.empty()) {
      prompt += "\n\n";
      prompt += kToolsHead;
      for (size_t i = 0; i < tools.size(); ++i) prompt += (i ? "\n" : "") + py_dumps(tools[i]);
      prompt += kToolsTail;
    }
    if (truthy(get(msg, "response_format"))) prompt += "\n\n" + std::string(kResponseFormat) + py_dumps(msg["response_format"]);
  } else if (equals(role, "user")) {
    prompt += kUser;
    if (truthy(get(msg, "content_blocks"))) {
      const Json& blocks = msg["content_blocks"];
      DS41_CHECK(blocks.is_array(), what, ": content_blocks is ", a_type_name(blocks), ", not a list");
      std::vector<Json> parts;  // Python strings (join checks their type)
      for (const Json& block : blocks) {
        DS41_CHECK(block.is_object(), what, ": a content block is ", a_type_name(block), ", not an object");
        const Json* type = get(block, "type");
        if (equals(type, "text")) {
          parts.push_back(get_or(block, "text", ""));
        } else if (equals(type, "tool_result")) {
          Json tool_content = get_or(block, "content", "");
          if (tool_content.is_array()) {
            std::vector<Json> texts;
            for (const Json& b : tool_content) {
              DS41_CHECK(b.is_object(), what, ": a tool_result content block is ", a_type_name(b), ", not an object");
              if (equals(get(b, "type"), "text")) texts.push_back(get_or(b, "text", ""));
              else texts.push_back("[Unsupported " + py_str(get_or(b, "type", nullptr), what) + "]");
            }
            std::vector<const Json*> ptrs;
            for (const Json& t : texts) ptrs.push_back(&t);
            tool_content = join_texts(ptrs, what);
          }
          parts.push_back("<tool_result>" + py_str(tool_content, what) + "</tool_result>");
        } else {
          parts.push_back("[Unsupported " + py_str(type ? *type : Json(nullptr), what) + "]");
        }
      }
      std::vector<const Json*> ptrs;
      for (const Json& p : parts) ptrs.push_back(&p);
      prompt += join_texts(ptrs, what);
    } else {
      prompt += content_or_empty(content, what);
    }
  } else if (equals(role, "latest_reminder")) {
    prompt += kLatestReminder;
    prompt += py_str(content ? *content : Json(nullptr), what);  // no `or ""` here: None prints "None"
  } else if (equals(role, "tool")) {
    fail(what, ": deepseek_v41 merges tool messages into user; please preprocess with merge_tool_messages()");
  } else if (equals(role, "assistant")) {
    std::string calls;
    if (!tool_calls.empty()) {
      calls = "\n\n<｜DSML｜ calls>\n";
      for (size_t i = 0; i < tool_calls.size(); ++i) {
        if (i) calls += '\n';
        calls += "<｜DSML｜ invoke name=\"" + py_str(tool_calls[i]["name"], what) + "\">\n" +
                 encode_arguments_to_dsml(tool_calls[i]["arguments"]) + "\n</｜DSML｜ invoke>";
      }
      calls += "\n</｜DSML｜ calls>";
    }
    // the turn after a task message is the task's output: no thinking part
    const bool prev_has_task = index >= 1 && !is_none(get(messages[index - 1], "task"));
    if (thinking && !prev_has_task && (!drop_thinking || static_cast<long>(index) > last_user))
      prompt += content_or_empty(get(msg, "reasoning_content"), what) + std::string(kThinkEnd);
    prompt += content_or_empty(content, what) + calls;
    if (!truthy(get(msg, "wo_eos"))) prompt += kEos;
  } else {
    fail(what, ": Unknown role: ", show(role ? *role : Json(nullptr)));
  }

  // what follows: nothing more unless this is the last message or an assistant/latest_reminder is next
  if (index + 1 < messages.size()) {
    const Json* next = get(messages[index + 1], "role");
    if (!equals(next, "assistant") && !equals(next, "latest_reminder")) return prompt;
  }
  const Json* task = get(msg, "task");
  if (!is_none(task)) {
    std::string_view token;
    for (const auto& [name, tok] : kTasks)
      if (equals(task, name)) token = tok;
    DS41_CHECK(!token.empty(), what, ": Invalid task: '", show(*task),
               "'. Valid tasks are: ['action', 'query', 'authority', 'domain', 'title', 'read_url']");
    if (!equals(task, "action")) {
      prompt += token;
    } else {
      prompt += kAssistant;
      prompt += thinking ? kThinkStart : kThinkEnd;
      prompt += token;
    }
  } else if (equals(role, "user") || (equals(role, "system") && index > 0)) {
    prompt += kAssistant;
    const bool open_thinking = thinking && (!drop_thinking || static_cast<long>(index) >= last_user);
    prompt += open_thinking ? kThinkStart : kThinkEnd;
  }
  return prompt;
}
}  // namespace chat_detail

/// encode_messages(messages, thinking_mode, context, drop_thinking, add_default_bos_token,
/// reasoning_effort, return_multi_modal_data=True) of encoding.py. `messages` is a list of
/// OpenAI-style messages: role system/user/assistant/tool/latest_reminder; content a string or a
/// list of content blocks (text, image/image_url, tool_result); reasoning_content, tool_calls,
/// tools, response_format, task, wo_eos.
inline ChatPrompt encode_messages(const nlohmann::ordered_json& messages, const ChatOptions& opt = {}) {
  using namespace chat_detail;
  ChatPrompt result;
  const bool has_context = opt.context && py_truthy(*opt.context);
  std::vector<Json> context = has_context ? process_image_messages(*opt.context, nullptr, "context") : std::vector<Json>{};
  std::vector<Json> msgs = process_image_messages(messages, &result.images, "messages");

  // _encode_messages_text: merge tool turns, sort tool results (context's calls order new results)
  std::vector<Json> combined = context;
  for (Json& m : merge_tool_messages(msgs)) combined.push_back(std::move(m));
  sort_tool_results_by_call_order(combined);
  msgs.assign(combined.begin() + static_cast<long>(context.size()), combined.end());
  if (!context.empty()) {
    context.assign(combined.begin(), combined.begin() + static_cast<long>(context.size()));
    context = merge_tool_messages(context);
    sort_tool_results_by_call_order(context);
  }
  std::vector<Json> full = context;
  full.insert(full.end(), msgs.begin(), msgs.end());

  if (opt.add_default_bos_token && context.empty()) result.text = kBos;
  // a conversation with tools keeps every turn's reasoning
  bool drop = opt.drop_thinking && !std::any_of(full.begin(), full.end(), [](const Json& m) { return truthy(get(m, "tools")); });
  long to_render = static_cast<long>(msgs.size());
  size_t context_len = context.size();
  if (opt.mode == ThinkingMode::kThinking && drop) {
    full = drop_thinking_messages(full);
    to_render = static_cast<long>(full.size()) - static_cast<long>(drop_thinking_messages(context).size());
    context_len = full.size() - static_cast<size_t>(std::max(to_render, 0L));
  }
  for (long i = 0; i < to_render; ++i)
    result.text += render_message(static_cast<size_t>(i) + context_len, full, opt.mode, drop, opt.reasoning_effort);
  return result;
}

/// The options a Python call's keyword arguments give (the vectors' "kwargs": thinking_mode,
/// drop_thinking, add_default_bos_token, reasoning_effort, context).
inline ChatOptions chat_options_from_kwargs(const nlohmann::ordered_json& kwargs) {
  DS41_CHECK(kwargs.is_object(), "chat kwargs: expected an object, got ", a_type_name(kwargs));
  ChatOptions opt;
  bool have_mode = false;
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    const auto& k = it.key();
    const auto& v = it.value();
    auto flag = [&] {
      DS41_CHECK(v.is_boolean(), "chat kwargs: ", k, " must be a boolean, got ", v.dump());
      return v.get<bool>();
    };
    if (k == "thinking_mode") {
      DS41_CHECK(v == "chat" || v == "thinking", "encode_messages: Invalid thinking_mode `", v.dump(), "`");
      opt.mode = v == "thinking" ? ThinkingMode::kThinking : ThinkingMode::kChat;
      have_mode = true;
    } else if (k == "drop_thinking") {
      opt.drop_thinking = flag();
    } else if (k == "add_default_bos_token") {
      opt.add_default_bos_token = flag();
    } else if (k == "reasoning_effort") {
      opt.reasoning_effort = nlohmann::json::parse(v.dump());
    } else if (k == "context") {
      opt.context = v;
    } else {
      fail("chat kwargs: unknown keyword argument '", k, "'");
    }
  }
  DS41_CHECK(have_mode, "chat kwargs: thinking_mode is required");
  return opt;
}

/// The one-user-turn prompt a CLI needs: [system] + user, default options otherwise.
inline std::string chat_prompt(std::string_view user, ThinkingMode mode, std::string_view system = {}) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", std::string(system)}});
  messages.push_back({{"role", "user"}, {"content", std::string(user)}});
  ChatOptions opt;
  opt.mode = mode;
  return encode_messages(messages, opt).text;
}

}  // namespace ds41::text
#include "../core/fp_exact_end.hpp"
