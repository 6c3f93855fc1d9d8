#include "actors/model/tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include <pcre2.h>
#include <utf8proc.h>

namespace cuda_agent::model {

namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& problem) {
  throw model_error(source + ": " + problem);
}

// --- UTF-8 ----------------------------------------------------------------------------------------

// Length of the valid UTF-8 character at s[i], or 0 where the bytes there are not one. The
// checks are those of Rust's from_utf8 (no overlong forms, no surrogates, nothing above U+10FFFF).
std::size_t valid_char_length(std::string_view s, std::size_t i, std::size_t* consumed) {
  auto at = [&](std::size_t k) -> unsigned { return k < s.size() ? static_cast<unsigned char>(s[k]) : 0u; };
  const unsigned b = at(i);
  *consumed = 1;
  if (b < 0x80) return 1;
  auto cont = [](unsigned c) { return (c & 0xC0u) == 0x80u; };
  if (b >= 0xC2 && b <= 0xDF) {
    if (!cont(at(i + 1))) return 0;
    return 2;
  }
  if (b >= 0xE0 && b <= 0xEF) {
    const unsigned c1 = at(i + 1);
    const bool ok1 = (b == 0xE0) ? (c1 >= 0xA0 && c1 <= 0xBF)
                   : (b == 0xED) ? (c1 >= 0x80 && c1 <= 0x9F)
                                 : cont(c1);
    if (!ok1) return 0;
    *consumed = 2;
    if (!cont(at(i + 2))) return 0;
    return 3;
  }
  if (b >= 0xF0 && b <= 0xF4) {
    const unsigned c1 = at(i + 1);
    const bool ok1 = (b == 0xF0) ? (c1 >= 0x90 && c1 <= 0xBF)
                   : (b == 0xF4) ? (c1 >= 0x80 && c1 <= 0x8F)
                                 : cont(c1);
    if (!ok1) return 0;
    *consumed = 2;
    if (!cont(at(i + 2))) return 0;
    *consumed = 3;
    if (!cont(at(i + 3))) return 0;
    return 4;
  }
  return 0;
}

bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    std::size_t consumed;
    const std::size_t n = valid_char_length(s, i, &consumed);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

// Rust's String::from_utf8_lossy: each maximal prefix of a would-be character that cannot be
// completed becomes one U+FFFD.
std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t consumed;
    const std::size_t n = valid_char_length(s, i, &consumed);
    if (n > 0) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out.append("\xEF\xBF\xBD");
      i += consumed;
    }
  }
  return out;
}

// The code point at s[i] of valid UTF-8, and its length.
char32_t next_code_point(std::string_view s, std::size_t i, std::size_t* length) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) {
    *length = 1;
    return b;
  }
  const std::size_t n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
  char32_t cp = b & (n == 2 ? 0x1Fu : n == 3 ? 0x0Fu : 0x07u);
  for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
  *length = n;
  return cp;
}

// The last code point of valid UTF-8 `s` (not empty).
char32_t last_code_point(std::string_view s) {
  std::size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0u) == 0x80u) --i;
  std::size_t length;
  return next_code_point(s, i, &length);
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// --- Unicode classes --------------------------------------------------------------------------------

using range_list = std::vector<std::pair<char32_t, char32_t>>;

// Unicode's White_Space, which is what Oniguruma's \s and Rust regex's \s match.
const range_list& white_space() {
  static const range_list ranges = {{0x09, 0x0D}, {0x20, 0x20},     {0x85, 0x85},
                                    {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                    {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                    {0x3000, 0x3000}};
  return ranges;
}

bool in_ranges(const range_list& ranges, char32_t cp) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](char32_t c, const auto& r) { return c < r.first; });
  return it != ranges.begin() && cp <= std::prev(it)->second;
}

bool is_white_space(char32_t cp) { return in_ranges(white_space(), cp); }

// Code points of each general category (surrogates left out: a UTF-8 pattern cannot name them),
// from utf8proc's tables.
const std::array<range_list, 32>& category_ranges() {
  static const std::array<range_list, 32> table = [] {
    std::array<range_list, 32> t;
    for (char32_t cp = 0; cp <= 0x10FFFF; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      const int cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
      auto& r = t[static_cast<std::size_t>(cat) & 31u];
      if (!r.empty() && r.back().second + 1 == cp && !(cp == 0xE000 && r.back().second == 0xD7FF))
        r.back().second = cp;
      else
        r.emplace_back(cp, cp);
    }
    return t;
  }();
  return table;
}

range_list merge_ranges(range_list r) {
  std::sort(r.begin(), r.end());
  range_list out;
  for (const auto& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, x.second);
    else
      out.push_back(x);
  }
  return out;
}

// Letters and numbers of Unicode 15.1 and 16.0, which Oniguruma 6.9.10 (HF's regex engine)
// knows and utf8proc 2.8 (Unicode 15.0) does not: CJK Extension I, Garay, Gurung Khema, Kirat
// Rai, Ol Onal, Sunuwar, Todhri, Tulu-Tigalari, Egyptian hieroglyphs extension A and others.
// The code-point sweep in tests/actors/model/test_tokenizer.py fails where these lists and HF disagree.
const range_list& newer_letters() {
  static const range_list r = {
      {0x1C89, 0x1C8A}, {0xA7CB, 0xA7CD}, {0xA7DA, 0xA7DC}, {0x105C0, 0x105F3}, {0x10D4A, 0x10D65},
      {0x10D6F, 0x10D85}, {0x10EC2, 0x10EC4}, {0x11380, 0x11389}, {0x1138B, 0x1138B},
      {0x1138E, 0x1138E}, {0x11390, 0x113B5}, {0x113B7, 0x113B7}, {0x113D1, 0x113D1},
      {0x113D3, 0x113D3}, {0x11BC0, 0x11BE0}, {0x13460, 0x143FA}, {0x16100, 0x1611D},
      {0x16D40, 0x16D6C}, {0x18CFF, 0x18CFF}, {0x1E5D0, 0x1E5ED}, {0x1E5F0, 0x1E5F0},
      {0x2EBF0, 0x2EE5D}};
  return r;
}

