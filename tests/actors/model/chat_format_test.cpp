// The chat format's parsing of completions, its round trip through rendering, where renders stay
// prefixes of each other, detection and refusals. Rendering itself is compared with transformers
// and the real templates in test_chat_format.py.
#include "actors/model/chat_format.hpp"

#include <fstream>

#include <gtest/gtest.h>

namespace cuda_agent::model {
namespace {

const chat_tools& tools() {
  static const chat_tools loaded = chat_tools::load(std::filesystem::path(CUDA_AGENT_SOURCE_DIR) / "skills/tools");
  return loaded;
}

const std::vector<std::string> no_list;  // every tool offered

parsed_completion parse(const std::string& family, const std::string& text,
                        const std::vector<std::string>& offered = no_list) {
  return parse_completion(chat_format::named(family), text, tools(), offered, "ep1-t3");
}

// The text of message `index` that the model generated, from the spans.
std::string generated_text(const chat_render& r, int32_t index) {
  std::string out;
  for (const auto& s : r.spans)
    if (s.generated && s.message == index) out += r.text.substr(s.begin, s.end - s.begin);
  return out;
}

chat_message msg(std::string role, std::string content, std::vector<tool_call> calls = {}) {
  chat_message m;
  m.role = std::move(role);
  m.content = std::move(content);
  m.tool_calls = std::move(calls);
  return m;
}

tool_call call(std::string id, std::string tool, std::string arguments) {
  return tool_call{std::move(id), std::move(tool), std::move(arguments), ""};
}

TEST(ChatTools, LoadsTheNineToolsInFileKeyOrder) {
  const auto& t = tools();
  EXPECT_EQ(t.names, (std::vector<std::string>{"Bash", "BashOutput", "Edit", "Glob", "Grep", "KillBash",
                                               "MultiEdit", "Read", "Write"}));
  ASSERT_NE(t.find("Edit"), nullptr);
  EXPECT_EQ(t.find("Edit")->begin().key(), "name");  // as written, not sorted
  EXPECT_EQ(t.find("Nope"), nullptr);
}

TEST(PythonJson, WritesWhatJsonDumpsWrites) {
  // Expected texts are Python 3.11's json.dumps(..., ensure_ascii=False) of the same values.
  EXPECT_EQ(python_json(nlohmann::ordered_json::parse(R"({"b": 1, "a": [true, null, "x"], "c": {}})")),
            R"({"b": 1, "a": [true, null, "x"], "c": {}})");
  EXPECT_EQ(python_json(nlohmann::ordered_json::parse("[1.0, 1e16, 1e15, 0.0001, 1e-05, 1.5e-07, -0.0, 2.5]")),
            "[1.0, 1e+16, 1000000000000000.0, 0.0001, 1e-05, 1.5e-07, -0.0, 2.5]");
  EXPECT_EQ(python_json(nlohmann::ordered_json("q\"b\\n\n\t\x01\x7f é")), "\"q\\\"b\\\\n\\n\\t\\u0001\x7f é\"");
  EXPECT_EQ(python_json(nlohmann::ordered_json::parse(R"({"a": [1, {"b": []}]})"), 4),
            "{\n    \"a\": [\n        1,\n        {\n            \"b\": []\n        }\n    ]\n}");
}

TEST(ChatFormat, NamesAndStops) {
  EXPECT_EQ(chat_format::named("qwen2.5").family, chat_family::qwen2);
  EXPECT_EQ(chat_format::named("qwen3").name(), "qwen3");
  EXPECT_EQ(chat_format::named("llama3.1").date_string, "26 Jul 2024");
  EXPECT_EQ(chat_format::named("llama3").stop_strings().front(), "<|eot_id|>");
  EXPECT_EQ(chat_format::named("qwen2").stop_strings().front(), "<|im_end|>");
  try {
    chat_format::named("mistral");
    FAIL() << "no error";
  } catch (const model_error& e) {
    EXPECT_NE(std::string(e.what()).find("qwen2"), std::string::npos) << e.what();
  }
}

class ChatFormatDetect : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("chat_format_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  std::filesystem::path dir_;
};

TEST_F(ChatFormatDetect, FromModelTypeWithoutATemplate) {
  write("config.json", R"({"model_type": "qwen3"})");
  EXPECT_EQ(chat_format::detect(dir_).family, chat_family::qwen3);
  write("config.json", R"({"model_type": "llama"})");
  EXPECT_EQ(chat_format::detect(dir_).family, chat_family::llama3);
}

TEST_F(ChatFormatDetect, UnknownIsAnErrorWithTheFix) {
  write("config.json", R"({"model_type": "gpt2"})");
  try {
    chat_format::detect(dir_);
    FAIL() << "no error";
  } catch (const model_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("gpt2"), std::string::npos) << what;
    EXPECT_NE(what.find("qwen2, qwen3 or llama3"), std::string::npos) << what;
  }
  // A template of another family wins over model_type, and is refused.
  write("tokenizer_config.json", R"({"chat_template": "{{ messages[0].content }}"})");
  write("config.json", R"({"model_type": "qwen2"})");
  EXPECT_THROW(chat_format::detect(dir_), model_error);
  std::filesystem::remove_all(dir_ / "config.json");
  std::filesystem::remove_all(dir_ / "tokenizer_config.json");
  EXPECT_THROW(chat_format::detect(dir_), model_error);
}

// --- Parsing: Qwen ---------------------------------------------------------------------------

TEST(ParseQwen, ContentOnlyAndTheStopString) {
  auto p = parse("qwen2", "Just an answer.<|im_end|>\nignored<tool_call>");
  EXPECT_EQ(p.content, "Just an answer.");
  EXPECT_TRUE(p.stopped);
  EXPECT_TRUE(p.tool_calls.empty());
  p = parse("qwen2", "cut at max_tokens");
  EXPECT_FALSE(p.stopped);
  EXPECT_EQ(p.content, "cut at max_tokens");
}

TEST(ParseQwen, SeveralCallsInOneTurnWithIds) {
  const auto p = parse("qwen3",
                       "Let me look.\n<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls\"}}\n"
                       "</tool_call>\n<tool_call>\n{\"name\": \"Read\", \"arguments\": {\"file_path\": \"a \\\"b\\\"\", "
                       "\"offset\": 2}}\n</tool_call><|im_end|>");
  EXPECT_EQ(p.content, "Let me look.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].call_id, "ep1-t3-0");
  EXPECT_EQ(p.tool_calls[0].tool, "Bash");
  EXPECT_EQ(p.tool_calls[0].arguments_json, R"({"command": "ls"})");
  EXPECT_EQ(p.tool_calls[0].parse_error, "");
  EXPECT_EQ(p.tool_calls[1].call_id, "ep1-t3-1");
  EXPECT_EQ(p.tool_calls[1].arguments_json, R"({"file_path": "a \"b\"", "offset": 2})");
  EXPECT_EQ(p.tool_calls[1].parse_error, "");
}

TEST(ParseQwen, MalformedCallsAreKeptWithTheirError) {
  const auto p = parse("qwen2",
                       "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": }\n</tool_call>\n"  // bad JSON
                       "<tool_call>\n{\"arguments\": {\"command\": \"ls\"}}\n</tool_call>\n"            // no name
                       "<tool_call>\n{\"name\": \"Rm\", \"arguments\": {}}\n</tool_call>\n"              // unknown
                       "<tool_call>\n{\"name\": \"Bash\", \"arguments\": \"ls\"}\n</tool_call>\n"        // not an object
                       "<tool_call>\n{\"name\": \"Edit\", \"arguments\": {\"file_path\": \"a\"}}\n</tool_call>\n"
                       "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": 5}}\n</tool_call>\n"
                       "<tool_call>\n[1, 2]\n</tool_call>",
                       {"Bash", "Edit"});
  ASSERT_EQ(p.tool_calls.size(), 7u);
  EXPECT_NE(p.tool_calls[0].parse_error.find("not valid JSON"), std::string::npos) << p.tool_calls[0].parse_error;
  EXPECT_EQ(p.tool_calls[0].tool, "Bash");
  EXPECT_NE(p.tool_calls[1].parse_error.find("names no tool"), std::string::npos) << p.tool_calls[1].parse_error;
  EXPECT_NE(p.tool_calls[2].parse_error.find("unknown tool 'Rm'"), std::string::npos) << p.tool_calls[2].parse_error;
  EXPECT_NE(p.tool_calls[3].parse_error.find("must be a JSON object"), std::string::npos) << p.tool_calls[3].parse_error;
  EXPECT_NE(p.tool_calls[4].parse_error.find("needs the argument 'old_string'"), std::string::npos)
      << p.tool_calls[4].parse_error;
  EXPECT_NE(p.tool_calls[5].parse_error.find("must be string"), std::string::npos) << p.tool_calls[5].parse_error;
  EXPECT_NE(p.tool_calls[6].parse_error.find("JSON object"), std::string::npos) << p.tool_calls[6].parse_error;
  // Offered is what counts: Read exists but is not offered here.
  const auto q = parse("qwen2", "<tool_call>{\"name\": \"Read\", \"arguments\": {\"file_path\": \"x\"}}</tool_call>",
                       {"Bash"});
  ASSERT_EQ(q.tool_calls.size(), 1u);
  EXPECT_NE(q.tool_calls[0].parse_error.find("unknown tool 'Read'"), std::string::npos);
}

