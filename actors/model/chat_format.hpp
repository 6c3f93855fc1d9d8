// The chat format of the policy model's family: a conversation and the offered tools rendered to
// the exact prompt text that the checkpoint's Hugging Face chat template produces, and the text
// the model generated parsed back into content and tool calls.
//
//   const auto format = chat_format::detect(checkpoint_dir);  // or chat_format::named("qwen3")
//   const auto tools = chat_tools::load("skills/tools");
//   const chat_render prompt = render(format, request.messages, tools, request.tools);
//   ... generate from prompt.text until one of format.stop_strings() ...
//   const parsed_completion reply =
//       parse_completion(format, generated, tools, request.tools, call_id_prefix(episode, turn));
//
// Families (the templates the parity test renders with transformers are in tests/actors/model/templates):
//   qwen2   Qwen2.5-Instruct ChatML: a default system prompt when none is given, the tools as JSON
//           lines in <tools></tools>, calls as <tool_call>\n{"name": ..., "arguments": ...}\n
//           </tool_call>, consecutive tool results merged into one user turn of <tool_response>s.
//   qwen3   Qwen3: the same tools and calls, no default system prompt; an assistant turn after the
//           last user query keeps its <think> block, earlier ones lose it (see "Prefixes" below).
//   llama3  Llama 3.1 / 3.2 / 3.3 Instruct: header tokens, the tools as indented JSON in the first
//           user turn, a call as {"name": ..., "parameters": ...}, tool results as ipython turns
//           holding the result as a JSON string.
//
// What "exactly" means: render() equals transformers' apply_chat_template(messages, tools=tools,
// add_generation_prompt=..., tokenize=False) where each chat_message becomes {"role", "content"}
// (content always a string), an assistant message with calls adds "tool_calls": [{"id", "type":
// "function", "function": {"name", "arguments"}}] with arguments as the parsed JSON of
// arguments_json ({} when empty, the raw text when it is not JSON: what vLLM passes its templates),
// a tool message adds "tool_call_id", and tools is [{"type": "function", "function": <the
// schema file's object, keys in file order>}] for the offered names in order (None when none).
// JSON is written as the templates' tojson writes it (Python json.dumps, ensure_ascii=False).
// Two deliberate deviations, where the template would raise instead: llama3 takes one call per
// assistant turn, so a turn with several is rendered as that many consecutive assistant turns of
// one call each; llama3 with tools and no user message throws model_error.
//
// Prefixes: for building an episode's token sequence incrementally, render(m, gen=true) is a
// prefix of render(m + [assistant], gen=false), and render(m + [assistant], gen=false) a prefix of
// render(m + [assistant] + results, gen=true), in all three families, with these exceptions
// (tested in chat_format_test.cpp):
//   - qwen3: an assistant turn rendered as the last message gets an empty <think>\n\n</think>\n\n
//     block that it loses as soon as anything follows it unless it holds reasoning (so the empty
//     think block a model wrote is gone from later prompts); when a new user message follows,
//     every earlier assistant turn loses its <think> block; and with enable_thinking = false the
//     generation prompt's empty think block contradicts a turn that holds reasoning.
//   - qwen2/qwen3: a tool result closes its user turn only when no tool result follows, so a
//     render that ends in a tool result is not a prefix of one with a further result appended.
//   - every family re-renders the model's text in its canonical form (llama3 trims content; JSON
//     arguments are re-written with ", " and ": "), so the generated tokens and the re-rendered
//     turn agree only where the model wrote that form. Train on the sampled token ids, and use the
//     spans to mark which rendered characters the model produced.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/model/model_config.hpp"
#include "actors/policy/tool_schemas.hpp"
#include "messages/messages.hpp"