const range_list& newer_numbers() {
  static const range_list r = {
      {0x10D40, 0x10D49}, {0x116D0, 0x116E3}, {0x11BF0, 0x11BF9}, {0x16130, 0x16139},
      {0x16D70, 0x16D79}, {0x1CCF0, 0x1CCF9}, {0x1E5F1, 0x1E5FA}};
  return r;
}

// The code points of general category `name` (L, Lu, N, Nd, P, Zs, ...), or nullopt for a name
// that is not one of these.
std::optional<range_list> category(std::string_view name) {
  static const std::unordered_map<std::string_view, std::vector<int>> names = {
      {"L", {UTF8PROC_CATEGORY_LU, UTF8PROC_CATEGORY_LL, UTF8PROC_CATEGORY_LT,
             UTF8PROC_CATEGORY_LM, UTF8PROC_CATEGORY_LO}},
      {"Lu", {UTF8PROC_CATEGORY_LU}}, {"Ll", {UTF8PROC_CATEGORY_LL}},
      {"Lt", {UTF8PROC_CATEGORY_LT}}, {"Lm", {UTF8PROC_CATEGORY_LM}},
      {"Lo", {UTF8PROC_CATEGORY_LO}},
      {"M", {UTF8PROC_CATEGORY_MN, UTF8PROC_CATEGORY_MC, UTF8PROC_CATEGORY_ME}},
      {"Mn", {UTF8PROC_CATEGORY_MN}}, {"Mc", {UTF8PROC_CATEGORY_MC}},
      {"Me", {UTF8PROC_CATEGORY_ME}},
      {"N", {UTF8PROC_CATEGORY_ND, UTF8PROC_CATEGORY_NL, UTF8PROC_CATEGORY_NO}},
      {"Nd", {UTF8PROC_CATEGORY_ND}}, {"Nl", {UTF8PROC_CATEGORY_NL}},
      {"No", {UTF8PROC_CATEGORY_NO}},
      {"P", {UTF8PROC_CATEGORY_PC, UTF8PROC_CATEGORY_PD, UTF8PROC_CATEGORY_PS,
             UTF8PROC_CATEGORY_PE, UTF8PROC_CATEGORY_PI, UTF8PROC_CATEGORY_PF,
             UTF8PROC_CATEGORY_PO}},
      {"Pc", {UTF8PROC_CATEGORY_PC}}, {"Pd", {UTF8PROC_CATEGORY_PD}},
      {"Ps", {UTF8PROC_CATEGORY_PS}}, {"Pe", {UTF8PROC_CATEGORY_PE}},
      {"Pi", {UTF8PROC_CATEGORY_PI}}, {"Pf", {UTF8PROC_CATEGORY_PF}},
      {"Po", {UTF8PROC_CATEGORY_PO}},
      {"S", {UTF8PROC_CATEGORY_SM, UTF8PROC_CATEGORY_SC, UTF8PROC_CATEGORY_SK,
             UTF8PROC_CATEGORY_SO}},
      {"Sm", {UTF8PROC_CATEGORY_SM}}, {"Sc", {UTF8PROC_CATEGORY_SC}},
      {"Sk", {UTF8PROC_CATEGORY_SK}}, {"So", {UTF8PROC_CATEGORY_SO}},
      {"Z", {UTF8PROC_CATEGORY_ZS, UTF8PROC_CATEGORY_ZL, UTF8PROC_CATEGORY_ZP}},
      {"Zs", {UTF8PROC_CATEGORY_ZS}}, {"Zl", {UTF8PROC_CATEGORY_ZL}},
      {"Zp", {UTF8PROC_CATEGORY_ZP}},
      {"Cc", {UTF8PROC_CATEGORY_CC}}, {"Cf", {UTF8PROC_CATEGORY_CF}},
  };
  auto it = names.find(name);
  if (it == names.end()) return std::nullopt;
  range_list r;
  for (int cat : it->second) {
    const auto& c = category_ranges()[static_cast<std::size_t>(cat)];
    r.insert(r.end(), c.begin(), c.end());
  }
  if (name == "L") r.insert(r.end(), newer_letters().begin(), newer_letters().end());
  if (name == "N") r.insert(r.end(), newer_numbers().begin(), newer_numbers().end());
  return merge_ranges(std::move(r));
}

// Rust regex's Unicode \w (Alphabetic, marks, decimal digits, connector punctuation, joiners),
// which HF's single_word test uses. Alphabetic is taken as letters, letter numbers and the
// Other_Alphabetic symbols (circled and squared letters).
bool is_word_char(char32_t cp) {
  if (cp == '_' || cp == 0x200C || cp == 0x200D) return true;
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
      (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189))
    return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

void append_ranges(std::string& out, const range_list& ranges) {
  char buf[40];
  for (const auto& [lo, hi] : ranges) {
    if (lo == hi)
      std::snprintf(buf, sizeof buf, "\\x{%X}", static_cast<unsigned>(lo));
    else
      std::snprintf(buf, sizeof buf, "\\x{%X}-\\x{%X}", static_cast<unsigned>(lo),
                    static_cast<unsigned>(hi));
    out += buf;
  }
}

