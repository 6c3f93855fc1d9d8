// episode_token_ledger: an episode's sequence is continued turn by turn (the known tokens, then
// the rendered text after the answered turn encoded on its own), re-encoded in full when the
// conversation is not a continuation, closed when a turn was cut, and bounded in episodes.
// The tokenizer is byte-level BPE without merges, so each byte of ordinary text is one token and
// each added token one id: what a sequence holds can be said exactly.
#include "actors/policy/episode_token_ledger.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/actors/policy/test_support.hpp"

namespace cuda_agent::policy {
namespace {

using testing::first_turn;

// GPT-2's byte-to-character table: printable bytes stand for themselves, the rest for 256 + n.
std::string byte_char(int byte) {
  int code = byte;
  if (!((byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || (byte >= 174 && byte <= 255))) {
    int n = 0;
    for (int b = 0; b < byte; ++b)
      if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255))) ++n;
    code = 256 + n;
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

model::tokenizer byte_tokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  nlohmann::json added = nlohmann::json::array();
  int64_t id = 256;
  for (const char* t : {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>",
                        "</tool_call>", "<tool_response>", "</tool_response>"})
    added.push_back({{"id", id++}, {"content", t}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  const nlohmann::json doc = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
        {"byte_fallback", false}, {"ignore_merges", false}, {"vocab", vocab},
        {"merges", nlohmann::json::array()}}}};
  return model::tokenizer::from_json(doc, "byte tokenizer");
}

class ledger_test : public ::testing::Test {
 protected:
  episode_token_ledger ledger{byte_tokenizer(), model::chat_format::named("qwen2"),
                              model::chat_tools::load(CUDA_AGENT_SOURCE_DIR "/skills/tools"),
                              /*capacity=*/2};

  std::vector<int64_t> encode(const std::string& text) const {
    return ledger.tokenizer().encode(text, /*add_special_tokens=*/false);
  }
  std::string render(const std::vector<chat_message>& messages, const policy_request& r,
                     bool add_generation_prompt = true) const {
    return model::render(ledger.format(), messages, ledger.tools(), r.tools, add_generation_prompt)
        .text;
  }
};

// The answer "ok<|im_end|>" written after `prompt`, remembered.
std::vector<int64_t> answer(episode_token_ledger& ledger, const policy_request& request,
                            std::vector<int64_t> prompt, bool stopped = true) {
  auto completion = ledger.tokenizer().encode(stopped ? "ok<|im_end|>" : "ok", false);
  EXPECT_FALSE(ledger.remember(request, prompt, completion).has_value());
  prompt.insert(prompt.end(), completion.begin(), completion.end());
  return prompt;
}

policy_request next_turn(policy_request request) {
  request.turn += 1;
  request.messages.push_back({"assistant", "ok", "", {}});
  request.messages.push_back({"user", "Go on.", "", {}});
  return request;
}

TEST_F(ledger_test, the_first_turn_is_the_rendered_prompt_in_full) {
  const auto request = first_turn();
  const auto prompt = ledger.prompt_for(request);
  EXPECT_EQ(prompt.tokens, encode(render(request.messages, request)));
  EXPECT_EQ(prompt.new_from, 0u);
  EXPECT_FALSE(prompt.rerendered);
}

TEST_F(ledger_test, a_later_turn_continues_the_known_tokens) {
  const auto first = first_turn();
  const auto known = answer(ledger, first, ledger.prompt_for(first).tokens);
  const auto second = next_turn(first);
  const auto prompt = ledger.prompt_for(second);
  EXPECT_FALSE(prompt.rerendered);
  ASSERT_EQ(prompt.new_from, known.size());
  EXPECT_EQ(std::vector<int64_t>(prompt.tokens.begin(), prompt.tokens.begin() + known.size()), known);
  // What follows the answered turn's end-of-turn token (from the newline after it), encoded on
  // its own.
  auto with_answer = first.messages;
  with_answer.push_back(second.messages[first.messages.size()]);
  const std::string end_of_turn = "<|im_end|>";
  const auto answered = render(with_answer, first, false);
  const auto turn_end = answered.rfind(end_of_turn) + end_of_turn.size();
  const auto full = render(second.messages, second);
  ASSERT_EQ(full.compare(0, turn_end, answered, 0, turn_end), 0);
  EXPECT_EQ(std::vector<int64_t>(prompt.tokens.begin() + known.size(), prompt.tokens.end()),
            encode(full.substr(turn_end)));
  // Here the pieces tokenize as the whole does.
  EXPECT_EQ(prompt.tokens, encode(full));
}

TEST_F(ledger_test, a_turn_cut_before_its_end_of_turn_token_is_closed) {
  const auto first = first_turn();
  const auto known = answer(ledger, first, ledger.prompt_for(first).tokens, /*stopped=*/false);
  const auto prompt = ledger.prompt_for(next_turn(first));
  ASSERT_GT(prompt.tokens.size(), known.size());
  EXPECT_EQ(prompt.tokens[known.size()], *ledger.tokenizer().token_to_id("<|im_end|>"));
}

TEST_F(ledger_test, a_conversation_that_does_not_continue_is_rerendered) {
  const auto first = first_turn();
  answer(ledger, first, ledger.prompt_for(first).tokens);
  auto changed = first;  // the answered turn is not where the ledger expects it
  changed.turn = 2;
  changed.messages.push_back({"user", "Something else.", "", {}});
  const auto prompt = ledger.prompt_for(changed);
  EXPECT_TRUE(prompt.rerendered);
  EXPECT_EQ(prompt.new_from, 0u);
  EXPECT_EQ(prompt.tokens, encode(render(changed.messages, changed)));
}

TEST_F(ledger_test, the_oldest_episode_is_forgotten_beyond_the_capacity) {
  for (const char* episode : {"a", "b"}) {
    const auto request = first_turn(episode);
    answer(ledger, request, ledger.prompt_for(request).tokens);
  }
  const auto c = first_turn("c");
  const auto forgotten = ledger.remember(c, ledger.prompt_for(c).tokens, encode("ok<|im_end|>"));
  EXPECT_EQ(forgotten, std::optional<std::string>{"a"});
  EXPECT_TRUE(ledger.prompt_for(next_turn(first_turn("b"))).new_from > 0);
  EXPECT_EQ(ledger.prompt_for(next_turn(first_turn("a"))).new_from, 0u);
}

}  // namespace
}  // namespace cuda_agent::policy
