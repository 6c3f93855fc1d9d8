#include "actors/model/chat_format.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <ctime>
#include <fstream>
#include <regex>
#include <sstream>
#include <string_view>

namespace cuda_agent::model {
namespace {

using nlohmann::ordered_json;

// --- Python's text functions, as the templates call them --------------------------------------

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

// str.isspace() of one code point: what str.strip() (jinja's trim) removes.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
         c == 0x202f || c == 0x205f || c == 0x3000;
}

// The code point of the UTF-8 sequence text[at, at + length); -1 when it is not one.
int64_t code_point(std::string_view text, size_t at, size_t length) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[at + i]); };
  if (length == 1) return byte(0) < 0x80 ? byte(0) : -1;
  const unsigned char lead = byte(0);
  int64_t value = length == 2 ? (lead & 0x1f) : length == 3 ? (lead & 0x0f) : (lead & 0x07);
  if ((length == 2 && (lead & 0xe0) != 0xc0) || (length == 3 && (lead & 0xf0) != 0xe0) ||
      (length == 4 && (lead & 0xf8) != 0xf0))
    return -1;
  for (size_t i = 1; i < length; ++i) {
    if ((byte(i) & 0xc0) != 0x80) return -1;
    value = (value << 6) | (byte(i) & 0x3f);
  }
  return value;
}

size_t sequence_length(unsigned char lead) {
  return lead < 0x80 ? 1 : (lead & 0xe0) == 0xc0 ? 2 : (lead & 0xf0) == 0xe0 ? 3 : (lead & 0xf8) == 0xf0 ? 4 : 1;
}

// str.strip(): Unicode whitespace off both ends (bytes that are not UTF-8 are kept).
std::string python_strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t length = sequence_length(static_cast<unsigned char>(text[begin]));
    if (begin + length > text.size()) break;
    const int64_t c = code_point(text, begin, length);
    if (c < 0 || !is_python_space(static_cast<char32_t>(c))) break;
    begin += length;
  }
  size_t end = text.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && end - start < 4 && (static_cast<unsigned char>(text[start]) & 0xc0) == 0x80)
      --start;
    const int64_t c = code_point(text, start, end - start);
    if (c < 0 || !is_python_space(static_cast<char32_t>(c))) break;
    end = start;
  }
  return std::string(text.substr(begin, end - begin));
}

std::string lstrip_newlines(std::string_view text) {
  const size_t begin = text.find_first_not_of('\n');
  return begin == std::string_view::npos ? std::string() : std::string(text.substr(begin));
}

std::string rstrip_newlines(std::string_view text) {
  const size_t end = text.find_last_not_of('\n');
  return end == std::string_view::npos ? std::string() : std::string(text.substr(0, end + 1));
}

std::string strip_newlines(std::string_view text) { return lstrip_newlines(rstrip_newlines(text)); }


// --- JSON as Python's json.dumps writes it -----------------------------------------------------

void put_string(std::string& out, const std::string& text) {
  out += '"';
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          static constexpr char hex[] = "0123456789abcdef";
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 0xf];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// repr(float): the shortest digits that read back the same, fixed notation for exponents in
// [-4, 16), scientific with a signed two-digit exponent otherwise, ".0" on a whole number.
std::string python_float(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  std::array<char, 64> buffer{};
  const auto result =
      std::to_chars(buffer.data(), buffer.data() + buffer.size(), value, std::chars_format::scientific);
  const std::string sci(buffer.data(), result.ptr);  // "-1.2345e+05"
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (!mantissa.empty() && mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (const char c : mantissa)
    if (c != '.') digits += c;
  if (exponent >= -4 && exponent < 16) {
    std::string out;
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else {
      const auto whole = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= whole)
        out = digits + std::string(whole - digits.size(), '0') + ".0";
      else
        out = digits.substr(0, whole) + "." + digits.substr(whole);
    }
    return sign + out;
  }
  std::string out = digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  const int magnitude = std::abs(exponent);
  out += exponent < 0 ? "e-" : "e+";
  if (magnitude < 10) out += '0';
  out += std::to_string(magnitude);
  return sign + out;
}