// Rewrites an Oniguruma pattern (HF's regex engine) for PCRE2: the Unicode classes it would
// otherwise take from PCRE2's own, older tables become explicit ranges. Oniguruma's nested
// brackets and && intersections have no PCRE2 equivalent and are refused.
std::string translate_pattern(std::string_view p, const std::string& source) {
  std::string out;
  out.reserve(p.size() * 4);
  std::size_t i = 0;
  bool in_class = false;
  range_list class_ranges;  // the expanded items of the current bracket
  // \p{Name}, \pL, \p{^Name} after the backslash and the p at i; returns the name and whether
  // it is negated by ^, and moves i past it.
  auto property = [&](std::size_t& k, bool& caret) -> std::string {
    caret = false;
    if (k >= p.size()) fail(source, "pattern ends after \\p");
    if (p[k] != '{') return std::string(1, p[k++]);
    const std::size_t close = p.find('}', k);
    if (close == std::string_view::npos) fail(source, "pattern has an unclosed \\p{");
    std::string name(p.substr(k + 1, close - k - 1));
    k = close + 1;
    if (!name.empty() && name[0] == '^') {
      caret = true;
      name.erase(0, 1);
    }
    return name;
  };
  while (i < p.size()) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      const std::size_t escape_start = i;
      if (e == 's' || e == 'S' || e == 'd' || e == 'D') {
        const bool negated = (e == 'S' || e == 'D');
        const range_list& r = (e == 's' || e == 'S') ? white_space() : *category("Nd");
        i += 2;
        if (!in_class) {
          out += negated ? "[^" : "[";
          append_ranges(out, r);
          out += "]";
        } else if (!negated) {
          class_ranges.insert(class_ranges.end(), r.begin(), r.end());
        } else {
          out.append(p.substr(escape_start, 2));
        }
        continue;
      }
      if (e == 'p' || e == 'P') {
        std::size_t k = i + 2;
        bool caret;
        const std::string name = property(k, caret);
        const bool negated = (e == 'P') != caret;
        const auto r = category(name);
        if (r && !in_class) {
          out += negated ? "[^" : "[";
          append_ranges(out, *r);
          out += "]";
        } else if (r && !negated) {
          class_ranges.insert(class_ranges.end(), r->begin(), r->end());
        } else {
          out.append(p.substr(escape_start, k - escape_start));
        }
        i = k;
        continue;
      }
      out.append(p.substr(i, 2));
      i += 2;
      continue;
    }
    if (!in_class) {
      out.push_back(c);
      ++i;
      if (c == '[') {
        in_class = true;
        class_ranges.clear();
        if (i < p.size() && p[i] == '^') out.push_back(p[i++]);
        if (i < p.size() && p[i] == ']') out.push_back(p[i++]);
      }
      continue;
    }
    if (c == '[') {
      if (i + 1 < p.size() && p[i + 1] == ':') {
        const std::size_t close = p.find(":]", i + 2);
        if (close == std::string_view::npos) fail(source, "pattern has an unclosed [: class");
        out.append(p.substr(i, close + 2 - i));
        i = close + 2;
        continue;
      }
      fail(source, "pattern has a nested bracket class (Oniguruma syntax), which is not supported");
    }
    if (c == '&' && i + 1 < p.size() && p[i + 1] == '&')
      fail(source, "pattern has a && class intersection (Oniguruma syntax), which is not supported");
    if (c == ']') {
      append_ranges(out, merge_ranges(std::move(class_ranges)));
      class_ranges.clear();
      in_class = false;
    }
    out.push_back(c);
    ++i;
  }
  if (in_class) fail(source, "pattern has an unclosed [");
  return out;
}

// --- regex ---------------------------------------------------------------------------------------

// Per-thread PCRE2 scratch: match data for group 0 and a JIT stack that may grow to 8 MiB.
struct match_scratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  match_scratch() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~match_scratch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
  }
  match_scratch(const match_scratch&) = delete;
  match_scratch& operator=(const match_scratch&) = delete;
};

match_scratch& scratch() {
  thread_local match_scratch s;
  return s;
}

class regex {
 public:
  regex(const std::string& onig_pattern, bool literal, const std::string& source) {
    const std::string pattern = literal ? onig_pattern : translate_pattern(onig_pattern, source);
    int error = 0;
    PCRE2_SIZE offset = 0;
    const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                          &error, &offset, nullptr);
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      fail(source, "pattern " + json(onig_pattern).dump() + " does not compile: " +
                       reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // without JIT, pcre2_match interprets
  }
  ~regex() { pcre2_code_free(code_); }
  regex(const regex&) = delete;
  regex& operator=(const regex&) = delete;

  // Calls on_match(start, end) for each match in `subject`, as the onig crate's find_iter
  // (HF's) iterates: searches from the previous match's end; an empty match right at the
  // previous match's end is skipped by one character.
  template <class F>
  void find_iter(std::string_view subject, F&& on_match) const {
    match_scratch& s = scratch();
    const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
    std::size_t last_end = 0;
    bool have_last = false;
    std::size_t last_match_end = 0;
    while (last_end <= subject.size()) {
      const int rc = pcre2_match(code_, text, subject.size(), last_end, PCRE2_NO_UTF_CHECK,
                                 s.data, s.context);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof message);
        throw model_error(std::string("tokenizer: pre-tokenizer pattern failed on the input: ") +
                          reinterpret_cast<const char*>(message));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
      const std::size_t start = ov[0], end = ov[1];
      if (start == end && have_last && last_match_end == end) {
        std::size_t length = 1;
        if (last_end < subject.size()) next_code_point(subject, last_end, &length);
        last_end += length;
        continue;
      }
      last_end = end;
      have_last = true;
      last_match_end = end;
      on_match(start, end);
    }
  }

 private:
  pcre2_code* code_ = nullptr;
};

// The GPT-2 pattern that ByteLevel{use_regex: true} splits with.
constexpr const char* gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// --- byte-level alphabet -------------------------------------------------------------------------

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for 256 + n.
struct byte_alphabet {
  std::array<std::string, 256> encoded;  // byte -> UTF-8 of its character
  std::array<int16_t, 512> decoded;      // character -> byte, -1 where none
  byte_alphabet() {
    decoded.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      append_utf8(encoded[static_cast<std::size_t>(b)], cp);
      decoded[cp] = static_cast<int16_t>(b);
    }
  }
};

const byte_alphabet& alphabet() {
  static const byte_alphabet a;
  return a;
}

// --- added tokens --------------------------------------------------------------------------------

