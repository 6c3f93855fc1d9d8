// A Hugging Face `tokenizer.json` of a byte-level BPE tokenizer (Qwen2, Qwen2.5, Qwen3, Llama 3,
// GPT-2), encoding and decoding as the `tokenizers` library (0.23) does: the same ids for the same
// text, the same text for the same ids.
//
//   auto tok = model::tokenizer::load(dir / "tokenizer.json");
//   std::vector<int64_t> ids = tok.encode(prompt);           // post-processor's BOS etc. added
//   std::string text = tok.decode(ids, /*skip_special_tokens=*/true);
//
// The pipeline is HF's: added tokens are cut out of the raw text first (those with
// normalized=false), each remaining piece is normalized and searched for the normalized added
// tokens, the rest is pre-tokenized, each pre-token is merged by BPE, and the post-processor
// adds its special tokens when add_special_tokens is set (HF's default, as here).
//
// Supported components (anything else throws model_error naming it and the file):
//   normalizer      null, NFC, Sequence of these
//   pre_tokenizer   null, Split{Regex|String, behavior Isolated, invert false},
//                   ByteLevel{add_prefix_space, use_regex (the GPT-2 pattern)}, Sequence of these
//   model           BPE: vocab, merges ("a b" strings or ["a","b"] pairs), ignore_merges,
//                   unk_token/fuse_unk; dropout null or 0, byte_fallback false, no
//                   continuing_subword_prefix / end_of_word_suffix
//   added_tokens    special or not, normalized or not, lstrip, rstrip, single_word
//   decoder         null (tokens joined by spaces, as HF), ByteLevel, Sequence of ByteLevel
//   post_processor  null, ByteLevel, TemplateProcessing (its `single` template), Sequence of these
//   truncation, padding: null only
//
// Patterns are PCRE2 (JIT). PCRE2 10.42 knows Unicode 14 and HF's Oniguruma Unicode 16, so the
// classes \p{..} of general categories, \s (Unicode White_Space, as Oniguruma's) and \d, and their
// negations outside brackets, are rewritten to explicit ranges: utf8proc's tables (Unicode 15.0)
// with the letters and numbers of Unicode 15.1 and 16.0 added (so \p{L} and \p{N}, what the
// Qwen2, Llama 3 and GPT-2 patterns use, follow Unicode 16; the other categories Unicode 15.0).
// \S, \D, \P{..} inside brackets and \w keep PCRE2's own meaning. NFC is utf8proc's (Unicode
// 15.0), newer than the tables of HF's NFC: text with compositions that Unicode added after
// version 9 (rare scripts; HF leaves U+11935 U+11930 alone, utf8proc composes them) can normalize
// differently.
//
// Input text that is not valid UTF-8 (HF cannot receive such text) is first repaired as Rust's
// String::from_utf8_lossy does: each maximal invalid subsequence becomes U+FFFD. Decoding
// replaces invalid byte sequences the same way, as HF does. Ids that name no token are skipped
// by decode, as HF skips them.
//
// Thread-safe: encode, decode and the lookups may be called from any number of threads at once.
// Copies share one immutable state and one cache of pre-token -> ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/model/model_config.hpp"

namespace cuda_agent::model {

// One entry of tokenizer.json's added_tokens, with the id the tokenizer gives it (HF's: the
// model vocabulary's id of that content, else the next id after the model's vocabulary).
struct added_token {
  int64_t id = -1;
  std::string content;
  bool special = false;
  bool normalized = true;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

class tokenizer {
 public:
  // Reads `path` (a tokenizer.json). Throws model_error naming the file on a missing or truncated
  // file, malformed JSON, or an unsupported component.
  static tokenizer load(const std::filesystem::path& path);
  // `source` names the JSON's origin in error messages.
  static tokenizer from_json(const nlohmann::json& json, const std::string& source);

  // Ids of `text`; add_special_tokens applies the post-processor (Llama 3's <|begin_of_text|>).
  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Text of `ids`; skip_special_tokens drops the added tokens marked special.
  // (No default: HF's Python decode skips them by default, transformers' does not.)
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const;
  std::string decode(const int64_t* ids, std::size_t count, bool skip_special_tokens) const;

  // The pre-tokens of `text` as HF's normalizer and then pre_tokenizer make them (added tokens
  // are not cut out first): what BPE merges. For tests and debugging.
  std::vector<std::string> pre_tokens(std::string_view text) const;

  // Added tokens first, then the model's vocabulary (HF's order).
  std::optional<int64_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int64_t id) const;
  // HF's get_vocab_size(with_added_tokens=true): model tokens plus added tokens not among them.
  int64_t vocab_size() const;
  // The added tokens, ordered by id.
  const std::vector<added_token>& added_tokens() const;
  bool is_special(int64_t id) const;
  // The id of an added token marked special with this content, if there is one.
  std::optional<int64_t> special_token_id(std::string_view content) const;

  struct state;

 private:
  explicit tokenizer(std::shared_ptr<const state> state);
  std::shared_ptr<const state> state_;
};

}  // namespace cuda_agent::model