void put_json(std::string& out, const ordered_json& value, int indent, int depth) {
  const auto newline = [&](int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  };
  switch (value.type()) {
    case ordered_json::value_t::null: out += "null"; return;
    case ordered_json::value_t::boolean: out += value.get<bool>() ? "true" : "false"; return;
    case ordered_json::value_t::number_integer: out += std::to_string(value.get<int64_t>()); return;
    case ordered_json::value_t::number_unsigned: out += std::to_string(value.get<uint64_t>()); return;
    case ordered_json::value_t::number_float: out += python_float(value.get<double>()); return;
    case ordered_json::value_t::string: put_string(out, value.get_ref<const std::string&>()); return;
    case ordered_json::value_t::array:
    case ordered_json::value_t::object: {
      const bool object = value.is_object();
      if (value.empty()) {
        out += object ? "{}" : "[]";
        return;
      }
      out += object ? '{' : '[';
      bool first = true;
      for (auto it = value.begin(); it != value.end(); ++it) {
        if (!first) out += indent > 0 ? "," : ", ";
        first = false;
        if (indent > 0) newline(depth + 1);
        if (object) {
          put_string(out, it.key());
          out += ": ";
        }
        put_json(out, *it, indent, depth + 1);
      }
      if (indent > 0) newline(depth);
      out += object ? '}' : ']';
      return;
    }
    default: out += "null"; return;  // binary and discarded values do not occur in parsed text
  }
}

// --- The messages as the templates see them ----------------------------------------------------

// A call's "arguments" as vLLM hands them to a template: the parsed JSON, {} for none, the raw
// text when it is not JSON.
struct call_arguments {
  bool is_string = false;
  std::string raw;
  ordered_json value;
};

call_arguments arguments_of(const tool_call& call) {
  call_arguments out;
  if (call.arguments_json.empty()) {
    out.value = ordered_json::object();
    return out;
  }
  out.value = ordered_json::parse(call.arguments_json, nullptr, false);
  if (out.value.is_discarded()) {
    out.is_string = true;
    out.raw = call.arguments_json;
  }
  return out;
}

// tojson of the arguments, as qwen2 and llama3 write them.
std::string arguments_tojson(const call_arguments& args) {
  return args.is_string ? python_json(ordered_json(args.raw)) : python_json(args.value);
}

// What qwen3 writes: a string as it is, anything else through tojson.
std::string arguments_qwen3(const call_arguments& args) {
  return args.is_string ? args.raw : python_json(args.value);
}

class writer {
 public:
  void put(std::string_view text, int32_t message, bool generated = false) {
    if (text.empty()) return;
    auto& spans = out_.spans;
    if (!spans.empty() && spans.back().message == message && spans.back().generated == generated) {
      spans.back().end += text.size();
    } else {
      spans.push_back({out_.text.size(), out_.text.size() + text.size(), message, generated});
    }
    out_.text += text;
  }
  chat_render take() { return std::move(out_); }

 private:
  chat_render out_;
};

// The offered tools as the template's `tools` list.
std::vector<ordered_json> offered_definitions(const chat_tools& tools,
                                              const std::vector<std::string>& offered) {
  const auto& names = offered.empty() ? tools.names : offered;
  std::vector<ordered_json> out;
  for (const auto& name : names) {
    const auto* def = tools.find(name);
    if (def == nullptr) {
      std::string known;
      for (const auto& n : tools.names) known += (known.empty() ? "" : ", ") + n;
      throw model_error{"chat format: the request offers the tool '" + name +
                        "', which has no schema; the schemas are: " + known};
    }
    ordered_json tool;
    tool["type"] = "function";
    tool["function"] = *def;
    out.push_back(std::move(tool));
  }
  return out;
}

void check_roles(const std::vector<chat_message>& messages) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant" && role != "tool")
      throw model_error{"chat format: message " + std::to_string(i) + " has the role '" + role +
                        "'; the roles are system, user, assistant and tool"};
  }
}

bool has_calls(const chat_message& m) { return m.role == "assistant" && !m.tool_calls.empty(); }

// --- qwen2 and qwen3 -------------------------------------------------------------------------

constexpr std::string_view qwen2_default_system =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr std::string_view qwen_tools_intro =
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view qwen_tools_outro =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
constexpr std::string_view qwen_assistant_header = "<|im_start|>assistant\n";