// A byte trie of added tokens' texts, searched leftmost-longest without overlaps (daachorse's
// MatchKind::LeftmostLongest, which HF uses).
class token_trie {
 public:
  void add(std::string_view text, int64_t value) {
    if (text.empty()) return;
    if (nodes_.empty()) nodes_.emplace_back();
    first_[static_cast<unsigned char>(text[0])] = true;
    std::size_t node = 0;
    for (char ch : text) {
      const auto byte = static_cast<unsigned char>(ch);
      auto& kids = nodes_[node].kids;
      auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& k) { return k.first == byte; });
      if (it != kids.end()) {
        node = it->second;
      } else {
        const std::size_t next = nodes_.size();
        nodes_[node].kids.emplace_back(byte, next);
        nodes_.emplace_back();
        node = next;
      }
    }
    nodes_[node].value = value;
  }
  bool empty() const { return nodes_.empty(); }

  // Calls on_match(start, end, value) for each match.
  template <class F>
  void find_iter(std::string_view s, F&& on_match) const {
    if (nodes_.empty()) return;
    std::size_t i = 0;
    while (i < s.size()) {
      if (!first_[static_cast<unsigned char>(s[i])]) {
        ++i;
        continue;
      }
      std::size_t node = 0, best_end = 0;
      int64_t best = -1;
      for (std::size_t k = i; k < s.size(); ++k) {
        const auto byte = static_cast<unsigned char>(s[k]);
        const auto& kids = nodes_[node].kids;
        auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& c) { return c.first == byte; });
        if (it == kids.end()) break;
        node = it->second;
        if (nodes_[node].value >= 0) {
          best = nodes_[node].value;
          best_end = k + 1;
        }
      }
      if (best >= 0) {
        on_match(i, best_end, best);
        i = best_end;
      } else {
        ++i;
      }
    }
  }

 private:
  struct node {
    std::vector<std::pair<unsigned char, std::size_t>> kids;
    int64_t value = -1;
  };
  std::vector<node> nodes_;
  std::array<bool, 256> first_{};
};

// --- the pipeline's parts ------------------------------------------------------------------------

struct pre_tokenizer_step {
  enum kind_t { split, byte_level } kind;
  std::shared_ptr<const regex> pattern;  // split; byte_level with use_regex
  bool add_prefix_space = false;
};

struct post_piece {
  bool sequence = false;        // the encoded text itself
  std::vector<int64_t> ids;     // else a special token's ids
};

// Pre-token -> ids, sharded so that concurrent encodes seldom wait for each other.
class bpe_cache {
 public:
  static constexpr std::size_t max_key_bytes = 256;
  bool get(const std::string& key, std::size_t hash, std::vector<int32_t>& out) const {
    shard& s = shards_[hash % shards];
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.map.find(key);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }
  void put(const std::string& key, std::size_t hash, const int32_t* ids, std::size_t n) const {
    if (key.size() >= max_key_bytes) return;
    shard& s = shards_[hash % shards];
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.map.size() >= per_shard) s.map.clear();  // a bounded cache that keeps adapting
    s.map.emplace(key, std::vector<int32_t>(ids, ids + n));
  }

 private:
  static constexpr std::size_t shards = 64;
  static constexpr std::size_t per_shard = 4096;
  struct shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> map;
  };
  mutable std::array<shard, shards> shards_;
};

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

bool flag(const json& j, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  return it->get<bool>();
}

}  // namespace

struct tokenizer::state {
  std::string source;

  // model (BPE)
  std::vector<std::string> vocab_tokens;                    // owns the keys of vocab
  std::unordered_map<std::string_view, int32_t> vocab;
  std::vector<int32_t> vocab_index_of_id;                   // id -> index in vocab_tokens
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (a, b) -> (rank, new)
  bool ignore_merges = false;
  int32_t unk_id = -1;
  bool fuse_unk = false;
  mutable bpe_cache cache;

  // added tokens
  std::vector<added_token> added;                           // by id
  std::unordered_map<int64_t, std::size_t> added_index_of_id;
  std::unordered_map<std::string, int64_t> added_ids;       // content -> id
  std::unordered_map<int64_t, std::string> added_decoded;   // id -> normalized content
  std::unordered_set<std::string> special_contents;
  token_trie raw_trie, normalized_trie;

  bool nfc = false;
  std::vector<pre_tokenizer_step> pre_tokenizer;
  int byte_level_decoders = 0;
  bool has_decoder = false;
  std::vector<std::vector<post_piece>> templates;           // applied in order

  int32_t model_id(std::string_view token) const {
    auto it = vocab.find(token);
    return it == vocab.end() ? -1 : it->second;
  }
  const std::string* model_token(int64_t id) const {
    if (id < 0 || id >= static_cast<int64_t>(vocab_index_of_id.size())) return nullptr;
    const int32_t k = vocab_index_of_id[static_cast<std::size_t>(id)];
    return k < 0 ? nullptr : &vocab_tokens[static_cast<std::size_t>(k)];
  }

  // NFC. Characters below U+0300 are left as they are by NFC and never combine with what
  // precedes them, so only the runs of characters from U+0300 up, each with the character before
  // it, go through utf8proc.
  std::string normalize(std::string_view s) const {
    if (!nfc) return std::string(s);
    std::string out;
    out.reserve(s.size());
    std::size_t copied = 0, i = 0;
    std::size_t previous_start = 0;  // where the character before i starts
    while (i < s.size()) {
      const auto b = static_cast<unsigned char>(s[i]);
      std::size_t length;
      if (b < 0xCC) {  // below U+0300
        length = b < 0x80 ? 1 : 2;
        previous_start = i;
        i += length;
        continue;
      }
      const std::size_t run_start = i > 0 ? previous_start : 0;
      while (i < s.size() && static_cast<unsigned char>(s[i]) >= 0xCC) {
        next_code_point(s, i, &length);
        i += length;
      }
      out.append(s.substr(copied, run_start - copied));
      nfc_into(s.substr(run_start, i - run_start), out);
      copied = i;
      previous_start = i;
    }
    out.append(s.substr(copied));
    return out;
  }

  void nfc_into(std::string_view s, std::string& out) const {
    utf8proc_uint8_t* result = nullptr;
    const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                static_cast<utf8proc_ssize_t>(s.size()), &result,
                                static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    if (n < 0) throw model_error(source + ": NFC failed: " + utf8proc_errmsg(n));
    out.append(reinterpret_cast<const char*>(result), static_cast<std::size_t>(n));
    std::free(result);
  }