TEST(ParseQwen, AnUnterminatedCallAtMaxTokens) {
  const auto p = parse("qwen2", "Writing it.\n<tool_call>\n{\"name\": \"Write\", \"arguments\": {\"file_path\": \"k.cu\", "
                                "\"content\": \"__global__ void");
  EXPECT_FALSE(p.stopped);
  EXPECT_EQ(p.content, "Writing it.");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].tool, "Write");
  EXPECT_NE(p.tool_calls[0].parse_error.find("not closed"), std::string::npos) << p.tool_calls[0].parse_error;
  EXPECT_EQ(p.tool_calls[0].call_id, "ep1-t3-0");
}

TEST(ParseQwen, TextBetweenAndAfterCallsJoinsTheContent) {
  const auto p = parse("qwen2", "A\n<tool_call>{\"name\": \"Glob\", \"arguments\": {\"pattern\": \"*\"}}</tool_call>\n"
                                "then B\n<tool_call>{\"name\": \"Glob\", \"arguments\": {\"pattern\": \"x\"}}</tool_call> C ");
  EXPECT_EQ(p.content, "A\nthen B\nC");
  EXPECT_EQ(p.tool_calls.size(), 2u);
}

TEST(ParseQwen, Qwen3ThinkingStaysInTheContent) {
  const auto p = parse("qwen3", "<think>\nplan\n</think>\n\nok\n<tool_call>\n{\"name\": \"Glob\", \"arguments\": "
                                "{\"pattern\": \"*\"}}\n</tool_call><|im_end|>");
  EXPECT_EQ(p.content, "<think>\nplan\n</think>\n\nok");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  const auto q = parse("qwen3", "<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"Glob\", \"arguments\": "
                                "{\"pattern\": \"*\"}}\n</tool_call>");
  EXPECT_EQ(q.content, "<think>\n\n</think>\n\n");  // no content after the think block: no separator
}

