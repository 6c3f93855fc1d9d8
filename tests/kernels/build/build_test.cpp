// The kernel build on real solutions (tests/kernels/build/fixtures/): real compilers in the real sandbox,
// and the built module imported and called by the harness python in a child process.
//
// All tests, also across the processes CTest starts, share one cache directory in the build
// tree, so the system's binding.cpp and the fixtures' common kernels/add_binding.cpp compile
// once; the failure fixtures differ only in kernels/add.cpp.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "actors/process/subprocess.hpp"
#include "config/settings.hpp"
#include "kernels/build/build.hpp"
#include "kernels/build/diagnostics.hpp"
#include "kernels/build/sandbox.hpp"
#include "kernels/build/toolchain.hpp"

namespace cuda_agent::build {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(CUDA_AGENT_SOURCE_DIR) / "tests" / "kernels" / "build" / "fixtures";

// bubblewrap where it is installed and works (CUDA_AGENT_BWRAP names one explicitly).
std::string working_bwrap() {
  static const std::string found = [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("CUDA_AGENT_BWRAP")) candidates.push_back(env);
    candidates.insert(candidates.end(), {"bwrap", "/opt/deps/usr/bin/bwrap"});
    for (const auto& name : candidates) {
      const fs::path program = find_program(name);
      if (program.empty()) continue;
      try {
        const auto r = run_subprocess({program.string(), "--unshare-all", "--ro-bind", "/", "/",
                                       "--die-with-parent", "true"});
        if (r.ok()) return program.string();
      } catch (const std::exception&) {
      }
    }
    return std::string{};
  }();
  return found;
}

class BuildTest : public ::testing::Test {
 protected:
  static fs::path scratch() {
    static const fs::path dir = [] {
      const fs::path d = fs::temp_directory_path() / ("ca-build-test-" + std::to_string(::getpid()));
      fs::remove_all(d);
      fs::create_directories(d);
      return d;
    }();
    return dir;
  }
  static void TearDownTestSuite() { fs::remove_all(scratch()); }

  static build_settings test_settings() {
    build_settings s = build_settings::from(settings{});
    s.cache_dir = CUDA_AGENT_BUILD_TEST_CACHE;
    s.timeout = std::chrono::seconds{600};
    s.jobs = 2;
    const std::string bwrap = working_bwrap();
    s.sandbox = bwrap.empty() ? "none" : "bwrap";
    s.bwrap = bwrap;
    return s;
  }

  static build_request cpu_request(const fs::path& dir) {
    build_request r;
    r.solution_dir = dir;
    r.device = "cpu";
    return r;
  }

  // A fixture copied into the scratch dir, so a test may edit it.
  static fs::path copy_fixture(const std::string& name, const std::string& as) {
    const fs::path to = scratch() / as;
    fs::remove_all(to);
    fs::copy(kFixtures / name, to, fs::copy_options::recursive);
    return to;
  }

  static std::string read_text(const fs::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

  // cpu_add, its binding file marked as new, built with `binding_cxx` compiling binding files.
  static build_result build_with_binding_compiler(const std::string& binding_cxx,
                                                  const std::string& as) {
    auto settings = test_settings();
    settings.binding_cxx = binding_cxx;
    const fs::path dir = copy_fixture("cpu_add", as);
    std::ofstream(dir / "kernels" / "add_binding.cpp", std::ios::app) << "// " << as << "\n";
    return build_solution(settings, cpu_request(dir));
  }

  // Imports the module with the harness python and checks add_scaled_forward against torch.
  static subprocess_result call_module(const fs::path& module_path, const std::string& device) {
    subprocess_options options;
    options.timeout = std::chrono::minutes{3};
    return run_subprocess(
        {test_settings().python, "-c",
         "import sys, torch\n"
         "sys.path.insert(0, sys.argv[1])\n"
         "import cuda_extension\n"
         "d = sys.argv[2]\n"
         "a = torch.randn(4099, device=d); b = torch.randn(4099, device=d)\n"
         "out = cuda_extension.add_scaled_forward(a, b)\n"
         "assert torch.allclose(out, a + 2 * b), 'wrong result'\n"
         "print('ok', cuda_extension.__file__)\n",
         module_path.parent_path().string(), device},
        options);
  }

  // Processes whose command line mentions this process's build work dirs (named
  // <module>-<pid>-<n> under the cache's work/) or that run in one.
  static std::vector<std::string> processes_in_our_work_dirs() {
    const std::string needle = (fs::path(CUDA_AGENT_BUILD_TEST_CACHE) / "work").string();
    const std::string ours = "-" + std::to_string(::getpid()) + "-";
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator("/proc")) {
      const std::string pid = entry.path().filename().string();
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      if (pid == std::to_string(::getpid())) continue;
      std::ifstream in(entry.path() / "cmdline", std::ios::binary);
      std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      for (auto& c : cmdline) c = c == '\0' ? ' ' : c;
      std::error_code ec;
      const std::string cwd = fs::read_symlink(entry.path() / "cwd", ec).string();
      const auto mentions = [&](const std::string& text) {
        const auto at = text.find(needle);
        return at != std::string::npos && text.find(ours, at) != std::string::npos;
      };
      if (mentions(cmdline) || mentions(cwd)) found.push_back(pid + ": " + cmdline);
    }
    return found;
  }
};