  // HF's AddedVocabulary::find_matches: the added tokens of `trie` in `s`, with their
  // single_word, lstrip and rstrip rules; calls piece(text) for the text between them and
  // token(id) for each.
  template <class P, class T>
  void split_added(std::string_view s, const token_trie& trie, P&& piece, T&& token) const {
    if (s.empty()) return;
    if (trie.empty()) {
      piece(s);
      return;
    }
    std::size_t start_offset = 0;
    trie.find_iter(s, [&](std::size_t start, std::size_t stop, int64_t id) {
      const added_token& t = added[added_index_of_id.at(id)];
      if (t.single_word) {
        const bool start_space = start == 0 || !is_word_char(last_code_point(s.substr(0, start)));
        std::size_t length;
        const bool stop_space = stop == s.size() || !is_word_char(next_code_point(s, stop, &length));
        if (!start_space || !stop_space) return;
      }
      if (t.lstrip) {
        std::size_t new_start = start;
        while (new_start > 0) {
          std::size_t k = new_start - 1;
          while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0u) == 0x80u) --k;
          std::size_t length;
          if (!is_white_space(next_code_point(s, k, &length))) break;
          new_start = k;
        }
        start = std::max(new_start, start_offset);
      }
      if (t.rstrip) {
        std::size_t length;
        while (stop < s.size() && is_white_space(next_code_point(s, stop, &length))) stop += length;
      }
      if (start_offset < start) piece(s.substr(start_offset, start - start_offset));
      token(id);
      start_offset = stop;
    });
    if (start_offset < s.size()) piece(s.substr(start_offset));
  }

  void bpe(const std::string& word, std::vector<int64_t>& out) const;
  // Leaves the pre-tokens of `text` in the thread's `pieces`.
  std::vector<std::string>& pre_tokenize(std::string_view text) const;
  void pre_tokenize_and_merge(std::string_view text, std::vector<int64_t>& out) const {
    for (const std::string& piece : pre_tokenize(text)) bpe(piece, out);
  }
};

namespace {

struct symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t length;  // bytes; 0: merged into its left neighbour
};

struct merge_candidate {
  int32_t pos;
  int32_t rank;
  int32_t new_id;
};

// The queue's top is the lowest rank, then the left-most position (HF's Merge ordering).
struct later_merge {
  bool operator()(const merge_candidate& a, const merge_candidate& b) const {
    if (a.rank != b.rank) return a.rank > b.rank;
    return a.pos > b.pos;
  }
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

}  // namespace

// HF's BPE::merge_word and Word::merge_all, stale queue entries and all.
void tokenizer::state::bpe(const std::string& word, std::vector<int64_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    const int32_t id = model_id(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const std::size_t hash = std::hash<std::string>{}(word);
  thread_local std::vector<int32_t> ids;
  ids.clear();
  if (cache.get(word, hash, ids)) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  thread_local std::vector<symbol> symbols;
  symbols.clear();
  auto add = [&](int32_t id, std::size_t length) {
    const auto n = static_cast<int32_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, static_cast<int32_t>(length)});
  };
  int32_t pending_unk = -1;
  std::size_t pending_unk_length = 0;
  for (std::size_t i = 0; i < word.size();) {
    std::size_t length;
    next_code_point(word, i, &length);
    const int32_t id = model_id(std::string_view(word).substr(i, length));
    if (id >= 0) {
      if (pending_unk >= 0) {
        add(pending_unk, pending_unk_length);
        pending_unk = -1;
      }
      add(id, length);
    } else if (unk_id >= 0) {
      if (pending_unk >= 0 && fuse_unk) {
        pending_unk_length += length;
      } else {
        if (pending_unk >= 0) add(pending_unk, pending_unk_length);
        pending_unk = unk_id;
        pending_unk_length = length;
      }
    }  // else the character is dropped, as HF drops it
    i += length;
  }
  if (pending_unk >= 0) add(pending_unk, pending_unk_length);

  auto lookup = [&](int32_t a, int32_t b) -> const std::pair<int32_t, int32_t>* {
    auto it = merges.find(pair_key(a, b));
    return it == merges.end() ? nullptr : &it->second;
  };
  thread_local std::vector<merge_candidate> queue;
  queue.clear();
  const later_merge later;
  for (std::size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const auto* m = lookup(symbols[k].id, symbols[k + 1].id))
      queue.push_back({static_cast<int32_t>(k), m->first, m->second});
  }
  std::make_heap(queue.begin(), queue.end(), later);
  auto push = [&](merge_candidate c) {
    queue.push_back(c);
    std::push_heap(queue.begin(), queue.end(), later);
  };
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), later);
    const merge_candidate top = queue.back();
    queue.pop_back();
    symbol& left = symbols[static_cast<std::size_t>(top.pos)];
    if (left.length == 0 || left.next == -1) continue;
    const std::size_t next_pos = static_cast<std::size_t>(left.next);
    const symbol right = symbols[next_pos];
    const auto* current = lookup(left.id, right.id);
    if (!current || current->second != top.new_id) continue;  // an expired entry
    left.id = top.new_id;
    left.length += right.length;
    left.next = right.next;
    symbols[next_pos].length = 0;
    if (right.next > -1 && static_cast<std::size_t>(right.next) < symbols.size())
      symbols[static_cast<std::size_t>(right.next)].prev = top.pos;
    const symbol merged = symbols[static_cast<std::size_t>(top.pos)];
    if (merged.prev >= 0) {
      if (const auto* m = lookup(symbols[static_cast<std::size_t>(merged.prev)].id, merged.id))
        push({merged.prev, m->first, m->second});
    }
    if (merged.next >= 0 && static_cast<std::size_t>(merged.next) < symbols.size()) {
      if (const auto* m = lookup(merged.id, symbols[static_cast<std::size_t>(merged.next)].id))
        push({top.pos, m->first, m->second});
    }
  }
  for (const symbol& s : symbols)
    if (s.length != 0) ids.push_back(s.id);
  cache.put(word, hash, ids.data(), ids.size());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<std::string>& tokenizer::state::pre_tokenize(std::string_view text) const {
  thread_local std::vector<std::string> pieces, next;
  pieces.clear();
  pieces.emplace_back(text);
  for (const pre_tokenizer_step& step : pre_tokenizer) {
    next.clear();
    for (std::string& piece : pieces) {
      if (step.kind == pre_tokenizer_step::byte_level && step.add_prefix_space &&
          (piece.empty() || piece[0] != ' '))
        piece.insert(piece.begin(), ' ');
      if (step.pattern) {
        const std::string_view whole = piece;
        std::size_t previous = 0;
        step.pattern->find_iter(whole, [&](std::size_t start, std::size_t end) {
          if (previous != start) next.emplace_back(whole.substr(previous, start - previous));
          if (end != start) next.emplace_back(whole.substr(start, end - start));
          previous = end;
        });
        if (previous != whole.size()) next.emplace_back(whole.substr(previous));
      } else if (!piece.empty()) {
        next.push_back(std::move(piece));
      }
    }
    if (step.kind == pre_tokenizer_step::byte_level) {
      const byte_alphabet& a = alphabet();
      for (std::string& piece : next) {
        std::string mapped;
        mapped.reserve(piece.size() * 2);
        for (char ch : piece) mapped += a.encoded[static_cast<unsigned char>(ch)];
        piece = std::move(mapped);
      }
    }
    std::swap(pieces, next);
  }
  return pieces;
}

