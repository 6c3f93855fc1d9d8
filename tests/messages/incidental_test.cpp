#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "messages/incidental.hpp"
#include "messages/messages.hpp"

namespace cuda_agent {
namespace {

template <class T>
void collect(std::set<std::string>& names, std::string& problems) {
  const std::string type = message_name(static_cast<const T*>(nullptr));
  names.insert(type);
  const auto& fields = field_names(static_cast<const T*>(nullptr));
  const auto& incidental = incidental_fields_of(type);
  for (const auto* list : {&incidental.clock, &incidental.measured})
    for (const auto& name : *list)
      if (std::find(fields.begin(), fields.end(), name) == fields.end())
        problems += type + " has no field '" + name + "'\n";
}

template <class... Ts>
std::string check_all(caf::detail::type_list<Ts...>) {
  std::set<std::string> names;
  std::string problems;
  (collect<Ts>(names, problems), ...);
  return problems;
}

TEST(Incidental, EveryListedFieldExistsInItsType) {
  // A renamed field would otherwise silently become compared again (or a typo never dropped).
  EXPECT_EQ(check_all(all_message_types{}), "");
}

TEST(Incidental, ClockReadingsAndMeasurementsAreApart) {
  EXPECT_EQ(incidental_fields_of("episode_started").clock, std::vector<std::string>{"started_at_ns"});
  EXPECT_TRUE(incidental_fields_of("episode_started").measured.empty());
  const auto& compile = incidental_fields_of("compile_result");
  EXPECT_TRUE(compile.clock.empty());
  EXPECT_NE(std::find(compile.measured.begin(), compile.measured.end(), "cache_hit"), compile.measured.end());
  // What decides an outcome is never incidental.
  const auto& reward = incidental_fields_of("reward_record");
  for (const char* decisive : {"reward", "compiled", "correct", "violations", "error"})
    EXPECT_EQ(std::find(reward.measured.begin(), reward.measured.end(), decisive), reward.measured.end())
        << decisive;
  EXPECT_TRUE(incidental_fields_of("no_such_type").measured.empty());
}

TEST(Incidental, MasksDecimalNumbersAndKeepsWholeOnes) {
  EXPECT_EQ(mask_measured_numbers("eager          median 0.0354 ms  (p10 0.0287 ms, cv 0.202, 5 runs)"),
            "eager          median # ms  (p10 # ms, cv #, 5 runs)");
  EXPECT_EQ(mask_measured_numbers("speed-up 1.18x over torch.compile"), "speed-up #x over torch.compile");
  EXPECT_EQ(mask_measured_numbers("model.py:12: error at line 3"), "model.py:12: error at line 3");
  EXPECT_EQ(mask_measured_numbers("sm_90 1. .5 3.14.15"), "sm_90 1. .5 #.15");
  EXPECT_EQ(mask_measured_numbers(""), "");
}

}  // namespace
}  // namespace cuda_agent