void put_qwen_tools(writer& w, const std::vector<ordered_json>& defs) {
  w.put(qwen_tools_intro, -1);
  for (const auto& def : defs) w.put("\n" + python_json(def), -1);
  w.put(qwen_tools_outro, -1);
}

// A run of tool results: one user turn of <tool_response> blocks.
void put_qwen_tool(writer& w, const std::vector<chat_message>& messages, size_t i) {
  const auto index = static_cast<int32_t>(i);
  if (i == 0 || messages[i - 1].role != "tool") w.put("<|im_start|>user", index);
  w.put("\n<tool_response>\n" + messages[i].content + "\n</tool_response>", index);
  if (i + 1 == messages.size() || messages[i + 1].role != "tool") w.put("<|im_end|>\n", index);
}

// An assistant turn whose text after "<|im_start|>assistant\n" is `body`: the model's part.
void put_assistant(writer& w, int32_t index, std::string_view header, const std::string& body,
                   std::string_view end_of_turn, std::string_view after) {
  w.put(header, index);
  w.put(body, index, true);
  w.put(end_of_turn, index, true);
  w.put(after, index);
}

std::string qwen_call(const tool_call& call, const std::string& arguments) {
  return "<tool_call>\n{\"name\": \"" + call.tool + "\", \"arguments\": " + arguments +
         "}\n</tool_call>";
}

void render_qwen2(writer& w, const std::vector<chat_message>& messages,
                  const std::vector<ordered_json>& defs, bool generation_prompt) {
  const bool first_system = !messages.empty() && messages[0].role == "system";
  if (!defs.empty()) {
    w.put("<|im_start|>system\n", first_system ? 0 : -1);
    if (first_system)
      w.put(messages[0].content, 0);
    else
      w.put(qwen2_default_system, -1);
    w.put("\n\n", -1);
    put_qwen_tools(w, defs);
  } else if (first_system) {
    w.put("<|im_start|>system\n" + messages[0].content + "<|im_end|>\n", 0);
  } else {
    w.put("<|im_start|>system\n" + std::string(qwen2_default_system) + "<|im_end|>\n", -1);
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const auto index = static_cast<int32_t>(i);
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      w.put("<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n", index);
    } else if (m.role == "assistant" && m.tool_calls.empty()) {
      put_assistant(w, index, qwen_assistant_header, m.content, "<|im_end|>", "\n");
    } else if (m.role == "assistant") {
      // "<|im_start|>assistant" + ("\n" + content) + ("\n<tool_call>...")*: the body starts
      // with the newline the generation prompt ends with.
      std::string body = m.content.empty() ? "" : "\n" + m.content;
      for (const auto& call : m.tool_calls)
        body += "\n" + qwen_call(call, arguments_tojson(arguments_of(call)));
      put_assistant(w, index, qwen_assistant_header, body.substr(1), "<|im_end|>", "\n");
    } else if (m.role == "tool") {
      put_qwen_tool(w, messages, i);
    }
  }
  if (generation_prompt) w.put(qwen_assistant_header, -1);
}

