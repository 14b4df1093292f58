#!/usr/bin/env python3
"""Extra chat-format vectors for ds41's C++ port of DeepSeek-V4.1's encode_messages().

tests/data/tokenizer/chat_vectors.json (20 cases) leaves most of encoding.py's branches alone:
tasks, latest_reminder, images, context, several tool calls and results, argument shapes,
json.dumps of floats/escapes/unordered keys, wo_eos, unknown roles, and the errors. This script
runs the encoder itself on cases made for those branches and records what it returns (prompt and
image records) or what it raises (the exception's type).

Input: the same encoder the tokenizer vectors used (tests/data/tokenizer/README.md, "Reproduce"):
fastllm's tools/fastllm_pytools/encoding_dsv41.py @ fd873f3a with its first 8 lines removed,
SHA-256 b4bd8a06f94a06a61564156c7a543d649ed86ecdd72a4dfb94b064e16d9c572f (checked).
Standard library only.

  python3 make_extra_vectors.py --encoding ENCODING_PY --out extra_vectors.json
"""

import argparse
import hashlib
import importlib.util
import json
import platform

ENCODING_SHA256 = "b4bd8a06f94a06a61564156c7a543d649ed86ecdd72a4dfb94b064e16d9c572f"

SYS = {"role": "system", "content": "You are a helpful assistant."}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}
# keys out of sorted order, floats, unicode, escapes, booleans, null, empty containers
ODD_TOOL = {"type": "function", "function": {
    "name": "plot", "description": "Plot «data» — \"quoted\", tab\there, back\\slash, ctrl\u0001, del\u007f, 😀",
    "parameters": {"type": "object", "required": ["xs"], "properties": {
        "xs": {"type": "array", "items": {"type": "number"}, "default": [0.1, 1e-05, 0.0001, 1e16, 1e15, 3.0, -0.0, 2.5e-300, 1.7976931348623157e308]},
        "zoom": {"type": "number", "minimum": 0, "maximum": 12345678901234567, "multipleOf": 0.30000000000000004},
        "flag": {"type": "boolean", "default": True}, "none": {"default": None},
        "empty_obj": {}, "empty_arr": [], "enum": ["a", "β", "\n"]}}}}


def u(c, **kw):
    return dict({"role": "user", "content": c}, **kw)


def a(c, r=None, **kw):
    m = {"role": "assistant", "content": c}
    if r is not None:
        m["reasoning_content"] = r
    return dict(m, **kw)


def call(cid, name, args, raw=False):
    return {"id": cid, "type": "function",
            "function": {"name": name, "arguments": args if raw else json.dumps(args, ensure_ascii=False)}}


def tool(cid, content):
    return {"role": "tool", "tool_call_id": cid, "content": content}


CHAT = dict(thinking_mode="chat")
THINK = dict(thinking_mode="thinking")