TEST_F(BuildTest, HonestCpuSolutionBuildsImportsAndComputes) {
  const auto result = build_solution(test_settings(), cpu_request(kFixtures / "cpu_add"));
  ASSERT_TRUE(result.error.empty()) << result.error;
  ASSERT_TRUE(result.ok) << result.diagnostics << "\nlog: " << result.log_path;
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_EQ(result.module_path.filename().string().rfind("cuda_extension.", 0), 0u);
  EXPECT_TRUE(fs::exists(result.log_path));
  const auto run = call_module(result.module_path, "cpu");
  EXPECT_TRUE(run.ok()) << run.describe() << "\n" << run.err;
  EXPECT_NE(run.out.find("ok "), std::string::npos) << run.out;
}

TEST_F(BuildTest, UnchangedRebuildIsACacheHitAndAnEditIsAMiss) {
  const fs::path dir = copy_fixture("cpu_add", "edited");
  const auto first = build_solution(test_settings(), cpu_request(dir));
  ASSERT_TRUE(first.ok) << first.error << first.diagnostics;
  const auto second = build_solution(test_settings(), cpu_request(dir));
  ASSERT_TRUE(second.ok);
  EXPECT_TRUE(second.cache_hit);
  EXPECT_EQ(second.compiled_files, 0);
  EXPECT_EQ(second.module_path, first.module_path);

  // The kernel now computes a + 3b (with a comment no earlier run wrote): only that file is
  // compiled again, and the module says so.
  {
    std::string source = read_text(dir / "kernels" / "add.cpp");
    const auto at = source.find("2.0f");
    ASSERT_NE(at, std::string::npos);
    source.replace(at, 4, "3.0f");
    source += "// edit " + std::to_string(::getpid()) + "-" +
              std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) + "\n";
    std::ofstream(dir / "kernels" / "add.cpp", std::ios::trunc) << source;
  }
  const auto third = build_solution(test_settings(), cpu_request(dir));
  ASSERT_TRUE(third.ok) << third.diagnostics;
  EXPECT_FALSE(third.cache_hit);
  EXPECT_EQ(third.compiled_files, 1);
  EXPECT_EQ(third.cached_objects, 2);  // binding.cpp and kernels/add_binding.cpp
  EXPECT_NE(third.module_path, first.module_path);
  const auto run = call_module(third.module_path, "cpu");
  EXPECT_FALSE(run.ok()) << "the edited kernel computes a + 3b, the check expects a + 2b";
  EXPECT_NE(run.err.find("wrong result"), std::string::npos) << run.err;
}

TEST_F(BuildTest, SyntaxErrorIsReportedWithRelativePaths) {
  const auto result = build_solution(test_settings(), cpu_request(kFixtures / "syntax_error"));
  ASSERT_TRUE(result.error.empty()) << result.error;
  EXPECT_FALSE(result.ok);
  EXPECT_FALSE(result.timed_out);
  EXPECT_NE(result.diagnostics.find("kernels/add.cpp:5:"), std::string::npos) << result.diagnostics;
  EXPECT_NE(result.diagnostics.find("error"), std::string::npos);
  EXPECT_NE(result.diagnostics.find("undeclared_total"), std::string::npos) << result.diagnostics;
  EXPECT_EQ(result.diagnostics.find(scratch().string()), std::string::npos)
      << "absolute build paths leak into the diagnostics:\n" << result.diagnostics;
  ASSERT_TRUE(fs::exists(result.log_path));
}

