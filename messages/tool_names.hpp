// The nine tools an agent calls (tool_call.tool), in the order they are offered to the policy and
// SKILL.md presents them. Part of the contract: the tools actor implements exactly these
// (actors/tools/tools.cpp, a test checks its registry against this list), skills/tools/<name>.json
// describes each to the model, and the episode and the demonstration policy accept these alone.
#pragma once

#include <string>
#include <vector>

namespace cuda_agent {

inline const std::vector<std::string>& tool_names() {
  static const std::vector<std::string> names = {"Bash", "Read",       "Write",   "Edit",    "MultiEdit",
                                                 "Glob", "Grep", "BashOutput", "KillBash"};
  return names;
}

}  // namespace cuda_agent
