#include "messages/incidental.hpp"

#include <cctype>
#include <map>

namespace cuda_agent {

const incidental_fields& incidental_fields_of(std::string_view type) {
  static const std::map<std::string, incidental_fields, std::less<>> table = {
      {"episode_started", {{"started_at_ns"}, {}}},
      {"episode_ended", {{"wall_ms"}, {}}},
      {"tool_result", {{}, {"duration_ms"}}},
      {"compile_result", {{}, {"cache_hit", "module_path", "duration_ms"}}},
      {"verify_job", {{}, {"module_path"}}},
      {"verify_result", {{}, {"duration_ms"}}},
      {"profile_job", {{}, {"module_path"}}},
      {"profile_result", {{}, {"eager", "compiled", "candidate"}}},
      {"evaluate_job", {{}, {"module_path"}}},
      {"reward_record",
       {{}, {"t_eager_ms", "t_compile_ms", "t_new_ms", "speedup_eager", "speedup_compile", "timing"}}},
  };
  static const incidental_fields none;
  const auto it = table.find(type);
  return it == table.end() ? none : it->second;
}

std::string mask_measured_numbers(const std::string& text) {
  const auto digit = [&](std::size_t i) {
    return i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]));
  };
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    if (!digit(i) || (i > 0 && (digit(i - 1) || text[i - 1] == '.'))) {
      out += text[i++];
      continue;
    }
    std::size_t end = i;
    while (digit(end)) ++end;
    if (end < text.size() && text[end] == '.' && digit(end + 1)) {
      ++end;
      while (digit(end)) ++end;
      out += '#';
    } else {
      out.append(text, i, end - i);
    }
    i = end;
  }
  return out;
}

}  // namespace cuda_agent