TEST_F(BuildTest, UndefinedSymbolIsALinkError) {
  const auto result = build_solution(test_settings(), cpu_request(kFixtures / "link_error"));
  ASSERT_TRUE(result.error.empty()) << result.error;
  EXPECT_FALSE(result.ok);
  EXPECT_NE(result.diagnostics.find("scale_factor_from_elsewhere"), std::string::npos)
      << result.diagnostics;
  EXPECT_EQ(result.diagnostics.find("PyModule"), std::string::npos)
      << "the Python C API is not a link error:\n" << result.diagnostics;
}

TEST_F(BuildTest, RunawayTemplatesHitTheTimeLimitAndNoCompilerIsLeft) {
  // Bindings first, so the time limit is spent on the runaway file alone.
  ASSERT_TRUE(build_solution(test_settings(), cpu_request(kFixtures / "cpu_add")).ok);
  auto settings = test_settings();
  settings.timeout = std::chrono::seconds{5};
  const fs::path dir = copy_fixture("template_blowup", "template_blowup");
  const auto start = std::chrono::steady_clock::now();
  const auto result = build_solution(settings, cpu_request(dir));
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(result.error.empty()) << result.error;
  EXPECT_FALSE(result.ok);
  EXPECT_TRUE(result.timed_out);
  EXPECT_NE(result.diagnostics.find("kernels/add.cpp: compilation did not finish"),
            std::string::npos)
      << result.diagnostics;
  EXPECT_LT(took, std::chrono::seconds{30});
  // Whatever ran the compiler named the build's work dir under the cache on its command line.
  // Killed processes in the sandbox's PID namespace are reaped by the kernel shortly after its
  // init dies; give that a few seconds, then nothing may be left.
  std::vector<std::string> left;
  for (int i = 0; i < 100; ++i) {
    left = processes_in_our_work_dirs();
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }
  EXPECT_TRUE(left.empty()) << "still running: " << left.front();
}

TEST_F(BuildTest, SourcesCannotReadOutsideTheSandbox) {
  if (working_bwrap().empty()) GTEST_SKIP() << "no working bubblewrap (set CUDA_AGENT_BWRAP)";
  const fs::path secret_dir = scratch() / "outside";
  fs::create_directories(secret_dir);
  std::ofstream(secret_dir / "secret.h") << "constexpr float kSecretScale = 2.0f;\n";
  const fs::path dir = copy_fixture("cpu_add", "reads_outside");
  std::ofstream(dir / "kernels" / "add.cpp", std::ios::trunc)
      << "#include \"" << (secret_dir / "secret.h").string() << "\"\n"
      << "#include <cstdint>\n"
         "extern \"C\" void add_scaled(const float* a, const float* b, float* out, int64_t n) {\n"
         "  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + kSecretScale * b[i];\n"
         "}\n";
  const auto result = build_solution(test_settings(), cpu_request(dir));
  ASSERT_TRUE(result.error.empty()) << result.error;
  EXPECT_FALSE(result.ok) << "a file outside the sandbox was readable";
  EXPECT_NE(result.diagnostics.find("secret.h"), std::string::npos) << result.diagnostics;

  // The same source compiles outside the sandbox: the sandbox, not the source, stopped it.
  const auto direct = run_subprocess(
      {test_settings().cxx, "-fsyntax-only", "-std=c++17", (dir / "kernels" / "add.cpp").string()});
  EXPECT_TRUE(direct.ok()) << direct.err;
}

// What a compiler process sees: sandboxed_command around `bash -c script`, with the build's
// work dir as the one writable directory. `isolated` false runs the same script with the limits
// only, to show that the sandbox, not the script, made the difference.
subprocess_result run_as_compiler(const fs::path& work, const std::string& script, bool isolated = true) {
  build::sandbox_spec spec;
  spec.bubblewrap = isolated;
  spec.bwrap = working_bwrap();
  spec.writable = work;
  spec.cwd = work;
  spec.memory_bytes = int64_t{4} << 30;
  spec.file_bytes = int64_t{64} << 20;
  return run_subprocess(build::sandboxed_command(spec, {"/bin/bash", "-c", script}));
}

