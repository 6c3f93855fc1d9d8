#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "config/settings.hpp"

namespace cuda_agent {
namespace {

namespace fs = std::filesystem;

fs::path source_dir() { return CUDA_AGENT_SOURCE_DIR; }

std::string slurp(const fs::path& path) {
  std::ifstream in{path};
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class config_file : public ::testing::Test {
 protected:
  fs::path write(const std::string& text) {
    path_ = fs::temp_directory_path() /
            ("cuda-agent-config-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
             "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".toml");
    std::ofstream{path_} << text;
    return path_;
  }
  void TearDown() override {
    if (!path_.empty()) fs::remove(path_);
  }
  // Loads the text and returns the error message, or "" when it loaded.
  std::string load_error(const std::string& text) {
    settings s;
    try {
      s.load_file(write(text));
    } catch (const config_error& e) {
      return e.what();
    }
    return "";
  }
  fs::path path_;
};

TEST(settings, defaults_follow_the_schema) {
  settings s;
  EXPECT_EQ(s.get_string("log.dir"), "runs/log");
  EXPECT_EQ(s.get_int("log.segment_bytes"), 64 << 20);
  EXPECT_EQ(s.get_string("log.fsync"), "interval");
  EXPECT_EQ(s.get_string("logging.level"), "info");
}

TEST(settings, reading_an_undeclared_key_is_a_programming_error) {
  settings s;
  EXPECT_THROW(s.get_int("log.no_such_key"), std::logic_error);
  EXPECT_THROW(s.get_int("log.dir"), std::logic_error);  // a string read as an integer
}

TEST(settings, every_key_is_documented_and_in_the_default_file) {
  const auto readme = slurp(source_dir() / "config" / "README.md");
  const auto defaults = slurp(source_dir() / "config" / "cuda-agent.toml");
  ASSERT_FALSE(readme.empty());
  ASSERT_FALSE(defaults.empty());
  for (const auto& spec : settings::schema()) {
    EXPECT_NE(readme.find("`" + spec.key + "`"), std::string::npos) << spec.key;
    const auto name = spec.key.substr(spec.key.find('.') + 1);
    EXPECT_NE(defaults.find(name + " = "), std::string::npos) << spec.key;
  }
}

TEST_F(config_file, shipped_defaults_file_loads_and_changes_nothing) {
  settings loaded;
  loaded.load_file(source_dir() / "config" / "cuda-agent.toml");
  settings defaults;
  for (const auto& spec : settings::schema()) {
    if (spec.type == setting_type::integer) {
      EXPECT_EQ(loaded.get_int(spec.key), defaults.get_int(spec.key)) << spec.key;
    } else if (spec.type == setting_type::string || spec.type == setting_type::choice) {
      EXPECT_EQ(loaded.get_string(spec.key), defaults.get_string(spec.key)) << spec.key;
    }
  }
}

TEST_F(config_file, values_from_a_file_override_defaults) {
  settings s;
  s.load_file(write("[log]\nfsync = \"always\"\nsegment_bytes = 8192\n"));
  EXPECT_EQ(s.get_string("log.fsync"), "always");
  EXPECT_EQ(s.get_int("log.segment_bytes"), 8192);
  EXPECT_NE(s.to_toml().find("fsync = 'always'  # " + path_.string() + ":2"), std::string::npos)
      << s.to_toml();
}

TEST_F(config_file, unknown_key_names_the_key_and_line) {
  const auto error = load_error("[log]\nfsync = \"never\"\nsegment_size = 10\n");
  EXPECT_NE(error.find("unknown setting 'log.segment_size'"), std::string::npos) << error;
  EXPECT_NE(error.find(":3:"), std::string::npos) << error;
}

TEST_F(config_file, unknown_section_is_an_error) {
  EXPECT_NE(load_error("[logs]\ndir = \"x\"\n").find("'logs.dir'"), std::string::npos);
}

TEST_F(config_file, wrong_type_names_the_key) {
  auto error = load_error("[log]\nsegment_bytes = \"big\"\n");
  EXPECT_NE(error.find("'log.segment_bytes' must be an integer"), std::string::npos) << error;
  error = load_error("[log]\ndir = 3\n");
  EXPECT_NE(error.find("'log.dir' must be a string"), std::string::npos) << error;
  error = load_error("[log]\nsegment_bytes = 1.5\n");
  EXPECT_NE(error.find("'log.segment_bytes'"), std::string::npos) << error;
}

TEST_F(config_file, out_of_range_and_unknown_choice_are_errors) {
  auto error = load_error("[log]\nsegment_bytes = 12\n");
  EXPECT_NE(error.find("'log.segment_bytes'"), std::string::npos) << error;
  EXPECT_NE(error.find("between 4096"), std::string::npos) << error;
  error = load_error("[log]\nfsync = \"sometimes\"\n");
  EXPECT_NE(error.find("never, interval, always"), std::string::npos) << error;
}

TEST_F(config_file, key_outside_a_section_is_an_error) {
  EXPECT_NE(load_error("dir = \"x\"\n").find("[section]"), std::string::npos);
}

TEST_F(config_file, syntax_error_names_file_and_line) {
  const auto error = load_error("[log]\nfsync = \"never\nx\n");
  EXPECT_NE(error.find(path_.string() + ":2"), std::string::npos) << error;
}

TEST(settings_override, applies_after_the_file_and_parses_by_type) {
  settings s;
  s.apply_override("log.segment_bytes=65536");
  s.apply_override(" log.dir = /tmp/x ");
  EXPECT_EQ(s.get_int("log.segment_bytes"), 65536);
  EXPECT_EQ(s.get_string("log.dir"), "/tmp/x");
}

TEST(settings_override, bad_overrides_name_the_key) {
  settings s;
  auto error_of = [&](const char* text) {
    try {
      s.apply_override(text);
    } catch (const config_error& e) {
      return std::string{e.what()};
    }
    return std::string{};
  };
  EXPECT_NE(error_of("log.segment_bytes=lots").find("'log.segment_bytes' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of("log.segment_bytes=12x").find("'log.segment_bytes'"), std::string::npos);
  EXPECT_NE(error_of("log.nope=1").find("unknown setting 'log.nope'"), std::string::npos);
  EXPECT_NE(error_of("log.dir").find("KEY=VALUE"), std::string::npos);
  EXPECT_NE(error_of("logging.level=loud").find("trace, debug"), std::string::npos);
  // A failed override leaves the previous value in place.
  EXPECT_EQ(s.get_int("log.segment_bytes"), 64 << 20);
}

}  // namespace
}  // namespace cuda_agent