void render_qwen3(writer& w, const std::vector<chat_message>& messages,
                  const std::vector<ordered_json>& defs, bool generation_prompt,
                  bool enable_thinking) {
  const bool first_system = !messages.empty() && messages[0].role == "system";
  if (!defs.empty()) {
    w.put("<|im_start|>system\n", first_system ? 0 : -1);
    if (first_system) w.put(messages[0].content + "\n\n", 0);
    put_qwen_tools(w, defs);
  } else if (first_system) {
    w.put("<|im_start|>system\n" + messages[0].content + "<|im_end|>\n", 0);
  }
  // The last user message that is a query, not tool results written as a user turn.
  size_t last_query = messages.empty() ? 0 : messages.size() - 1;
  for (size_t k = messages.size(); k-- > 0;) {
    const auto& c = messages[k].content;
    if (messages[k].role == "user" &&
        !(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
      last_query = k;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    const auto index = static_cast<int32_t>(i);
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      w.put("<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n", index);
    } else if (m.role == "assistant") {
      std::string content = m.content;
      std::string reasoning;
      const size_t close = m.content.find("</think>");
      if (close != std::string::npos) {
        content = lstrip_newlines(std::string_view(m.content).substr(m.content.rfind("</think>") + 8));
        const std::string before = rstrip_newlines(std::string_view(m.content).substr(0, close));
        const size_t open = before.rfind("<think>");
        reasoning = lstrip_newlines(open == std::string::npos ? std::string_view(before)
                                                              : std::string_view(before).substr(open + 7));
      }
      std::string body;
      if (i > last_query && (i + 1 == messages.size() || !reasoning.empty()))
        body = "<think>\n" + strip_newlines(reasoning) + "\n</think>\n\n" + lstrip_newlines(content);
      else
        body = content;
      for (size_t j = 0; j < m.tool_calls.size(); ++j) {
        if (j > 0 || !content.empty()) body += "\n";
        body += qwen_call(m.tool_calls[j], arguments_qwen3(arguments_of(m.tool_calls[j])));
      }
      // Without thinking the empty think block is the generation prompt's, not the model's.
      constexpr std::string_view empty_think = "<think>\n\n</think>\n\n";
      if (!enable_thinking && starts_with(body, empty_think)) {
        w.put(qwen_assistant_header, index);
        w.put(empty_think, index);
        body.erase(0, empty_think.size());
        put_assistant(w, index, "", body, "<|im_end|>", "\n");
      } else {
        put_assistant(w, index, qwen_assistant_header, body, "<|im_end|>", "\n");
      }
    } else if (m.role == "tool") {
      put_qwen_tool(w, messages, i);
    }
  }
  if (generation_prompt) {
    w.put(qwen_assistant_header, -1);
    if (!enable_thinking) w.put("<think>\n\n</think>\n\n", -1);
  }
}

// --- llama3 ----------------------------------------------------------------------------------

constexpr std::string_view llama_assistant_header = "<|start_header_id|>assistant<|end_header_id|>\n\n";

void render_llama3(writer& w, const std::vector<chat_message>& input,
                   const std::vector<ordered_json>& defs, bool generation_prompt,
                   const std::string& date_string) {
  // One call per assistant turn: a turn with several becomes that many turns.
  struct item {
    const chat_message* message;
    int32_t index;
    const tool_call* call;  // for an assistant turn with calls
  };
  std::vector<item> messages;
  for (size_t i = 0; i < input.size(); ++i) {
    const auto index = static_cast<int32_t>(i);
    if (has_calls(input[i]))
      for (const auto& call : input[i].tool_calls) messages.push_back({&input[i], index, &call});
    else
      messages.push_back({&input[i], index, nullptr});
  }
  size_t next = 0;
  w.put("<|begin_of_text|>", -1);
  const bool first_system = !messages.empty() && messages[0].message->role == "system";
  w.put("<|start_header_id|>system<|end_header_id|>\n\n", first_system ? 0 : -1);
  if (!defs.empty()) w.put("Environment: ipython\n", -1);
  w.put("Cutting Knowledge Date: December 2023\nToday Date: " + date_string + "\n\n", -1);
  if (first_system) {
    w.put(python_strip(messages[0].message->content), 0);
    next = 1;
  }
  w.put("<|eot_id|>", first_system ? 0 : -1);
  if (!defs.empty()) {
    // The template puts the tools into the first message after the system prompt, whatever its
    // role, and raises when there is none.
    if (next == messages.size())
      throw model_error{
          "chat format llama3: the tools go into the first user message, and the conversation "
          "has none; start it with a user message"};
    const int32_t index = messages[next].index;
    w.put("<|start_header_id|>user<|end_header_id|>\n\n"
          "Given the following functions, please respond with a JSON for a function call "
          "with its proper arguments that best answers the given prompt.\n\n"
          "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument "
          "name and its value}.Do not use variables.\n\n",
          index);
    for (const auto& def : defs) w.put(python_json(def, 4) + "\n\n", -1);
    w.put(python_strip(messages[next].message->content) + "<|eot_id|>", index);
    ++next;
  }
  for (; next < messages.size(); ++next) {
    const auto& m = *messages[next].message;
    const int32_t index = messages[next].index;
    if (m.role == "tool") {
      w.put("<|start_header_id|>ipython<|end_header_id|>\n\n" + python_json(ordered_json(m.content)) +
                "<|eot_id|>",
            index);
    } else if (messages[next].call != nullptr) {
      const auto& call = *messages[next].call;
      put_assistant(w, index, llama_assistant_header,
                    "{\"name\": \"" + call.tool + "\", \"parameters\": " +
                        arguments_tojson(arguments_of(call)) + "}",
                    "<|eot_id|>", "");
    } else if (m.role == "assistant") {
      put_assistant(w, index, llama_assistant_header, python_strip(m.content), "<|eot_id|>", "");
    } else {
      w.put("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + python_strip(m.content) +
                "<|eot_id|>",
            index);
    }
  }
  if (generation_prompt) w.put(llama_assistant_header, -1);
}

// --- Parsing -----------------------------------------------------------------------------------

std::string name_in(const std::string& text) {
  static const std::regex name_key{R"re("name"\s*:\s*"([^"\\]*)")re"};
  std::smatch match;
  return std::regex_search(text, match, name_key) ? match[1].str() : std::string();
}

std::string cut(const std::string& text, size_t limit = 200) {
  return text.size() <= limit ? text : text.substr(0, limit) + "...";
}

// One call from the JSON object the model wrote; `arguments_keys` in the order they are tried.
tool_call call_from_json(const std::string& text, std::initializer_list<const char*> arguments_keys,
                         const chat_tools& tools, const std::vector<std::string>& offered) {
  tool_call call;
  const auto doc = ordered_json::parse(text, nullptr, false);
  if (doc.is_discarded()) {
    call.tool = name_in(text);
    call.arguments_json = python_strip(text);
    call.parse_error = "the tool call is not valid JSON: " + cut(python_strip(text));
    return call;
  }
  if (!doc.is_object()) {
    call.arguments_json = python_strip(text);
    call.parse_error = "the tool call must be a JSON object with \"name\" and \"arguments\"";
    return call;
  }
  const auto name = doc.find("name");
  if (name != doc.end() && name->is_string()) call.tool = name->get<std::string>();
  ordered_json arguments = ordered_json::object();
  for (const char* key : arguments_keys) {
    const auto it = doc.find(key);
    if (it != doc.end()) {
      arguments = *it;
      break;
    }
  }
  call.arguments_json = python_json(arguments);
  call.parse_error = policy::check_tool_call(tools.schemas, offered, call.tool, call.arguments_json);
  return call;
}

tool_call unterminated_call(const std::string& text, const std::string& why) {
  tool_call call;
  call.tool = name_in(text);
  call.arguments_json = python_strip(text);
  call.parse_error = why;
  return call;
}

void append_line(std::string& content, const std::string& text) {
  const auto line = python_strip(text);
  if (line.empty()) return;
  content += (content.empty() ? "" : "\n") + line;
}

void parse_qwen(const std::string& text, const chat_tools& tools,
                const std::vector<std::string>& offered, parsed_completion& out) {
  static constexpr std::string_view open = "<tool_call>";
  static constexpr std::string_view close = "</tool_call>";
  size_t at = text.find(open);
  out.content = text.substr(0, at);
  if (at == std::string::npos) return;
  // The templates put a newline between the content and the first call only where the content
  // (after a think block) is not empty.
  const size_t think_end = out.content.rfind("</think>");
  const std::string visible =
      think_end == std::string::npos ? out.content : lstrip_newlines(out.content.substr(think_end + 8));
  if (!visible.empty() && ends_with(out.content, "\n")) out.content.pop_back();
  while (at != std::string::npos) {
    const size_t inner = at + open.size();
    const size_t end = text.find(close, inner);
    if (end == std::string::npos) {
      out.tool_calls.push_back(unterminated_call(
          text.substr(inner),
          "the tool call is not closed with </tool_call>: the completion ended inside it (at "
          "max_tokens?)"));
      return;
    }
    out.tool_calls.push_back(call_from_json(text.substr(inner, end - inner), {"arguments"}, tools, offered));
    const size_t after = end + close.size();
    at = text.find(open, after);
    append_line(out.content, text.substr(after, at == std::string::npos ? std::string::npos : at - after));
  }
}

// The end of the JSON object that starts at text[begin] == '{', or npos when it is not closed.
size_t object_end(const std::string& text, size_t begin) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = begin; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string::npos;
}

void parse_llama3(const std::string& text, const chat_tools& tools,
                  const std::vector<std::string>& offered, parsed_completion& out) {
  std::string body = python_strip(text);
  if (starts_with(body, "<|python_tag|>")) body = python_strip(body.substr(14));
  static const std::regex call_start{R"re(^\{\s*"name"\s*:)re"};
  if (!std::regex_search(body, call_start)) {
    out.content = text;
    return;
  }
  size_t at = 0;
  while (at < body.size()) {
    if (body[at] != '{') {
      append_line(out.content, body.substr(at));
      return;
    }
    const size_t end = object_end(body, at);
    if (end == std::string::npos) {
      out.tool_calls.push_back(unterminated_call(
          body.substr(at),
          "the tool call's JSON is not closed: the completion ended inside it (at max_tokens?)"));
      return;
    }
    out.tool_calls.push_back(
        call_from_json(body.substr(at, end - at), {"parameters", "arguments"}, tools, offered));
    at = body.find_first_not_of(" \t\r\n", end);
    if (at == std::string::npos) return;
    if (body[at] == ';') at = body.find_first_not_of(" \t\r\n", at + 1);
    if (at == std::string::npos) return;
  }
}

// --- Detection ---------------------------------------------------------------------------------

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::array<char, 32> buffer{};
  const size_t n = std::strftime(buffer.data(), buffer.size(), "%d %b %Y", &local);
  return std::string(buffer.data(), n);
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

// The format a chat template is, by the markers of each family's template; "" when none fits.
std::string format_of_template(const std::string& t) {
  if (contains(t, "<|im_start|>") && contains(t, "<tool_call>")) {
    if (contains(t, "last_query_index") && contains(t, "enable_thinking")) return "qwen3";
    if (!contains(t, "<think>") && contains(t, qwen2_default_system)) return "qwen2";
    return "";
  }
  if (contains(t, "<|start_header_id|>") && contains(t, "Cutting Knowledge Date: December 2023") &&
      contains(t, "tools_in_user_message"))
    return contains(t, "strftime_now") ? "llama3.2" : "llama3";
  return "";
}

}  // namespace

std::string python_json(const ordered_json& value, int indent) {
  std::string out;
  put_json(out, value, indent, 0);
  return out;
}

std::string chat_format::name() const {
  switch (family) {
    case chat_family::qwen2: return "qwen2";
    case chat_family::qwen3: return "qwen3";
    case chat_family::llama3: return "llama3";
  }
  return "qwen2";
}

std::vector<std::string> chat_format::stop_strings() const {
  if (family == chat_family::llama3) return {"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"};
  return {"<|im_end|>", "<|endoftext|>"};
}

chat_format chat_format::named(const std::string& name) {
  chat_format format;
  if (name == "qwen2" || name == "qwen2.5") {
    format.family = chat_family::qwen2;
  } else if (name == "qwen3") {
    format.family = chat_family::qwen3;
  } else if (name == "llama3" || name == "llama3.1" || name == "llama3.3") {
    format.family = chat_family::llama3;
  } else if (name == "llama3.2") {
    format.family = chat_family::llama3;
    format.date_string = today();
  } else {
    throw model_error{"chat format '" + name +
                      "' is not known; the formats are qwen2 (Qwen2.5-Instruct), qwen3 and llama3 "
                      "(Llama 3.1/3.3 Instruct; llama3.2 dates the prompt today)"};
  }
  return format;
}

chat_format chat_format::detect(const std::filesystem::path& dir) {
  std::string found;
  // transformers 5 writes the template beside the config; older checkpoints hold it inside.
  const auto jinja = dir / "chat_template.jinja";
  const auto tokenizer_config = dir / "tokenizer_config.json";
  std::string template_text;
  std::string template_source;
  std::error_code ec;
  if (std::filesystem::is_regular_file(jinja, ec)) {
    template_text = read_text(jinja);
    template_source = jinja.string();
  } else if (std::filesystem::is_regular_file(tokenizer_config, ec)) {
    const auto doc = nlohmann::json::parse(read_text(tokenizer_config), nullptr, false);
    if (doc.is_discarded() || !doc.is_object())
      throw model_error{tokenizer_config.string() + " is not a JSON object; restore it from the checkpoint"};
    const auto it = doc.find("chat_template");
    if (it != doc.end() && it->is_string()) {
      template_text = it->get<std::string>();
    } else if (it != doc.end() && it->is_array()) {
      // Named templates: the "default" one, as transformers picks it.
      for (const auto& entry : *it)
        if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
            entry["template"].is_string())
          template_text = entry["template"].get<std::string>();
    }
    template_source = tokenizer_config.string() + "'s chat_template";
  }
  if (!template_text.empty()) {
    const auto name = format_of_template(template_text);
    if (!name.empty()) return named(name);
    found = template_source + " is none of the Qwen2.5-Instruct, Qwen3 or Llama 3.1-3.3 Instruct templates";
  }
  const auto config = dir / "config.json";
  if (template_text.empty() && std::filesystem::is_regular_file(config, ec)) {
    const auto doc = nlohmann::json::parse(read_text(config), nullptr, false);
    const std::string type =
        !doc.is_discarded() && doc.is_object() && doc.contains("model_type") && doc["model_type"].is_string()
            ? doc["model_type"].get<std::string>()
            : "";
    if (type == "qwen2") return named("qwen2");
    if (type == "qwen3") return named("qwen3");
    if (type == "llama") return named("llama3");
    found = config.string() + " has model_type '" + type + "' and there is no chat template";
  }
  if (found.empty()) found = dir.string() + " has no chat_template.jinja, tokenizer_config.json or config.json";
  throw model_error{"cannot tell the chat format: " + found +
                    "; name it (policy chat format qwen2, qwen3 or llama3) if the model was trained "
                    "on one of them"};
}