tokenizer::tokenizer(std::shared_ptr<const state> state) : state_(std::move(state)) {}

namespace {

void read_normalizer(const json& j, tokenizer::state& st) {
  if (j.is_null()) return;
  const std::string type = type_of(j);
  if (type == "NFC") {
    st.nfc = true;
  } else if (type == "Sequence") {
    for (const json& n : j.at("normalizers")) read_normalizer(n, st);
  } else {
    fail(st.source, "unsupported normalizer " + (type.empty() ? j.dump() : type) +
                        " (supported: NFC, Sequence of NFC, null)");
  }
}

void read_pre_tokenizer(const json& j, tokenizer::state& st) {
  if (j.is_null()) return;
  const std::string type = type_of(j);
  if (type == "Sequence") {
    for (const json& p : j.at("pretokenizers")) read_pre_tokenizer(p, st);
  } else if (type == "Split") {
    const std::string behavior = j.at("behavior").get<std::string>();
    if (behavior != "Isolated")
      fail(st.source, "unsupported Split pre-tokenizer behavior " + behavior + " (supported: Isolated)");
    if (flag(j, "invert", false))
      fail(st.source, "unsupported Split pre-tokenizer with invert: true");
    const json& pattern = j.at("pattern");
    pre_tokenizer_step step{pre_tokenizer_step::split, nullptr, false};
    if (pattern.contains("Regex"))
      step.pattern = std::make_shared<regex>(pattern.at("Regex").get<std::string>(), false, st.source);
    else if (pattern.contains("String"))
      step.pattern = std::make_shared<regex>(pattern.at("String").get<std::string>(), true, st.source);
    else
      fail(st.source, "Split pre-tokenizer pattern is neither Regex nor String: " + pattern.dump());
    st.pre_tokenizer.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    pre_tokenizer_step step{pre_tokenizer_step::byte_level, nullptr, flag(j, "add_prefix_space", true)};
    if (flag(j, "use_regex", true)) {
      static const auto gpt2 = std::make_shared<regex>(gpt2_pattern, false, "GPT-2 pattern");
      step.pattern = gpt2;
    }
    st.pre_tokenizer.push_back(std::move(step));
  } else {
    fail(st.source, "unsupported pre_tokenizer " + (type.empty() ? j.dump() : type) +
                        " (supported: Split, ByteLevel, Sequence of these, null)");
  }
}

void read_decoder(const json& j, tokenizer::state& st) {
  if (j.is_null()) return;
  st.has_decoder = true;
  const std::string type = type_of(j);
  if (type == "ByteLevel") {
    ++st.byte_level_decoders;
  } else if (type == "Sequence") {
    for (const json& d : j.at("decoders")) read_decoder(d, st);
  } else {
    fail(st.source, "unsupported decoder " + (type.empty() ? j.dump() : type) +
                        " (supported: ByteLevel, Sequence of ByteLevel, null)");
  }
}

void read_post_processor(const json& j, tokenizer::state& st) {
  if (j.is_null()) return;
  const std::string type = type_of(j);
  if (type == "ByteLevel") return;  // trims offsets only
  if (type == "Sequence") {
    for (const json& p : j.at("processors")) read_post_processor(p, st);
    return;
  }
  if (type != "TemplateProcessing")
    fail(st.source, "unsupported post_processor " + (type.empty() ? j.dump() : type) +
                        " (supported: ByteLevel, TemplateProcessing, Sequence of these, null)");
  const json& specials = j.at("special_tokens");
  std::vector<post_piece> pieces;
  for (const json& piece : j.at("single")) {
    if (piece.contains("Sequence")) {
      const std::string id = piece.at("Sequence").at("id").get<std::string>();
      if (id != "A") fail(st.source, "TemplateProcessing's single template uses sequence " + id);
      pieces.push_back({true, {}});
    } else if (piece.contains("SpecialToken")) {
      const std::string id = piece.at("SpecialToken").at("id").get<std::string>();
      auto it = specials.find(id);
      if (it == specials.end())
        fail(st.source, "TemplateProcessing uses special token " + id + " that special_tokens lacks");
      post_piece p;
      for (const json& v : it->at("ids")) p.ids.push_back(v.get<int64_t>());
      pieces.push_back(std::move(p));
    } else {
      fail(st.source, "TemplateProcessing has an unknown piece " + piece.dump());
    }
  }
  st.templates.push_back(std::move(pieces));
}

void read_model(const json& j, tokenizer::state& st) {
  const std::string type = type_of(j);
  if (!(type == "BPE" || (type.empty() && j.is_object() && j.contains("merges"))))
    fail(st.source, "unsupported model " + (type.empty() ? std::string("without a type") : type) +
                        " (supported: BPE)");
  if (j.contains("dropout") && !j["dropout"].is_null() && j["dropout"].get<double>() != 0.0)
    fail(st.source, "unsupported BPE dropout " + j["dropout"].dump() + " (supported: null)");
  if (flag(j, "byte_fallback", false)) fail(st.source, "unsupported BPE byte_fallback: true");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (j.contains(key) && !j[key].is_null() && !j[key].get<std::string>().empty())
      fail(st.source, std::string("unsupported BPE ") + key + " " + j[key].dump());
  }
  st.ignore_merges = flag(j, "ignore_merges", false);
  st.fuse_unk = flag(j, "fuse_unk", false);