namespace cuda_agent::model {

enum class chat_family { qwen2, qwen3, llama3 };

struct chat_format {
  chat_family family = chat_family::qwen2;
  // llama3: the "Today Date:" line. Llama 3.1's template fixes it; 3.2's writes the day it renders
  // on, which detect() freezes at the day the format is made so that renders stay prefixes.
  std::string date_string = "26 Jul 2024";
  // qwen3: false appends Qwen3's empty think block to the generation prompt (no reasoning).
  bool enable_thinking = true;

  std::string name() const;  // "qwen2", "qwen3", "llama3"
  // The texts that end a turn; a completion is cut at the first of them.
  std::vector<std::string> stop_strings() const;

  // "qwen2" (also "qwen2.5"), "qwen3" or "llama3" (also "llama3.1", "llama3.2", "llama3.3");
  // throws model_error naming the families otherwise.
  static chat_format named(const std::string& name);
  // From dir/tokenizer_config.json's chat_template (the markers of each family's template), else
  // dir/config.json's model_type; throws model_error saying what was found and how to choose.
  static chat_format detect(const std::filesystem::path& dir);
};

// The tools the model may be offered: each schema in its file's key order (for rendering) and as
// the policy's schemas (for checking calls).
struct chat_tools {
  std::vector<std::string> names;            // file order is irrelevant: sorted by name
  std::vector<nlohmann::ordered_json> defs;  // defs[i]: the schema file of names[i], as written
  policy::tool_schemas schemas;

  // Reads every <Tool>.json in dir; throws config_error as policy::load_tool_schemas does.
  static chat_tools load(const std::filesystem::path& dir);
  // The schema of a tool by name, or nullptr.
  const nlohmann::ordered_json* find(const std::string& name) const;
};

// A run of rendered characters and where it came from.
struct chat_span {
  size_t begin = 0;
  size_t end = 0;
  int32_t message = -1;    // index of the message it renders; -1: the template's own text
  bool generated = false;  // written by the model in an assistant turn (loss mask 1), its end of
                           // turn token included; the turn's header is not
};

struct chat_render {
  std::string text;
  std::vector<chat_span> spans;  // cover text in order, without gaps
};

// The prompt for `messages` with the tools named in `offered` (in that order; every tool of
// `tools` in name order when empty, as the OpenAI backend offers them). Throws model_error on a
// role other than system, user, assistant, tool, and on an offered tool that has no schema.
chat_render render(const chat_format& format, const std::vector<chat_message>& messages,
                   const chat_tools& tools, const std::vector<std::string>& offered,
                   bool add_generation_prompt = true);

// What the model wrote in one turn.
struct parsed_completion {
  std::string content;  // the text outside tool calls
  std::vector<tool_call> tool_calls;
  bool stopped = false;  // the text ended with one of the format's stop strings
};

// Parses a completion (with or without its stop string; anything after a stop string is
// ignored). Calls get ids "<call_id_prefix>-<index>" (index from 0 in the order written); a
// malformed call (not JSON, no name, unknown tool, arguments not an object, a missing or
// mistyped argument, a block left open at the end of the text) is kept with parse_error set.
//   qwen2/qwen3: every <tool_call>...</tool_call> block is a call; content is the text before
//     the first one without the newline that separates them; non-blank text between or after
//     blocks is appended to content on a line of its own.
//   llama3: the text (after an optional <|python_tag|>) is calls when it starts with a JSON
//     object whose first key is "name" — one or several separated by ';', each {"name": ...,
//     "parameters" or "arguments": {...}} — and content otherwise.
parsed_completion parse_completion(const chat_format& format, const std::string& text,
                                   const chat_tools& tools, const std::vector<std::string>& offered,
                                   const std::string& call_id_prefix);

// "<episode_id>-t<turn>": with the index, unique within a run and the same on every replay.
std::string call_id_prefix(const std::string& episode_id, int32_t turn);

// JSON as Python's json.dumps(value, ensure_ascii=False) writes it: ", " and ": " between items,
// or with indent > 0 one item a line and "," between items; floats in Python's repr.
std::string python_json(const nlohmann::ordered_json& value, int indent = -1);

}  // namespace cuda_agent::model