chat_tools chat_tools::load(const std::filesystem::path& dir) {
  chat_tools out;
  out.schemas = policy::load_tool_schemas(dir);
  for (const auto& [name, schema] : out.schemas) {
    out.names.push_back(name);
    // Read again keeping the file's key order, which the templates' tojson writes.
    out.defs.push_back(ordered_json::parse(read_text(dir / (name + ".json"))));
  }
  return out;
}

const ordered_json* chat_tools::find(const std::string& name) const {
  const auto it = std::find(names.begin(), names.end(), name);
  return it == names.end() ? nullptr : &defs[static_cast<size_t>(it - names.begin())];
}

chat_render render(const chat_format& format, const std::vector<chat_message>& messages,
                   const chat_tools& tools, const std::vector<std::string>& offered,
                   bool add_generation_prompt) {
  check_roles(messages);
  const auto defs = offered_definitions(tools, offered);
  writer w;
  switch (format.family) {
    case chat_family::qwen2: render_qwen2(w, messages, defs, add_generation_prompt); break;
    case chat_family::qwen3:
      render_qwen3(w, messages, defs, add_generation_prompt, format.enable_thinking);
      break;
    case chat_family::llama3: render_llama3(w, messages, defs, add_generation_prompt, format.date_string); break;
  }
  return w.take();
}

parsed_completion parse_completion(const chat_format& format, const std::string& text,
                                   const chat_tools& tools, const std::vector<std::string>& offered,
                                   const std::string& call_id_prefix) {
  parsed_completion out;
  size_t stop = std::string::npos;
  for (const auto& s : format.stop_strings()) stop = std::min(stop, text.find(s));
  out.stopped = stop != std::string::npos;
  const std::string body = text.substr(0, stop);
  if (format.family == chat_family::llama3)
    parse_llama3(body, tools, offered, out);
  else
    parse_qwen(body, tools, offered, out);
  for (size_t i = 0; i < out.tool_calls.size(); ++i)
    out.tool_calls[i].call_id = call_id_prefix + "-" + std::to_string(i);
  return out;
}

std::string call_id_prefix(const std::string& episode_id, int32_t turn) {
  return episode_id + "-t" + std::to_string(turn);
}

}  // namespace cuda_agent::model