TEST_F(BuildTest, ACompilerCanWriteOnlyItsWorkDir) {
  if (working_bwrap().empty()) GTEST_SKIP() << "no working bubblewrap (set CUDA_AGENT_BWRAP)";
  const fs::path work = scratch() / "writes" / "work";
  fs::create_directories(work);
  const fs::path beside = work.parent_path() / "beside";
  // Beside the work dir is the sandbox's private /tmp here (the work dir is under /tmp): the
  // write may succeed in there, but must not reach the host.
  const auto r = run_as_compiler(work, "echo ok > " + (work / "object.o").string() + " && "
                                       "{ echo x > " + beside.string() + "; true; } 2>/dev/null && "
                                       "{ echo x > /escape 2>/dev/null || echo refused-root; } && "
                                       "{ echo x > /usr/escape 2>/dev/null || echo refused-usr; }");
  ASSERT_TRUE(r.ok()) << r.describe() << r.err;
  EXPECT_TRUE(fs::exists(work / "object.o"));
  EXPECT_FALSE(fs::exists(beside));
  for (const char* refused : {"refused-root", "refused-usr"})
    EXPECT_NE(r.out.find(refused), std::string::npos) << refused << "\n" << r.out;
}

TEST_F(BuildTest, ACompilerKeepsNoCapabilityAndMakesNoNamespace) {
  if (working_bwrap().empty()) GTEST_SKIP() << "no working bubblewrap (set CUDA_AGENT_BWRAP)";
  const fs::path work = scratch() / "caps";
  fs::create_directories(work);
  const auto r = run_as_compiler(work, "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb):' /proc/self/status; "
                                       "unshare --user true 2>/dev/null && echo made-a-user-namespace; true");
  ASSERT_TRUE(r.ok()) << r.describe() << r.err;
  std::istringstream lines(r.out);
  int capability_lines = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("Cap", 0) != 0) continue;
    ++capability_lines;
    EXPECT_NE(line.find("0000000000000000"), std::string::npos) << line;
  }
  EXPECT_EQ(capability_lines, 5) << r.out;
  EXPECT_EQ(r.out.find("made-a-user-namespace"), std::string::npos) << r.out;
}

TEST_F(BuildTest, ACompilerCannotReachTheNetwork) {
  if (working_bwrap().empty()) GTEST_SKIP() << "no working bubblewrap (set CUDA_AGENT_BWRAP)";
  // A listener of this process on the host's loopback: reachable from outside the sandbox only.
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener, 4), 0);
  socklen_t length = sizeof address;
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string connect = "exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(ntohs(address.sin_port)) +
                              " && echo connected";
  const fs::path work = scratch() / "network";
  fs::create_directories(work);
  const auto outside = run_as_compiler(work, connect, false);
  EXPECT_NE(outside.out.find("connected"), std::string::npos) << outside.err;
  const auto inside = run_as_compiler(work, connect);
  EXPECT_EQ(inside.out.find("connected"), std::string::npos) << inside.out;
  ::close(listener);
}

TEST_F(BuildTest, SolutionsOwnBindingFilesAreIgnored) {
  const auto result = build_solution(test_settings(), cpu_request(kFixtures / "own_binding"));
  ASSERT_TRUE(result.error.empty()) << result.error;
  ASSERT_TRUE(result.ok) << result.diagnostics;
  const auto run = call_module(result.module_path, "cpu");
  EXPECT_TRUE(run.ok()) << run.err;
}