CASES = [
    # merging and transitions
    ("consecutive_users_merge", [u("first"), u("second")], CHAT),
    ("latest_reminder_after_user", [SYS, u("Q"), {"role": "latest_reminder", "content": "Be brief."}], CHAT),
    ("latest_reminder_thinking", [u("Q"), {"role": "latest_reminder", "content": "Today is Monday."}], THINK),
    ("latest_reminder_without_content", [u("Q"), {"role": "latest_reminder"}], CHAT),
    ("assistant_wo_eos_prefill", [u("Write a poem."), a("Roses are", wo_eos=True)], CHAT),
    ("assistant_wo_eos_thinking", [u("Hi"), a("Hel", "greeting", wo_eos=True)], THINK),
    ("assistant_null_content_and_reasoning", [u("Hi"), a(None, None), u("Again")], THINK),
    ("thinking_assistant_last_no_reasoning", [u("Hi"), a("Hello")], THINK),
    ("thinking_mid_system", [SYS, u("Hi"), a("Hello!", "hmm"), {"role": "system", "content": "Now in French."}], THINK),
    ("thinking_mid_system_then_user", [SYS, u("Hi"), {"role": "system", "content": "Be terse."}, u("Why?")], THINK),
    ("thinking_unknown_role_dropped", [u("Hi"), {"role": "developer", "content": "x"}, a("Hello", "r"), u("Bye")], THINK),
    ("thinking_keep_reasoning_mid_system", [u("a"), a("b", "c"), {"role": "system", "content": "s"}], dict(THINK, drop_thinking=False)),
    ("chat_keep_reasoning_ignored", [u("a"), a("b", "c"), u("d")], dict(CHAT, drop_thinking=False)),
    ("system_only", [SYS], CHAT),
    ("system_only_thinking", [SYS], THINK),
    ("assistant_first", [a("Hi there"), u("Hello")], THINK),
    ("empty_messages", [], THINK),
    ("no_bos_thinking", [u("x")], dict(THINK, add_default_bos_token=False)),
    # content values that are not strings
    ("content_number_and_bool", [{"role": "system", "content": 42}, u("q"), a(True), a(1.5)], CHAT),
    ("content_falsy_values", [{"role": "system", "content": 0}, u(""), a(False)], CHAT),
    ("user_missing_content", [{"role": "user"}], CHAT),
    # reasoning effort
    ("effort_1", [u("x")], dict(THINK, reasoning_effort=1)),
    ("effort_100", [u("x")], dict(THINK, reasoning_effort=100)),
    ("effort_high", [SYS, u("x")], dict(THINK, reasoning_effort="high")),
    ("effort_in_chat_mode", [u("x")], dict(CHAT, reasoning_effort="max")),
    # tasks
    *[("task_" + t, [u("Some text to classify", task=t)], CHAT) for t in ["query", "authority", "domain", "title", "read_url"]],
    ("task_action_chat", [u("Do it", task="action")], CHAT),
    ("task_action_thinking", [u("Do it", task="action")], THINK),
    ("task_then_output_thinking", [u("Classify", task="query"), a("search", "should not show")], THINK),
    ("task_user_not_merged", [u("Classify", task="domain"), u("next")], CHAT),
    ("task_not_last", [u("A", task="title"), a("T"), u("B")], CHAT),
    ("task_on_system", [{"role": "system", "content": "s", "task": "query"}], CHAT),
    # tools and tool calls
    ("tools_two_and_odd_schema", [dict(SYS, tools=[WEATHER, ODD_TOOL]), u("Plot it")], CHAT),
    ("tools_on_user_keeps_thinking", [u("q1", tools=[WEATHER]), a("a1", "r1"), u("q2")], THINK),
    ("response_format_schema", [dict(SYS, response_format={"type": "json_schema", "json_schema": {
        "name": "colors", "schema": {"type": "object", "properties": {"c": {"type": "array", "maxItems": 3.0}}}, "strict": True}}),
        u("Colors?")], CHAT),
    ("tools_and_response_format", [dict(SYS, tools=[WEATHER], response_format={"type": "json_object"}), u("q")], CHAT),
    ("parallel_calls_results_reordered",
     [dict(SYS, tools=[WEATHER]), u("Paris and Rome?"),
      a("", "two calls", tool_calls=[call("c1", "get_weather", {"city": "Paris"}), call("c2", "get_weather", {"city": "Rome"})]),
      tool("c2", "Rome: rain"), tool("c1", "Paris: sun"), u("Thanks, and tomorrow?")], THINK),
    ("results_unknown_ids_keep_order",
     [u("q"), a("", tool_calls=[call("c1", "f", {}), call("c2", "f", {})]), tool("zz", "first"), tool("c2", "second"), tool("c1", "third")], CHAT),
    ("call_ids_from_function",
     [u("q"), a("", tool_calls=[{"type": "function", "function": {"id": "f1", "name": "f", "arguments": "{}"}},
                                {"type": "function", "function": {"id": "f2", "name": "g", "arguments": "{}"}}]),
      tool("f2", "g out"), tool("f1", "f out")], CHAT),
    ("argument_shapes",
     [u("q"), a("Calling.", tool_calls=[
         call("c1", "f", {"s": "raw \"text\"\n", "i": -7, "f": 0.1, "big": 1e16, "tiny": 1e-05, "whole": 3.0, "neg0": -0.0,
                          "b": False, "n": None, "l": [1, "two", {"3": [4.5]}], "o": {"z": 1, "a": "é\u0002\\"}}),
         call("c2", "g", {"x": 1}, raw=True),
         call("c3", "h", json.dumps(json.dumps({"double": "encoded"})), raw=True),
         call("c4", "i", "not json at all", raw=True),
         call("c5", "j", "[1, 2, 3]", raw=True),
         call("c6", "k", "", raw=True),
         call("c7", "l", None, raw=True),
         call("c8", "m", "{\"dup\": 1, \"other\": 2, \"dup\": 3}", raw=True),
         call("c9", "n", "  {\"spaced\": \"yes\"}\n", raw=True),
         call("c10", "o", 12, raw=True),
         call("c11", "p", "{\"bad\": }", raw=True)])], CHAT),
    ("tool_result_then_user_text", [u("q"), a("", tool_calls=[call("c1", "f", {})]), tool("c1", "out"), u("and more")], CHAT),
    ("tool_result_null_and_number", [u("q"), a("", tool_calls=[call("c1", "f", {}), call("c2", "f", {})]),
                                     tool("c1", None), tool("c2", 5)], CHAT),
    ("tool_without_preceding_call", [tool("x", "orphan")], CHAT),
    ("tool_result_blocks_list", [u("q"), a("", tool_calls=[call("c1", "f", {})]),
                                 tool("c1", [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}])], CHAT),
    ("user_block_list_with_tool_result",
     [u([{"type": "text", "text": "before"},
         {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "inner"}, {"type": "video"}]},
         {"type": "audio"}, {"type": "tool_result", "content": "plain"}])], CHAT),
    ("tool_calls_thinking_keep_all",
     [dict(SYS, tools=[WEATHER]), u("A?"), a("", "r1", tool_calls=[call("c1", "get_weather", {"city": "A"})]),
      tool("c1", "sunny"), a("It is sunny.", "r2"), u("B?")], THINK),
    # images
    ("image_url_blocks",
     [u([{"type": "text", "text": "Compare"}, {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
         {"type": "image_url", "image_url": "https://x/b.png"}, {"type": "text", "text": "please"}])], CHAT),
    ("image_source_block",
     [SYS, u([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0"}},
              {"type": "text", "text": "What is this?"}])], THINK),
    ("image_data_and_url_keys", [u([{"type": "image", "data": "abc", "url": "u"}])], CHAT),
    ("image_in_tool_result",
     [u("Screenshot?"), a("", tool_calls=[call("c1", "shot", {})]),
      tool("c1", [{"type": "text", "text": "here"}, {"type": "image_url", "image_url": {"url": "file:///s.png"}}])], CHAT),
    ("image_in_user_tool_result_block",
     [u([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "url": "inner.png"}]}])], CHAT),
    ("images_across_turns",
     [u([{"type": "image", "url": "1.png"}]), a("one"), u([{"type": "text", "text": "and"}, {"type": "image", "url": "2.png"}])], CHAT),
    ("image_in_system_and_assistant",
     [{"role": "system", "content": [{"type": "text", "text": "Ref:"}, {"type": "image", "url": "s.png"}]},
      u("Hi"), {"role": "assistant", "content": [{"type": "text", "text": "Seen"}, {"type": "image", "url": "a.png"}]}], CHAT),
    ("content_list_non_dict_blocks", [{"role": "system", "content": ["loose string", {"type": "text", "text": "kept"}]}, u("q")], CHAT),
    # context (earlier turns already in the cache)
    ("context_chat", [u("And now?")], dict(CHAT, context=[SYS, u("Hi"), a("Hello")])),
    ("context_thinking_drop", [u("Next")], dict(THINK, context=[u("First"), a("Reply", "old reasoning")])),
    ("context_thinking_assistant_continuation", [a("Answer", "fresh reasoning")], dict(THINK, context=[SYS, u("Q")])),
    ("context_tool_results_sorted_by_context_calls",
     [tool("c2", "second"), tool("c1", "first")],
     dict(CHAT, context=[u("q"), a("", tool_calls=[call("c1", "f", {}), call("c2", "f", {})])])),
    ("context_with_images_not_returned",
     [u([{"type": "image", "url": "new.png"}])], dict(CHAT, context=[u([{"type": "image", "url": "old.png"}]), a("ok")])),
    ("context_empty_list", [u("x")], dict(THINK, context=[])),
    ("context_unknown_role_dropped", [u("new")], dict(THINK, context=[u("a"), {"role": "other", "content": "?"}, a("b", "c")])),
    # what the encoder rejects
    ("error_unknown_role", [{"role": "developer", "content": "x"}], CHAT),
    ("error_missing_role", [{"content": "x"}], CHAT),
    ("error_placeholder_in_content", [u("see <｜deepseek_image｜> here")], CHAT),
    ("error_placeholder_in_text_block", [u([{"type": "text", "text": "<｜deepseek_image｜>"}])], CHAT),
    ("error_placeholder_in_reasoning", [u("q"), a("x", "<｜deepseek_image｜>")], THINK),
    ("error_effort_medium", [u("x")], dict(THINK, reasoning_effort="medium")),
    ("error_effort_0", [u("x")], dict(THINK, reasoning_effort=0)),
    ("error_effort_101", [u("x")], dict(THINK, reasoning_effort=101)),
    ("error_effort_float", [u("x")], dict(THINK, reasoning_effort=50.0)),
    ("error_effort_bool", [u("x")], dict(CHAT, reasoning_effort=True)),
    ("error_invalid_task", [u("x", task="summarize")], CHAT),
    ("error_image_without_source", [u([{"type": "image"}])], CHAT),
    ("error_image_url_empty", [u([{"type": "image_url", "image_url": {"url": ""}}])], CHAT),
    ("error_user_null_content", [{"role": "user", "content": None}], CHAT),
    ("error_tool_call_without_arguments", [u("q"), a("", tool_calls=[{"id": "c", "function": {"name": "f"}}])], CHAT),
    ("error_tool_without_function", [dict(SYS, tools=[{"type": "function"}]), u("q")], CHAT),
    ("error_text_block_null", [u([{"type": "text", "text": None}])], CHAT),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoding", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    digest = hashlib.sha256(open(args.encoding, "rb").read()).hexdigest()
    if digest != ENCODING_SHA256:
        raise SystemExit(f"{args.encoding}: SHA-256 {digest}, expected {ENCODING_SHA256}")
    spec = importlib.util.spec_from_file_location("ds41_encoding", args.encoding)
    enc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(enc)

    vectors = []
    names = set()
    for name, messages, kwargs in CASES:
        assert name not in names, name
        names.add(name)
        messages = json.loads(json.dumps(messages))  # exactly what the file holds
        kwargs = json.loads(json.dumps(kwargs))
        vec = {"name": name, "messages": messages, "kwargs": kwargs}
        try:
            prompt, media = enc.encode_messages(messages, return_multi_modal_data=True, **kwargs)
            vec["prompt"] = prompt
            vec["images"] = media["images"]
            assert not name.startswith("error_"), name
        except Exception as e:  # the encoder's own asserts and raises
            assert name.startswith("error_"), (name, repr(e))
            vec["raises"] = type(e).__name__
            vec["message"] = str(e)
        vectors.append(vec)

    meta = {"encoder": "encode_messages(messages, return_multi_modal_data=True, **kwargs) of fastllm's "
                       "encoding_dsv41.py @ fd873f3a, 8-line note removed (tests/data/tokenizer/README.md §4)",
            "encoder_sha256": digest, "python": platform.python_version(), "count": len(vectors)}
    with open(args.out, "w", encoding="utf-8") as f:
        head = json.dumps(meta, ensure_ascii=False, indent=1)
        f.write(head[:-2] + ",\n \"vectors\": [\n")
        f.write(",\n".join(json.dumps(v, ensure_ascii=False) for v in vectors))
        f.write("\n ]\n}\n")
    print(f"{len(vectors)} vectors ({sum('raises' in v for v in vectors)} errors) -> {args.out}")


if __name__ == "__main__":
    main()