// --- Parsing: Llama 3 ------------------------------------------------------------------------

TEST(ParseLlama3, OneCallWithParameters) {
  const auto p = parse("llama3", "{\"name\": \"Bash\", \"parameters\": {\"command\": \"nvcc --version\"}}<|eot_id|>");
  EXPECT_TRUE(p.stopped);
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].tool, "Bash");
  EXPECT_EQ(p.tool_calls[0].arguments_json, R"({"command": "nvcc --version"})");
  EXPECT_EQ(p.tool_calls[0].parse_error, "");
  EXPECT_EQ(p.tool_calls[0].call_id, "ep1-t3-0");
}

TEST(ParseLlama3, PythonTagArgumentsKeyAndSeveralCalls) {
  const auto p = parse("llama3", "<|python_tag|>{\"name\": \"Glob\", \"arguments\": {\"pattern\": \"*.cu\"}}; "
                                 "{\"name\": \"Read\", \"parameters\": {\"file_path\": \"{a}\"}}<|eom_id|>");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].tool, "Glob");
  EXPECT_EQ(p.tool_calls[1].arguments_json, R"({"file_path": "{a}"})");
  EXPECT_EQ(p.tool_calls[1].call_id, "ep1-t3-1");
  EXPECT_EQ(p.tool_calls[1].parse_error, "");
}

TEST(ParseLlama3, TextAndOtherJsonAreContent) {
  auto p = parse("llama3", "The kernel is done.<|eot_id|>");
  EXPECT_EQ(p.content, "The kernel is done.");
  EXPECT_TRUE(p.tool_calls.empty());
  p = parse("llama3", "{\"speedup\": 1.5}");
  EXPECT_EQ(p.content, "{\"speedup\": 1.5}");
  EXPECT_TRUE(p.tool_calls.empty());
}