  const json& vocab = j.at("vocab");
  if (!vocab.is_object()) fail(st.source, "model.vocab is not an object");
  constexpr int64_t max_id = int64_t{1} << 24;
  st.vocab_tokens.reserve(vocab.size());
  std::vector<int32_t> ids;
  ids.reserve(vocab.size());
  int64_t largest = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id >= max_id)
      fail(st.source, "model.vocab gives " + json(it.key()).dump() + " the id " +
                          std::to_string(id) + ", outside [0, 2^24)");
    st.vocab_tokens.push_back(it.key());
    ids.push_back(static_cast<int32_t>(id));
    largest = std::max(largest, id);
  }
  st.vocab_index_of_id.assign(static_cast<std::size_t>(largest + 1), -1);
  st.vocab.reserve(st.vocab_tokens.size());
  for (std::size_t k = 0; k < st.vocab_tokens.size(); ++k) {
    st.vocab[st.vocab_tokens[k]] = ids[k];
    st.vocab_index_of_id[static_cast<std::size_t>(ids[k])] = static_cast<int32_t>(k);
  }

  const json& merges = j.at("merges");
  if (!merges.is_array()) fail(st.source, "model.merges is not an array");
  st.merges.reserve(merges.size());
  int32_t rank = 0;
  std::string a, b;
  for (const json& m : merges) {
    if (m.is_string()) {
      const std::string& line = m.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;
      const std::size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        fail(st.source, "merge " + std::to_string(rank + 1) + " " + m.dump() +
                            " is not two tokens separated by one space");
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (m.is_array() && m.size() == 2) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      fail(st.source, "merge " + std::to_string(rank + 1) + " is neither \"a b\" nor [a, b]");
    }
    const int32_t ia = st.model_id(a), ib = st.model_id(b), inew = st.model_id(a + b);
    for (const auto& [id, text] : {std::pair{ia, a}, std::pair{ib, b}, std::pair{inew, a + b}}) {
      if (id < 0)
        fail(st.source, "merge " + std::to_string(rank + 1) + " uses " + json(text).dump() +
                            ", which the vocabulary lacks");
    }
    st.merges[pair_key(ia, ib)] = {rank, inew};  // a repeated pair keeps its last rank, as HF's
    ++rank;
  }
  if (j.contains("unk_token") && !j["unk_token"].is_null()) {
    const std::string unk = j["unk_token"].get<std::string>();
    st.unk_id = st.model_id(unk);
    if (st.unk_id < 0) fail(st.source, "unk_token " + json(unk).dump() + " is not in the vocabulary");
  }
}

// HF's AddedVocabulary::add_tokens as deserialization runs it: the ids are the vocabulary's for
// contents it has, else consecutive from the model vocabulary's size; the file's ids only warn.
void read_added_tokens(const json& j, tokenizer::state& st) {
  if (j.is_null()) return;
  if (!j.is_array()) fail(st.source, "added_tokens is not an array");
  int64_t next_id = static_cast<int64_t>(st.vocab_tokens.size());
  std::unordered_map<int64_t, added_token> by_id;
  for (const json& t : j) {
    added_token token;
    token.content = t.at("content").get<std::string>();
    token.special = flag(t, "special", false);
    token.normalized = flag(t, "normalized", !token.special);
    token.lstrip = flag(t, "lstrip", false);
    token.rstrip = flag(t, "rstrip", false);
    token.single_word = flag(t, "single_word", false);
    if (token.content.empty()) continue;
    auto known = st.added_ids.find(token.content);
    if (known != st.added_ids.end()) {
      const added_token& old = by_id[known->second];
      if (old.special == token.special && old.normalized == token.normalized &&
          old.lstrip == token.lstrip && old.rstrip == token.rstrip &&
          old.single_word == token.single_word)
        continue;
    }
    int64_t id;
    if (known != st.added_ids.end())
      id = known->second;
    else if (const int32_t m = st.model_id(token.content); m >= 0)
      id = m;
    else
      id = next_id++;
    token.id = id;
    st.added_ids[token.content] = id;
    if (token.special) st.special_contents.insert(token.content);
    by_id[id] = std::move(token);
  }
  for (auto& [id, token] : by_id) st.added.push_back(token);
  std::sort(st.added.begin(), st.added.end(),
            [](const added_token& x, const added_token& y) { return x.id < y.id; });
  for (std::size_t k = 0; k < st.added.size(); ++k) {
    const added_token& t = st.added[k];
    st.added_index_of_id[t.id] = k;
    if (t.normalized) {
      const std::string normalized = st.normalize(t.content);
      if (normalized != t.content) st.added_decoded[t.id] = normalized;
      st.normalized_trie.add(normalized, t.id);
    } else {
      st.raw_trie.add(t.content, t.id);
    }
  }
}

}  // namespace