TEST_F(BuildTest, BadRequestsAreInfrastructureErrors) {
  auto settings = test_settings();
  auto missing = build_solution(settings, cpu_request(scratch() / "no-such-solution"));
  EXPECT_FALSE(missing.ok);
  EXPECT_NE(missing.error.find("does not exist"), std::string::npos) << missing.error;

  settings.sandbox = "bwrap";
  settings.bwrap = "/nonexistent/bwrap";
  const auto no_bwrap = build_solution(settings, cpu_request(kFixtures / "cpu_add"));
  EXPECT_FALSE(no_bwrap.ok);
  EXPECT_NE(no_bwrap.error.find("build.sandbox"), std::string::npos) << no_bwrap.error;

  auto no_binding_cxx = test_settings();
  no_binding_cxx.binding_cxx = "/nonexistent/clang++";
  const auto missing_compiler = build_solution(no_binding_cxx, cpu_request(kFixtures / "cpu_add"));
  EXPECT_FALSE(missing_compiler.ok);
  EXPECT_NE(missing_compiler.error.find("build.binding_cxx"), std::string::npos)
      << missing_compiler.error;

  // A CUDA source in a CPU build is the candidate's mistake, reported to it.
  const auto cuda_on_cpu = build_solution(test_settings(), cpu_request(kFixtures / "cuda_add"));
  EXPECT_TRUE(cuda_on_cpu.error.empty()) << cuda_on_cpu.error;
  EXPECT_FALSE(cuda_on_cpu.ok);
  EXPECT_NE(cuda_on_cpu.diagnostics.find("kernels/add.cu"), std::string::npos);
}

// Binding files by g++ (its .gch) and by clang++ (a .pch with the templates instantiated): both
// modules compute the same, and each build's log shows the compiler it was given.
TEST_F(BuildTest, BindingFilesBuildWithGccAndWithClang) {
  const auto by_gcc = build_with_binding_compiler(test_settings().cxx, "bindings_by_gcc");
  ASSERT_TRUE(by_gcc.ok) << by_gcc.error << by_gcc.diagnostics;
  const std::string gcc_log = read_text(by_gcc.log_path);
  EXPECT_EQ(gcc_log.find("-include-pch"), std::string::npos) << gcc_log;
  EXPECT_TRUE(call_module(by_gcc.module_path, "cpu").ok());

  if (find_program("clang++").empty()) GTEST_SKIP() << "no clang++ on PATH: the g++ half ran";
  const auto by_clang = build_with_binding_compiler("clang++", "bindings_by_clang");
  ASSERT_TRUE(by_clang.ok) << by_clang.error << by_clang.diagnostics;
  const std::string clang_log = read_text(by_clang.log_path);
  EXPECT_NE(clang_log.find("clang++ -c kernels/add_binding.cpp"), std::string::npos) << clang_log;
  EXPECT_NE(clang_log.find("-include-pch .ca_slim/torch/extension.h.pch"), std::string::npos)
      << clang_log;
  const auto run = call_module(by_clang.module_path, "cpu");
  EXPECT_TRUE(run.ok()) << run.describe() << "\n" << run.err;
}

// A binding file clang++ rejects and g++ accepts (GCC's __builtin_has_attribute) is compiled
// again by g++ with the real header: no honest solution is lost to the fast path.
TEST_F(BuildTest, BindingFileClangRejectsIsCompiledAgainByGcc) {
  if (find_program("clang++").empty()) GTEST_SKIP() << "no clang++ on PATH";
  auto settings = test_settings();
  settings.binding_cxx = "clang++";
  const fs::path dir = copy_fixture("cpu_add", "gnu_binding");
  std::ofstream(dir / "kernels" / "add_binding.cpp", std::ios::app)
      << "[[gnu::noinline]] int count_names(int n) { return n + 1; }\n"
         "static_assert(__builtin_has_attribute(count_names, noinline), \"noinline\");\n";
  const auto result = build_solution(settings, cpu_request(dir));
  ASSERT_TRUE(result.error.empty()) << result.error;
  ASSERT_TRUE(result.ok) << result.diagnostics;
  const std::string log = read_text(result.log_path);
  EXPECT_NE(log.find("undeclared identifier 'noinline'"), std::string::npos) << log;
  EXPECT_NE(log.find("again by build.cxx with the real one"), std::string::npos) << log;
  EXPECT_TRUE(call_module(result.module_path, "cpu").ok());
}

TEST_F(BuildTest, CompileResultCarriesTheBuildResult) {
  build_result r;
  r.ok = true;
  r.module_path = "/cache/modules/abc/cuda_extension.so";
  r.cache_hit = true;
  r.duration_ms = 12.5;
  const auto c = to_compile_result("job-7", r);
  EXPECT_EQ(c.job_id, "job-7");
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.module_path, "/cache/modules/abc/cuda_extension.so");
  EXPECT_TRUE(c.cache_hit);
  EXPECT_DOUBLE_EQ(c.duration_ms, 12.5);
}

