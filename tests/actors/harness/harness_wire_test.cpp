// The harness wire has one definition per language (messages/harness_wire.hpp with
// messages.hpp's judging_parameters for C++, skills/harness/wire.py for Python); these tests fail
// when a field or a default exists on one side only, and when the judging defaults drift from
// the harness.* settings' defaults.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/harness/judging.hpp"
#include "messages/codec.hpp"
#include "messages/harness_wire.hpp"
#include "tests/support/skills_python.hpp"

namespace cuda_agent {
namespace {

nlohmann::json python_wire() {
  return testing_support::skills_python_json(
      "import json\nfrom harness import wire\nprint(json.dumps({'job': wire.JOB, 'judging': wire.JUDGING}))");
}

// Names present on one side only, and names whose defaults differ, as readable lines.
std::string differences(const nlohmann::json& cpp, const nlohmann::json& python) {
  std::string out;
  for (const auto& [name, value] : cpp.items()) {
    if (!python.contains(name)) {
      out += "only in C++: " + name + "\n";
      continue;
    }
    const auto& other = python[name];
    const bool same = value.is_number() && other.is_number() ? value.get<double>() == other.get<double>()
                                                             : value == other;
    if (!same) out += name + ": C++ " + value.dump() + ", Python " + other.dump() + "\n";
  }
  for (const auto& [name, value] : python.items())
    if (!cpp.contains(name)) out += "only in Python: " + name + "\n";
  return out;
}

TEST(HarnessWire, JobFieldsAndDefaultsAreTheSameInCppAndPython) {
  const auto python = python_wire();
  EXPECT_EQ(differences(msgpack_to_json(encode(harness_job{})), python["job"]), "");
}

TEST(HarnessWire, JudgingFieldsAndDefaultsAreTheSameInCppAndPython) {
  const auto python = python_wire();
  EXPECT_EQ(differences(msgpack_to_json(encode(judging_parameters{})), python["judging"]), "");
}

TEST(HarnessWire, JudgingDefaultsAreTheSettingsDefaults) {
  EXPECT_EQ(harness::judging_from(settings{}), judging_parameters{});
}

TEST(HarnessWire, NoNameIsBothAJobFieldAndAJudgingField) {
  // The request is one flat map: a name on both sides would be written twice.
  const auto job = msgpack_to_json(encode(harness_job{}));
  const auto judging = msgpack_to_json(encode(judging_parameters{}));  // named: items() does not own it
  for (const auto& [name, value] : judging.items())
    EXPECT_FALSE(job.contains(name)) << name;
}

TEST(HarnessWire, TheDifferenceCheckSeesAFieldOnOneSideOnly) {
  // The comparison itself can fail: a Python-only field, a C++-only field, another default.
  auto python = msgpack_to_json(encode(judging_parameters{}));
  auto cpp = python;
  python["extra"] = 1;
  cpp.erase("atol");
  cpp["max_cv"] = 0.5;
  const auto diff = differences(cpp, python);
  EXPECT_NE(diff.find("only in Python: extra"), std::string::npos) << diff;
  EXPECT_NE(diff.find("only in Python: atol"), std::string::npos) << diff;
  EXPECT_NE(diff.find("max_cv: C++ 0.5"), std::string::npos) << diff;
}

}  // namespace
}  // namespace cuda_agent
