// Read, Write, Edit, MultiEdit, Glob and Grep through run_tool, as the episode calls them:
// their semantics, their failures, and the attempts to leave the workdir.
#include <unistd.h>

#include "tests/actors/tools/tool_test_support.hpp"

namespace cuda_agent::tools::testing {
namespace {

using json = nlohmann::json;

class file_tools : public tool_fixture {};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// --- Read ---------------------------------------------------------------------------------------

TEST_F(file_tools, read_numbers_lines_like_cat_n) {
  write_text(host("a.py"), "first\nsecond\nthird\n");
  const auto r = call("Read", {{"file_path", "/workdir/a.py"}});
  ASSERT_FALSE(r.is_error) << r.output;
  EXPECT_EQ(r.output, "     1\tfirst\n     2\tsecond\n     3\tthird\n");
  EXPECT_EQ(call("Read", {{"file_path", "a.py"}}).output, r.output);  // relative to the workdir
}

TEST_F(file_tools, read_honours_offset_and_limit_and_says_when_there_is_more) {
  std::string text;
  for (int i = 1; i <= 10; ++i) text += "line " + std::to_string(i) + "\n";
  write_text(host("ten.txt"), text);
  const auto r = call("Read", {{"file_path", "ten.txt"}, {"offset", 4}, {"limit", 2}});
  EXPECT_EQ(r.output,
            "     4\tline 4\n     5\tline 5\n[showing lines 4-5 of 10; Read with offset=6 for more]");
  const auto past = call("Read", {{"file_path", "ten.txt"}, {"offset", 11}});
  EXPECT_TRUE(past.is_error);
  EXPECT_TRUE(contains(past.output, "past the end")) << past.output;
}

TEST_F(file_tools, read_cuts_long_lines_and_stops_at_the_default_line_count) {
  tool_limits limits;
  limits.read_lines = 3;
  limits.line_chars = 20;
  make_session(test_sandbox_settings(), limits);
  write_text(host("long.txt"), std::string(50, 'x') + "\nb\nc\nd\n");
  const auto r = call("Read", {{"file_path", "long.txt"}});
  EXPECT_TRUE(contains(r.output, std::string(20, 'x') + "... [line cut: 30 more characters]"));
  EXPECT_TRUE(contains(r.output, "[showing lines 1-3 of 4; Read with offset=4 for more]"));
  EXPECT_FALSE(contains(r.output, "\td\n"));
}

TEST_F(file_tools, read_refuses_what_is_not_a_text_file) {
  write_text(host("blob.bin"), std::string("ab\0cd", 5));
  fs::create_directories(host("dir"));
  EXPECT_TRUE(contains(call("Read", {{"file_path", "blob.bin"}}).output, "binary file"));
  EXPECT_TRUE(contains(call("Read", {{"file_path", "dir"}}).output, "is a directory"));
  const auto missing = call("Read", {{"file_path", "nope.txt"}});
  EXPECT_TRUE(missing.is_error);
  EXPECT_TRUE(contains(missing.output, "does not exist: /workdir/nope.txt")) << missing.output;
  write_text(host("empty.txt"), "");
  EXPECT_EQ(call("Read", {{"file_path", "empty.txt"}}).output, "(/workdir/empty.txt is empty)");
}

// --- Write --------------------------------------------------------------------------------------

TEST_F(file_tools, write_creates_files_and_their_directories) {
  const auto r = call("Write", {{"file_path", "kernels/add.cu"}, {"content", "// add\n"}});
  ASSERT_FALSE(r.is_error) << r.output;
  EXPECT_EQ(r.output, "Created /workdir/kernels/add.cu (1 lines, 7 bytes)");
  EXPECT_EQ(read_text(host("kernels/add.cu")), "// add\n");
  // What the tool just wrote counts as read: it can be written again at once.
  EXPECT_FALSE(call("Write", {{"file_path", "kernels/add.cu"}, {"content", "x"}}).is_error);
}

TEST_F(file_tools, write_refuses_to_overwrite_a_file_it_has_not_read) {
  write_text(host("model_new.py"), "original\n");
  const auto refused = call("Write", {{"file_path", "model_new.py"}, {"content", "new\n"}});
  EXPECT_TRUE(refused.is_error);
  EXPECT_TRUE(contains(refused.output, "has not been Read")) << refused.output;
  EXPECT_EQ(read_text(host("model_new.py")), "original\n");
  call("Read", {{"file_path", "model_new.py"}});
  EXPECT_FALSE(call("Write", {{"file_path", "model_new.py"}, {"content", "new\n"}}).is_error);
  EXPECT_EQ(read_text(host("model_new.py")), "new\n");
}

// --- Edit ---------------------------------------------------------------------------------------

TEST_F(file_tools, edit_replaces_one_exact_occurrence) {
  write_text(host("k.cu"), "int a = 1;\nint b = 2;\n");
  call("Read", {{"file_path", "k.cu"}});
  const auto r = call("Edit", {{"file_path", "k.cu"}, {"old_string", "b = 2"},
                               {"new_string", "b = 3"}});
  ASSERT_FALSE(r.is_error) << r.output;
  EXPECT_EQ(read_text(host("k.cu")), "int a = 1;\nint b = 3;\n");
  EXPECT_TRUE(contains(r.output, "1 replacement"));
  EXPECT_TRUE(contains(r.output, "     2\tint b = 3;"));  // the changed part, numbered
}

TEST_F(file_tools, edit_requires_a_read_first_and_a_file_unchanged_since) {
  write_text(host("k.cu"), "x\n");
  const auto unread = call("Edit", {{"file_path", "k.cu"}, {"old_string", "x"},
                                    {"new_string", "y"}});
  EXPECT_TRUE(unread.is_error);
  EXPECT_TRUE(contains(unread.output, "Read it before editing")) << unread.output;
  call("Read", {{"file_path", "k.cu"}});
  write_text(host("k.cu"), "x changed behind the agent's back\n");
  const auto stale = call("Edit", {{"file_path", "k.cu"}, {"old_string", "x"},
                                   {"new_string", "y"}});
  EXPECT_TRUE(stale.is_error);
  EXPECT_TRUE(contains(stale.output, "changed since it was last Read")) << stale.output;
  EXPECT_EQ(read_text(host("k.cu")), "x changed behind the agent's back\n");
}

TEST_F(file_tools, edit_fails_clearly_when_old_string_is_not_unique_or_absent) {
  write_text(host("k.cu"), "f(); f(); f();\n");
  call("Read", {{"file_path", "k.cu"}});
  const auto ambiguous = call("Edit", {{"file_path", "k.cu"}, {"old_string", "f()"},
                                       {"new_string", "g()"}});
  EXPECT_TRUE(ambiguous.is_error);
  EXPECT_TRUE(contains(ambiguous.output, "occurs 3 times")) << ambiguous.output;
  const auto absent = call("Edit", {{"file_path", "k.cu"}, {"old_string", "h()"},
                                    {"new_string", "g()"}});
  EXPECT_TRUE(contains(absent.output, "was not found")) << absent.output;
  const auto same = call("Edit", {{"file_path", "k.cu"}, {"old_string", "f()"},
                                  {"new_string", "f()"}, {"replace_all", true}});
  EXPECT_TRUE(contains(same.output, "identical")) << same.output;
  EXPECT_EQ(read_text(host("k.cu")), "f(); f(); f();\n");
  const auto all = call("Edit", {{"file_path", "k.cu"}, {"old_string", "f()"},
                                 {"new_string", "g()"}, {"replace_all", true}});
  ASSERT_FALSE(all.is_error) << all.output;
  EXPECT_TRUE(contains(all.output, "3 replacements"));
  EXPECT_EQ(read_text(host("k.cu")), "g(); g(); g();\n");
}

// --- MultiEdit ----------------------------------------------------------------------------------

TEST_F(file_tools, multi_edit_applies_edits_in_order) {
  write_text(host("m.py"), "a = 1\nb = 2\n");
  call("Read", {{"file_path", "m.py"}});
  const auto r = call("MultiEdit", {{"file_path", "m.py"},
                                    {"edits", {{{"old_string", "a = 1"}, {"new_string", "a = 10"}},
                                               {{"old_string", "a = 10"}, {"new_string", "a = 11"}},
                                               {{"old_string", "b"}, {"new_string", "c"},
                                                {"replace_all", true}}}}});
  ASSERT_FALSE(r.is_error) << r.output;
  EXPECT_EQ(read_text(host("m.py")), "a = 11\nc = 2\n");
}

TEST_F(file_tools, multi_edit_is_all_or_nothing) {
  write_text(host("m.py"), "a = 1\nb = 2\n");
  call("Read", {{"file_path", "m.py"}});
  const auto r = call("MultiEdit", {{"file_path", "m.py"},
                                    {"edits", {{{"old_string", "a = 1"}, {"new_string", "a = 10"}},
                                               {{"old_string", "zzz"}, {"new_string", "y"}}}}});
  EXPECT_TRUE(r.is_error);
  EXPECT_TRUE(contains(r.output, "edits[1]")) << r.output;
  EXPECT_TRUE(contains(r.output, "no edit was applied"));
  EXPECT_EQ(read_text(host("m.py")), "a = 1\nb = 2\n");
  const auto bad = call("MultiEdit", {{"file_path", "m.py"}, {"edits", {{{"old_string", "a"}}}}});
  EXPECT_TRUE(contains(bad.output, "edits[0]: missing required argument 'new_string'"))
      << bad.output;
  EXPECT_TRUE(call("MultiEdit", {{"file_path", "m.py"}, {"edits", json::array()}}).is_error);
}

// --- Glob and Grep ------------------------------------------------------------------------------

TEST_F(file_tools, glob_matches_recursively_newest_first) {
  write_text(host("old.py"), "");
  write_text(host("kernels/new.cu"), "");
  write_text(host("kernels/mid.cu"), "");
  write_text(host("kernels/deep/x.cpp"), "");
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(host("old.py"), now - std::chrono::hours{3});
  fs::last_write_time(host("kernels/mid.cu"), now - std::chrono::hours{2});
  fs::last_write_time(host("kernels/new.cu"), now - std::chrono::hours{1});
  EXPECT_EQ(call("Glob", {{"pattern", "**/*.cu"}}).output,
            "/workdir/kernels/new.cu\n/workdir/kernels/mid.cu\n");
  EXPECT_EQ(call("Glob", {{"pattern", "*.py"}}).output, "/workdir/old.py\n");
  EXPECT_EQ(call("Glob", {{"pattern", "**/*.{cpp,py}"}}).output,
            "/workdir/kernels/deep/x.cpp\n/workdir/old.py\n");
  EXPECT_EQ(call("Glob", {{"pattern", "*.cu"}, {"path", "kernels"}}).output,
            "/workdir/kernels/new.cu\n/workdir/kernels/mid.cu\n");
  EXPECT_EQ(call("Glob", {{"pattern", "/workdir/kernels/*.cu"}}).output,
            "/workdir/kernels/new.cu\n/workdir/kernels/mid.cu\n");
  EXPECT_EQ(call("Glob", {{"pattern", "*.txt"}}).output, "No files found");
  EXPECT_TRUE(call("Glob", {{"pattern", "*"}, {"path", "/etc"}}).is_error);
}

TEST_F(file_tools, grep_has_three_output_modes) {
  write_text(host("a.cu"), "__global__ void add() {}\nint x;\n__global__ void mul() {}\n");
  write_text(host("b.py"), "import torch\nGLOBAL = 1\n");
  write_text(host(".hidden/c.cu"), "__global__ void hidden() {}\n");
  EXPECT_EQ(call("Grep", {{"pattern", "__global__"}}).output, "Found 1 file\n/workdir/a.cu\n");
  EXPECT_EQ(call("Grep", {{"pattern", "global"}, {"case_insensitive", true},
                          {"output_mode", "count"}})
                .output,
            "/workdir/a.cu:2\n/workdir/b.py:1\n");
  EXPECT_EQ(call("Grep", {{"pattern", "void \\w+\\("}, {"output_mode", "content"}}).output,
            "/workdir/a.cu:1:__global__ void add() {}\n/workdir/a.cu:3:__global__ void mul() {}\n");
  EXPECT_EQ(call("Grep", {{"pattern", "void"}, {"output_mode", "content"},
                          {"line_numbers", false}, {"glob", "*.py"}})
                .output,
            "No matches found");
  EXPECT_EQ(call("Grep", {{"pattern", "torch"}, {"glob", "*.{py,cu}"}}).output,
            "Found 1 file\n/workdir/b.py\n");
  const auto bad = call("Grep", {{"pattern", "("}});
  EXPECT_TRUE(bad.is_error);
  EXPECT_TRUE(contains(bad.output, "argument 'pattern' is not a valid regular expression"));
  EXPECT_TRUE(contains(call("Grep", {{"pattern", "x"}, {"output_mode", "lines"}}).output,
                       "argument 'output_mode'"));
}

// --- Paths: nothing outside the workdir ---------------------------------------------------------

TEST_F(file_tools, paths_outside_the_workdir_are_refused) {
  for (const std::string& path : std::vector<std::string>{"/etc/passwd", "../../etc/passwd", "/workdir/../etc/passwd",
                                 "a/../../x", work.path().string() + "/x"}) {
    const auto r = call("Read", {{"file_path", path}});
    EXPECT_TRUE(r.is_error) << path;
    EXPECT_TRUE(contains(r.output, "outside the workdir")) << path << ": " << r.output;
  }
  const auto w = call("Write", {{"file_path", "/tmp/ca-escape.txt"}, {"content", "x"}});
  EXPECT_TRUE(w.is_error);
  EXPECT_FALSE(fs::exists("/tmp/ca-escape.txt"));
}

TEST_F(file_tools, symlinks_cannot_lead_out) {
  scratch_workdir outside;
  write_text(outside.path() / "secret.txt", "secret\n");
  fs::create_symlink(outside.path() / "secret.txt", host("link.txt"));
  fs::create_directory_symlink(outside.path(), host("linkdir"));
  fs::create_directory_symlink(outside.path() / "not-yet", host("dangling"));
  fs::create_symlink("../" + outside.path().filename().string() + "/secret.txt",
                     host("relative-link.txt"));

  EXPECT_TRUE(contains(call("Read", {{"file_path", "link.txt"}}).output, "outside the workdir"));
  EXPECT_TRUE(contains(call("Read", {{"file_path", "relative-link.txt"}}).output,
                       "outside the workdir"));
  EXPECT_TRUE(call("Write", {{"file_path", "linkdir/new.txt"}, {"content", "x"}}).is_error);
  EXPECT_TRUE(call("Write", {{"file_path", "dangling/new.txt"}, {"content", "x"}}).is_error);
  EXPECT_FALSE(fs::exists(outside.path() / "new.txt"));
  EXPECT_FALSE(fs::exists(outside.path() / "not-yet"));
  EXPECT_FALSE(contains(call("Grep", {{"pattern", "secret"}}).output, "secret.txt"));
  EXPECT_EQ(call("Glob", {{"pattern", "**/*.txt"}}).output, "No files found");
}

TEST_F(file_tools, symlinks_inside_the_workdir_work_also_as_the_sandbox_writes_them) {
  write_text(host("real/k.cu"), "kernel\n");
  fs::create_symlink("real/k.cu", host("rel.cu"));
  fs::create_symlink("/workdir/real/k.cu", host("abs.cu"));  // as `ln -s` inside the sandbox
  EXPECT_EQ(call("Read", {{"file_path", "rel.cu"}}).output, "     1\tkernel\n");
  EXPECT_EQ(call("Read", {{"file_path", "abs.cu"}}).output, "     1\tkernel\n");
}

// --- Arguments ----------------------------------------------------------------------------------

TEST_F(file_tools, bad_arguments_name_the_argument) {
  EXPECT_EQ(call("Read", json::object()).output,
            "Error: missing required argument 'file_path' (a string)");
  EXPECT_EQ(call("Read", {{"file_path", 3}}).output,
            "Error: argument 'file_path' must be a string, got a number");
  EXPECT_EQ(call("Read", {{"file_path", "a"}, {"offset", "2"}}).output,
            "Error: argument 'offset' must be an integer, got a string");
  EXPECT_TRUE(contains(call("Read", {{"file_path", "a"}, {"path", "b"}}).output,
                       "unknown argument 'path'"));
  EXPECT_TRUE(contains(call_raw("Read", "{not json").output, "not valid JSON"));
  EXPECT_TRUE(contains(call_raw("Read", "[1]").output, "must be a JSON object"));
  const auto unknown = call("Delete", {{"file_path", "a"}});
  EXPECT_TRUE(unknown.is_error);
  EXPECT_TRUE(contains(unknown.output, "unknown tool 'Delete'"));
  EXPECT_EQ(unknown.call_id, "call-1");
  EXPECT_EQ(unknown.episode_id, "episode-1");
}

TEST(tool_output, is_cut_with_a_marker_at_a_character_boundary) {
  bool truncated = false;
  const auto out = limit_output("ab\xC3\xA9" "cd", 3, &truncated);  // é is two bytes
  EXPECT_TRUE(truncated);
  EXPECT_EQ(out, "ab\n[output truncated: 4 more bytes not shown]");
  EXPECT_EQ(valid_utf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  truncated = false;
  EXPECT_EQ(limit_output("short", 100, &truncated), "short");
  EXPECT_FALSE(truncated);
}

// The tools actor implements exactly the nine tools of the contract (messages/tool_names.hpp).
TEST(tool_schemas, the_registry_implements_the_contracts_tools) {
  auto promised = tool_names();
  std::sort(promised.begin(), promised.end());
  EXPECT_EQ(implemented_tools(), promised);
}

// The schemas the model is given must describe exactly the arguments the tools take.
TEST(tool_schemas, match_the_implemented_arguments) {
  for (const auto& name : tool_names()) {
    const auto path = fs::path{CUDA_AGENT_SOURCE_DIR} / "skills/tools" / (name + ".json");
    const auto schema = json::parse(read_text(path));
    EXPECT_EQ(schema.at("name"), name);
    EXPECT_FALSE(schema.at("description").get<std::string>().empty());
    std::vector<std::string> properties;
    for (const auto& [key, value] : schema.at("parameters").at("properties").items()) {
      properties.push_back(key);
      EXPECT_TRUE(value.contains("description")) << name << "." << key;
    }
    auto implemented = tool_arguments(name);
    std::sort(properties.begin(), properties.end());
    std::sort(implemented.begin(), implemented.end());
    EXPECT_EQ(properties, implemented) << name;
    // Leaving out a required argument is an error naming it.
    for (const auto& required : schema.at("parameters").at("required")) {
      json args = json::object();
      for (const auto& other : schema.at("parameters").at("required"))
        if (other != required) args[other.get<std::string>()] = other == "edits" ? json::array({json::object()}) : json("x");
      scratch_workdir work;
      tool_session session{sandbox{work.path(), test_sandbox_settings()}, tool_limits{}};
      const auto r = run_tool(session, tool_call{"c", name, args.dump()}, "e");
      EXPECT_TRUE(r.is_error) << name;
      EXPECT_TRUE(contains(r.output, "'" + required.get<std::string>() + "'")) << name << ": " << r.output;
    }
  }
}

TEST(routed_command, recognises_exactly_build_verify_and_profile) {
  EXPECT_EQ(routed_command("build"), "build");
  EXPECT_EQ(routed_command("  verify\n"), "verify");
  EXPECT_EQ(routed_command("profile"), "profile");
  EXPECT_FALSE(routed_command("build && verify"));
  EXPECT_FALSE(routed_command("./build"));
  EXPECT_FALSE(routed_command("make build"));
  EXPECT_FALSE(routed_command(""));
}

}  // namespace
}  // namespace cuda_agent::tools::testing