// The CUDA fixture in CUDA Agent's convention. It needs nvcc and a CUDA torch to build, and a
// GPU to run; where a GPU is missing the module is still built and imported.
TEST_F(BuildTest, CudaSolutionBuildsAndRunsOnAGpu) {
  auto settings = test_settings();
  build_request request;
  request.solution_dir = kFixtures / "cuda_add";
  request.device = "cuda";
  std::string device_error;
  try {
    request.arch = detect_gpu_arch();
  } catch (const std::exception& e) {
    device_error = e.what();
    request.arch = "sm_90";
  }
  try {
    probe_toolchain(settings.python, settings.cxx, settings.binding_cxx, settings.nvcc, true);
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no CUDA toolchain: " << e.what();
  }
  const auto result = build_solution(settings, request);
  ASSERT_TRUE(result.error.empty()) << result.error;
  ASSERT_TRUE(result.ok) << result.diagnostics << "\nlog: " << result.log_path;
  if (!device_error.empty()) {
    subprocess_options options;
    options.timeout = std::chrono::minutes{3};
    const auto imported = run_subprocess(
        {settings.python, "-c",
         "import sys, torch; sys.path.insert(0, sys.argv[1]); import cuda_extension as m; "
         "assert hasattr(m, 'add_scaled_forward')",
         result.module_path.parent_path().string()},
        options);
    EXPECT_TRUE(imported.ok()) << imported.err;
    GTEST_SKIP() << "built and imported; not run: " << device_error;
  }
  const auto run = call_module(result.module_path, "cuda");
  EXPECT_TRUE(run.ok()) << run.describe() << "\n" << run.err;
}

TEST(Diagnostics, CondensesDeduplicatesAndCaps) {
  const std::string log =
      "/w/stage/kernels/a.cpp: In function 'void f()':\n"
      "/w/stage/kernels/a.cpp:3:5: error: 'x' was not declared in this scope\n"
      "    3 |     x = 1;\n"
      "      |     ^\n"
      "/w/stage/kernels/a.cpp:4:5: warning: unused variable 'y'\n"
      "/w/stage/kernels/a.cpp:3:5: error: 'x' was not declared in this scope\n"
      "kernels/b.cu(7): error: identifier \"z\" is undefined\n"
      "      z = 2;\n"
      "      ^\n";
  diagnostics_options options;
  options.rewrites = {{"/w/stage/", ""}};
  options.full_log = "/logs/x.log";
  const auto out = condense_diagnostics(log, options);
  EXPECT_EQ(out.find("/w/stage"), std::string::npos) << out;
  EXPECT_EQ(out.find("warning"), std::string::npos) << out;
  EXPECT_LT(out.find("kernels/a.cpp:3:5"), out.find("kernels/b.cu(7)")) << out;
  EXPECT_NE(out.find("    3 |     x = 1;"), std::string::npos) << out;
  EXPECT_NE(out.find("1 repeats dropped"), std::string::npos) << out;

  options.max_chars = 200;
  std::string many;
  for (int i = 0; i < 100; ++i)
    many += "kernels/a.cpp:" + std::to_string(i) + ":1: error: problem number " + std::to_string(i) + "\n";
  const auto capped = condense_diagnostics(many, options);
  EXPECT_LT(capped.size(), 400u);
  EXPECT_NE(capped.find("problem number 0"), std::string::npos);
  EXPECT_NE(capped.find("/logs/x.log"), std::string::npos) << capped;
}

TEST(Diagnostics, UndefinedSymbolsSkipThePythonApi) {
  const auto symbols = undefined_symbols(
      "a.o: in function `f': a.cpp:(.text+0x1): warning: undefined reference to `PyModule_Create2'\n"
      "a.o: in function `g': a.cpp:(.text+0x9): warning: undefined reference to `helper(int)'\n"
      "b.o: warning: undefined reference to `helper(int)'\n");
  ASSERT_EQ(symbols.size(), 1u);
  EXPECT_EQ(symbols[0], "helper(int)");
}

}  // namespace
}  // namespace cuda_agent::build
