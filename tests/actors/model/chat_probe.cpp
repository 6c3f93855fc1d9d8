// Drives the chat format for tests/actors/model/test_chat_format.py: reads one JSON request on stdin,
// writes one JSON answer on stdout.
//   {"format": "qwen2", "date_string": "...", "enable_thinking": true, "tools_dir": "...",
//    "renders": [{"messages": [chat_message...], "offered": [...], "add_generation_prompt": true}],
//    "parses": [{"text": "...", "offered": [...], "call_id_prefix": "..."}]}
// -> {"renders": [{"text": "...", "spans": [[begin, end, message, generated]...]} or {"error"}],
//     "parses": [{"content", "stopped", "tool_calls": [chat_message's tool_call...]}]}
// or {"detect": "<checkpoint dir>"} -> {"detected": "qwen3", "date_string": ...} or {"error": ...}
#include <iostream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "actors/model/chat_format.hpp"

using nlohmann::json;
namespace model = cuda_agent::model;

namespace {

cuda_agent::chat_message message_of(const json& j) {
  cuda_agent::chat_message m;
  m.role = j.value("role", "");
  m.content = j.value("content", "");
  m.tool_call_id = j.value("tool_call_id", "");
  for (const auto& c : j.value("tool_calls", json::array()))
    m.tool_calls.push_back({c.value("call_id", ""), c.value("tool", ""), c.value("arguments_json", ""),
                            c.value("parse_error", "")});
  return m;
}

}  // namespace

int main() {
  try {
    const std::string input{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    const auto request = json::parse(input);
    if (request.contains("detect")) {
      try {
        const auto format = model::chat_format::detect(request["detect"].get<std::string>());
        std::cout << json{{"detected", format.name()}, {"date_string", format.date_string}}.dump() << "\n";
      } catch (const model::model_error& e) {
        std::cout << json{{"error", e.what()}}.dump() << "\n";
      }
      return 0;
    }
    auto format = model::chat_format::named(request.at("format").get<std::string>());
    if (request.contains("date_string")) format.date_string = request["date_string"].get<std::string>();
    if (request.contains("enable_thinking")) format.enable_thinking = request["enable_thinking"].get<bool>();
    const auto tools = model::chat_tools::load(request.at("tools_dir").get<std::string>());
    const model::chat_tools no_tools;

    json answer = {{"renders", json::array()}, {"parses", json::array()}};
    for (const auto& r : request.value("renders", json::array())) {
      std::vector<cuda_agent::chat_message> messages;
      for (const auto& m : r.at("messages")) messages.push_back(message_of(m));
      // An empty list offers every tool; the test means none, so it gets no tools at all.
      const auto offered = r.value("offered", std::vector<std::string>{});
      try {
        const auto rendered = model::render(format, messages, offered.empty() ? no_tools : tools, offered,
                                            r.value("add_generation_prompt", true));
        json spans = json::array();
        for (const auto& s : rendered.spans) spans.push_back({s.begin, s.end, s.message, s.generated});
        answer["renders"].push_back({{"text", rendered.text}, {"spans", spans}});
      } catch (const model::model_error& e) {
        answer["renders"].push_back({{"error", e.what()}});
      }
    }
    for (const auto& p : request.value("parses", json::array())) {
      const auto parsed = model::parse_completion(format, p.at("text").get<std::string>(), tools,
                                                  p.value("offered", std::vector<std::string>{}),
                                                  p.value("call_id_prefix", "c"));
      json calls = json::array();
      for (const auto& c : parsed.tool_calls)
        calls.push_back({{"call_id", c.call_id}, {"tool", c.tool}, {"arguments_json", c.arguments_json},
                         {"parse_error", c.parse_error}});
      answer["parses"].push_back({{"content", parsed.content}, {"stopped", parsed.stopped}, {"tool_calls", calls}});
    }
    std::cout << answer.dump() << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "chat_probe: " << e.what() << "\n";
    return 1;
  }
}