TEST(ParseLlama3, MalformedAndUnterminated) {
  auto p = parse("llama3", "{\"name\": \"Bash\", \"parameters\": {\"command\": \"ls\"");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].tool, "Bash");
  EXPECT_NE(p.tool_calls[0].parse_error.find("not closed"), std::string::npos);
  p = parse("llama3", "{\"name\": \"Bash\", \"parameters\": {\"timeout\": 5}}");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_NE(p.tool_calls[0].parse_error.find("needs the argument 'command'"), std::string::npos);
  p = parse("llama3", "{\"name\": \"Bash\", \"parameters\": {\"command\": ls}}");
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_NE(p.tool_calls[0].parse_error.find("not valid JSON"), std::string::npos);
}

// --- Round trip and prefixes ----------------------------------------------------------------

const std::vector<chat_message>& episode() {
  static const std::vector<chat_message> messages = [] {
    std::vector<chat_message> m;
    m.push_back(msg("system", "You write CUDA kernels."));
    m.push_back(msg("user", "Make model.py faster."));
    m.push_back(msg("assistant", "First a look.",
                    {call("ep1-t0-0", "Bash", R"({"command": "ls -la", "description": "list \"all\" — é"})")}));
    chat_message result = msg("tool", "model.py\n");
    result.tool_call_id = "ep1-t0-0";
    m.push_back(result);
    m.push_back(msg("assistant", "",
                    {call("ep1-t1-0", "MultiEdit",
                          R"({"file_path": "k.cu", "edits": [{"old_string": "a", "new_string": "b\n{c}"}]})")}));
    result.content = "applied 1 edit";
    result.tool_call_id = "ep1-t1-0";
    m.push_back(result);
    m.push_back(msg("assistant", "Done: 2.1x faster."));
    return m;
  }();
  return messages;
}

class EachFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(EachFamily, ParseGivesBackTheRenderedCalls) {
  const auto format = chat_format::named(GetParam());
  const auto& messages = episode();
  for (size_t k = 0; k < messages.size(); ++k) {
    if (messages[k].role != "assistant") continue;
    const std::vector<chat_message> upto(messages.begin(), messages.begin() + static_cast<long>(k) + 1);
    const auto rendered = render(format, upto, tools(), no_list, false);
    const auto p = parse_completion(format, generated_text(rendered, static_cast<int32_t>(k)), tools(), no_list,
                                    "ep1-t" + std::to_string(k / 2 - 1));
    EXPECT_TRUE(p.stopped) << k;
    ASSERT_EQ(p.tool_calls.size(), messages[k].tool_calls.size()) << k;
    for (size_t i = 0; i < p.tool_calls.size(); ++i) {
      EXPECT_EQ(p.tool_calls[i].tool, messages[k].tool_calls[i].tool);
      EXPECT_EQ(p.tool_calls[i].arguments_json, messages[k].tool_calls[i].arguments_json);
      EXPECT_EQ(p.tool_calls[i].call_id, messages[k].tool_calls[i].call_id);
      EXPECT_EQ(p.tool_calls[i].parse_error, "");
    }
    std::string content = messages[k].content;
    if (format.family == chat_family::llama3 && !messages[k].tool_calls.empty()) content.clear();
    if (format.family == chat_family::qwen3) content = "<think>\n\n</think>\n\n" + content;  // the last turn's
    EXPECT_EQ(p.content, content) << k;
  }
}

TEST_P(EachFamily, AnEpisodeRendersAppendOnly) {
  // system, user, then (assistant, tool results) turns: each prompt is a prefix of the render
  // with the model's turn appended, and that of the next prompt. Qwen3 breaks it only for a
  // turn without reasoning rendered last (see the header), which the episode's prompts never do.
  const auto format = chat_format::named(GetParam());
  const auto& messages = episode();
  for (size_t k = 2; k < messages.size(); ++k) {
    if (messages[k].role != "assistant") continue;
    const std::vector<chat_message> before(messages.begin(), messages.begin() + static_cast<long>(k));
    std::vector<chat_message> after(messages.begin(), messages.begin() + static_cast<long>(k) + 1);
    const auto prompt = render(format, before, tools(), no_list, true).text;
    const auto turn = render(format, after, tools(), no_list, false).text;
    EXPECT_EQ(turn.compare(0, prompt.size(), prompt), 0) << GetParam() << " turn " << k;
    if (k + 1 < messages.size()) {
      after.push_back(messages[k + 1]);
      const auto next = render(format, after, tools(), no_list, true).text;
      const bool breaks = format.family == chat_family::qwen3;  // turn k was last: empty think block
      EXPECT_EQ(next.compare(0, turn.size(), turn) == 0, !breaks) << GetParam() << " turn " << k;
    }
  }
}

TEST_P(EachFamily, SpansCoverTheTextAndMarkOnlyAssistantTurns) {
  const auto format = chat_format::named(GetParam());
  const auto rendered = render(format, episode(), tools(), no_list, true);
  size_t at = 0;
  for (const auto& s : rendered.spans) {
    EXPECT_EQ(s.begin, at);
    EXPECT_LT(s.begin, s.end);
    at = s.end;
    if (s.generated) {
      EXPECT_EQ(episode()[static_cast<size_t>(s.message)].role, "assistant");
    }
  }
  EXPECT_EQ(at, rendered.text.size());
  const std::string end_of_turn = format.family == chat_family::llama3 ? "<|eot_id|>" : "<|im_end|>";
  // The last message: Qwen3 gives it an empty think block.
  const std::string think = format.family == chat_family::qwen3 ? "<think>\n\n</think>\n\n" : "";
  EXPECT_EQ(generated_text(rendered, 6), think + "Done: 2.1x faster." + end_of_turn);
}

INSTANTIATE_TEST_SUITE_P(Families, EachFamily, ::testing::Values("qwen2", "qwen3", "llama3"));

TEST(Prefixes, WhereTheTemplatesBreakThem) {
  // Tool results: one that is followed by another does not close its user turn.
  std::vector<chat_message> m = {msg("user", "go"),
                                 msg("assistant", "", {call("a", "Glob", R"({"pattern": "*"})"),
                                                       call("b", "Glob", R"({"pattern": "x"})")}),
                                 msg("tool", "one")};
  const auto one = render(chat_format::named("qwen2"), m, tools(), no_list, false).text;
  m.push_back(msg("tool", "two"));
  const auto two = render(chat_format::named("qwen2"), m, tools(), no_list, false).text;
  EXPECT_NE(two.compare(0, one.size(), one), 0);
  EXPECT_NE(two.find("one\n</tool_response>\n<tool_response>\ntwo"), std::string::npos);

  // Qwen3: a new query strips the reasoning of the turns before it.
  std::vector<chat_message> q = {msg("user", "first"), msg("assistant", "<think>\nwhy\n</think>\n\nanswer"),
                                 msg("tool", "r")};
  const auto before = render(chat_format::named("qwen3"), q, tools(), no_list, true).text;
  EXPECT_NE(before.find("<think>\nwhy\n</think>\n\nanswer"), std::string::npos);
  q.push_back(msg("user", "second"));
  const auto after = render(chat_format::named("qwen3"), q, tools(), no_list, true).text;
  EXPECT_EQ(after.find("why"), std::string::npos);
  EXPECT_NE(after.compare(0, before.size(), before), 0);
}

TEST(Render, RefusesWhatNoTemplateRenders) {
  EXPECT_THROW(render(chat_format::named("qwen2"), {msg("developer", "x")}, tools(), no_list), model_error);
  EXPECT_THROW(render(chat_format::named("qwen2"), {msg("user", "x")}, tools(), {"Nope"}), model_error);
  EXPECT_THROW(render(chat_format::named("llama3"), {msg("system", "x")}, tools(), {"Bash"}), model_error);
  EXPECT_NO_THROW(render(chat_format::named("llama3"), {msg("system", "x")}, chat_tools{}, no_list));
}

TEST(Render, Llama3SplitsATurnOfSeveralCalls) {
  const auto r = render(chat_format::named("llama3"),
                        {msg("user", "go"), msg("assistant", "ignored", {call("a", "Glob", R"({"pattern": "*"})"),
                                                                         call("b", "Glob", R"({"pattern": "x"})")})},
                        tools(), {"Glob"}, false);
  EXPECT_NE(r.text.find("<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"Glob\", \"parameters\": "
                        "{\"pattern\": \"*\"}}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": "
                        "\"Glob\", \"parameters\": {\"pattern\": \"x\"}}<|eot_id|>"),
            std::string::npos)
      << r.text;
  EXPECT_EQ(generated_text(r, 1), "{\"name\": \"Glob\", \"parameters\": {\"pattern\": \"*\"}}<|eot_id|>{\"name\": "
                                  "\"Glob\", \"parameters\": {\"pattern\": \"x\"}}<|eot_id|>");
}

TEST(CallIds, FromEpisodeTurnAndIndex) { EXPECT_EQ(call_id_prefix("run7-ep12", 4), "run7-ep12-t4"); }

}  // namespace
}  // namespace cuda_agent::model
