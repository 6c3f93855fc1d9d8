#include "messages/episode_id.hpp"

#include <charconv>

#include <fmt/format.h>

namespace cuda_agent {
namespace {

// Reads the decimal number at the front of `text` (at least one digit) and drops it.
std::optional<int32_t> take_number(std::string_view& text) {
  int32_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end == text.data()) return std::nullopt;
  text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  return value;
}

// Reads "-<tag><number>" at the front of `text` where present; false where malformed.
bool take_tagged(std::string_view& text, std::string_view tag, int32_t& out) {
  const std::string prefix = "-" + std::string{tag};
  if (text.substr(0, prefix.size()) != prefix) return true;
  text.remove_prefix(prefix.size());
  const auto n = take_number(text);
  if (!n || *n <= 0) return false;
  out = *n;
  return true;
}

}  // namespace

std::string format_episode_id(const episode_id_parts& parts) {
  auto id = fmt::format("{}-{:04d}", parts.run_id, parts.index);
  if (parts.resume > 0) id += fmt::format("-resume{}", parts.resume);
  if (parts.retry > 0) id += fmt::format("-retry{}", parts.retry);
  return id;
}

std::optional<episode_id_parts> parse_episode_id(std::string_view id, std::string_view run_id) {
  if (id.size() <= run_id.size() + 1 || id.substr(0, run_id.size()) != run_id || id[run_id.size()] != '-')
    return std::nullopt;
  std::string_view rest = id.substr(run_id.size() + 1);
  episode_id_parts parts{std::string{run_id}};
  const auto index = take_number(rest);
  if (!index || *index < 0) return std::nullopt;
  parts.index = *index;
  if (!take_tagged(rest, "resume", parts.resume) || !take_tagged(rest, "retry", parts.retry) || !rest.empty())
    return std::nullopt;
  return parts;
}

std::optional<episode_id_parts> parse_episode_id(std::string_view id) {
  for (auto dash = id.rfind('-'); dash != std::string_view::npos && dash > 0; dash = id.rfind('-', dash - 1))
    if (auto parts = parse_episode_id(id, id.substr(0, dash))) return parts;
  return std::nullopt;
}

}  // namespace cuda_agent