tokenizer tokenizer::from_json(const nlohmann::json& j, const std::string& source) {
  auto st = std::make_shared<state>();
  st->source = source;
  try {
    if (!j.is_object()) fail(source, "not a tokenizer.json (the top level is not an object)");
    if (j.contains("version") && j["version"] != "1.0")
      fail(source, "unknown tokenizer version " + j["version"].dump());
    for (const char* key : {"truncation", "padding"}) {
      if (j.contains(key) && !j[key].is_null())
        fail(source, std::string("unsupported ") + key + " " + j[key].dump() + " (supported: null)");
    }
    if (!j.contains("model")) fail(source, "no model");
    read_model(j.at("model"), *st);
    read_normalizer(j.value("normalizer", json()), *st);
    read_pre_tokenizer(j.value("pre_tokenizer", json()), *st);
    read_decoder(j.value("decoder", json()), *st);
    read_post_processor(j.value("post_processor", json()), *st);
    read_added_tokens(j.value("added_tokens", json()), *st);
  } catch (const json::exception& e) {
    fail(source, std::string("malformed tokenizer.json: ") + e.what());
  }
  return tokenizer(std::move(st));
}

tokenizer tokenizer::load(const std::filesystem::path& path) {
  const std::string source = path.string();
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(source, "cannot open the tokenizer file; check the path (a checkpoint directory "
                        "holds it as tokenizer.json)");
  std::ostringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::parse_error& e) {
    fail(source, std::string("not valid JSON (truncated or corrupt file?): ") + e.what());
  }
  return from_json(j, source);
}

std::vector<int64_t> tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const state& st = *state_;
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 8);
  auto emit = [&](int64_t id) { ids.push_back(id); };
  st.split_added(
      text, st.raw_trie,
      [&](std::string_view raw) {
        const std::string normalized = st.normalize(raw);
        st.split_added(
            normalized, st.normalized_trie,
            [&](std::string_view piece) { st.pre_tokenize_and_merge(piece, ids); }, emit);
      },
      emit);
  if (add_special_tokens) {
    for (const auto& pieces : st.templates) {
      std::vector<int64_t> out;
      out.reserve(ids.size() + 4);
      for (const post_piece& p : pieces) {
        if (p.sequence)
          out.insert(out.end(), ids.begin(), ids.end());
        else
          out.insert(out.end(), p.ids.begin(), p.ids.end());
      }
      ids = std::move(out);
    }
  }
  return ids;
}

std::string tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  return decode(ids.data(), ids.size(), skip_special_tokens);
}

std::string tokenizer::decode(const int64_t* ids, std::size_t count, bool skip_special_tokens) const {
  const state& st = *state_;
  std::vector<std::string_view> tokens;
  tokens.reserve(count);
  for (std::size_t k = 0; k < count; ++k) {
    const int64_t id = ids[k];
    std::string_view token;
    if (auto a = st.added_index_of_id.find(id); a != st.added_index_of_id.end()) {
      auto d = st.added_decoded.find(id);
      token = d != st.added_decoded.end() ? std::string_view(d->second)
                                          : std::string_view(st.added[a->second].content);
    } else if (const std::string* t = st.model_token(id)) {
      token = *t;
    } else {
      continue;  // no such token: HF skips it
    }
    if (skip_special_tokens && st.special_contents.count(std::string(token))) continue;
    tokens.push_back(token);
  }
  if (!st.has_decoder) {
    std::string out;
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      if (k) out.push_back(' ');
      out.append(tokens[k]);
    }
    return out;
  }
  // ByteLevel: a token whose characters are all of the byte alphabet stands for those bytes,
  // any other for its own UTF-8; the bytes of all tokens are then read lossily as one text.
  const byte_alphabet& a = alphabet();
  std::vector<std::string> current(tokens.begin(), tokens.end());
  for (int step = 0; step < st.byte_level_decoders; ++step) {
    std::string bytes;
    for (const std::string& token : current) {
      const std::size_t mark = bytes.size();
      bool all = true;
      for (std::size_t i = 0; i < token.size();) {
        std::size_t length;
        const char32_t cp = next_code_point(token, i, &length);
        if (cp >= a.decoded.size() || a.decoded[cp] < 0) {
          all = false;
          break;
        }
        bytes.push_back(static_cast<char>(a.decoded[cp]));
        i += length;
      }
      if (!all) {
        bytes.resize(mark);
        bytes += token;
      }
    }
    current.assign(1, utf8_lossy(bytes));
  }
  std::string out;
  for (const std::string& s : current) out += s;
  return out;
}

std::vector<std::string> tokenizer::pre_tokens(std::string_view text) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  const std::string normalized = state_->normalize(text);
  if (normalized.empty()) return {};
  return state_->pre_tokenize(normalized);
}

std::optional<int64_t> tokenizer::token_to_id(std::string_view token) const {
  const state& st = *state_;
  if (auto it = st.added_ids.find(std::string(token)); it != st.added_ids.end()) return it->second;
  const int32_t id = st.model_id(token);
  if (id >= 0) return id;
  return std::nullopt;
}

std::optional<std::string> tokenizer::id_to_token(int64_t id) const {
  const state& st = *state_;
  if (auto a = st.added_index_of_id.find(id); a != st.added_index_of_id.end()) {
    auto d = st.added_decoded.find(id);
    return d != st.added_decoded.end() ? d->second : st.added[a->second].content;
  }
  if (const std::string* t = st.model_token(id)) return *t;
  return std::nullopt;
}

int64_t tokenizer::vocab_size() const {
  const state& st = *state_;
  int64_t n = static_cast<int64_t>(st.vocab_tokens.size());
  for (const auto& [content, id] : st.added_ids)
    if (st.model_id(content) < 0) ++n;
  return n;
}

const std::vector<added_token>& tokenizer::added_tokens() const { return state_->added; }

bool tokenizer::is_special(int64_t id) const {
  const state& st = *state_;
  auto a = st.added_index_of_id.find(id);
  return a != st.added_index_of_id.end() && st.special_contents.count(st.added[a->second].content);
}

std::optional<int64_t> tokenizer::special_token_id(std::string_view content) const {
  const state& st = *state_;
  const std::string key(content);
  if (!st.special_contents.count(key)) return std::nullopt;
  auto it = st.added_ids.find(key);
  if (it == st.added_ids.end()) return std::nullopt;
  return it->second;
}

}  // namespace cuda_agent::model
