#include "kernels/build/build.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "actors/process/subprocess.hpp"
#include "kernels/build/diagnostics.hpp"
#include "kernels/build/sandbox.hpp"
#include "kernels/build/sha256.hpp"
#include "kernels/build/toolchain.hpp"

namespace cuda_agent::build {

const std::string& slim_torch_extension_h();  // embedded_files.cpp

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

// Inside the staging directory, next to the solution's own kernels/: names a solution cannot
// bring (only kernels/ and top-level headers are staged).
constexpr const char* kSlimDir = ".ca_slim";
constexpr const char* kSlimHeader = ".ca_slim/torch/extension.h";  // found through -I.ca_slim
constexpr const char* kObjDir = ".ca_obj";
constexpr const char* kOutDir = ".ca_out";
constexpr const char* kModuleName = "cuda_extension";
constexpr size_t kMaxSolutionBytes = size_t{64} << 20;
constexpr size_t kMaxSolutionFiles = 2000;

// A solution that the build refuses before compiling (bad layout): the candidate's fault.
struct candidate_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// argv without the first `option` and the `values` words after it.
std::vector<std::string> without_option(std::vector<std::string> argv, const std::string& option,
                                        size_t values) {
  const auto at = std::find(argv.begin(), argv.end(), option);
  if (at != argv.end()) argv.erase(at, at + 1 + static_cast<std::ptrdiff_t>(values));
  return argv;
}

std::vector<std::string> split_flags(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void write_file(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// --- The solution's files -----------------------------------------------------------------------

enum class source_kind { kernel_cpp, binding_cpp, cuda };

struct staged_file {
  std::string rel;  // path inside the staging dir, '/'-separated
  std::string content;
};

struct solution_files {
  std::vector<staged_file> files;    // everything staged: solution files and the template
  std::vector<size_t> sources;       // indexes into files
  std::string headers_digest;        // of every staged non-source file
  bool headers_mention_torch = false;
};

bool is_header(const std::string& name) {
  for (const char* ext : {".h", ".hpp", ".hh", ".hxx", ".cuh", ".inl", ".inc"})
    if (ends_with(name, ext)) return true;
  return false;
}

bool is_source(const std::string& rel) {
  // Sources are the direct children of kernels/ (CUDA Agent's convention) and binding.cpp.
  if (rel == "binding.cpp") return true;
  if (rel.rfind("kernels/", 0) != 0 || rel.find('/', 8) != std::string::npos) return false;
  return ends_with(rel, ".cpp") || ends_with(rel, ".cc") || ends_with(rel, ".cxx") ||
         ends_with(rel, ".cu");
}

source_kind kind_of(const std::string& rel) {
  if (ends_with(rel, ".cu")) return source_kind::cuda;
  if (rel == "binding.cpp" || ends_with(rel, "_binding.cpp")) return source_kind::binding_cpp;
  return source_kind::kernel_cpp;
}

solution_files collect_solution(const fs::path& dir) {
  solution_files out;
  size_t bytes = 0;
  const auto take = [&](const fs::path& path, std::string rel) {
    if (out.files.size() >= kMaxSolutionFiles)
      throw candidate_error("the solution has more than " + std::to_string(kMaxSolutionFiles) +
                            " files under kernels/");
    std::string content = read_file(path);
    bytes += content.size();
    if (bytes > kMaxSolutionBytes)
      throw candidate_error("the solution's kernels/ and headers exceed 64 MiB");
    out.files.push_back({std::move(rel), std::move(content)});
  };

  const fs::path kernels = dir / "kernels";
  if (fs::is_symlink(kernels))
    throw candidate_error("kernels/ is a symbolic link; make it a directory of its own");
  if (!fs::is_directory(kernels)) throw candidate_error("the solution has no kernels/ directory");
  // Regular files only: a symbolic link could point anywhere on the host.
  for (fs::recursive_directory_iterator it(kernels, fs::directory_options::none), end; it != end;
       ++it) {
    if (it->is_symlink() || !it->is_regular_file()) continue;
    take(it->path(), fs::relative(it->path(), dir).generic_string());
  }
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (entry.is_symlink() || !entry.is_regular_file() || !is_header(name)) continue;
    if (name == "binding_registry.h") continue;  // the system's copy wins
    take(entry.path(), name);
  }
  out.files.push_back({"binding.cpp", template_binding_cpp()});
  out.files.push_back({"binding_registry.h", template_binding_registry_h()});
  std::sort(out.files.begin(), out.files.end(),
            [](const staged_file& a, const staged_file& b) { return a.rel < b.rel; });

  sha256 headers;
  for (size_t i = 0; i < out.files.size(); ++i) {
    const auto& file = out.files[i];
    if (is_source(file.rel)) {
      out.sources.push_back(i);
    } else {
      headers.field(file.rel).field(file.content);
      if (file.content.find("torch/extension.h") != std::string::npos)
        out.headers_mention_torch = true;
    }
  }
  out.headers_digest = headers.hex();
  return out;
}

// --- Compile and link commands ------------------------------------------------------------------

struct compile_unit {
  std::string rel;
  source_kind kind;
  std::string key;                        // object digest
  std::string object;                     // relative to the staging dir
  std::vector<std::string> argv;          // with the slim <torch/extension.h> first
  std::vector<std::string> fallback_argv;  // with the real header; empty when no retry applies
  bool cached = false;
};

struct command_builder {
  const build_settings& settings;
  const toolchain& tc;
  bool cuda;
  std::string arch;

  std::vector<std::string> includes(bool slim) const {
    std::vector<std::string> out;
    if (slim) out.push_back(std::string("-I") + kSlimDir);
    out.insert(out.end(), {"-I.", "-isystem", tc.torch_include().string(), "-isystem",
                           tc.torch_api_include().string(), "-isystem",
                           tc.python_include.string()});
    if (cuda) out.insert(out.end(), {"-isystem", (tc.cuda_home / "include").string()});
    return out;
  }

  // The same defines torch.utils.cpp_extension gives every source.
  static std::vector<std::string> defines() {
    return {"-DTORCH_EXTENSION_NAME=cuda_extension", "-DTORCH_API_INCLUDE_EXTENSION_H"};
  }

  // The precompiled slim header beside the slim header: g++ finds a .gch there by itself and
  // silently ignores one built with other flags (kernels at -O3); clang++ is handed its .pch.
  std::string precompiled_slim_header() const {
    return std::string(kSlimHeader) + (tc.binding_cxx_is_clang ? ".pch" : ".gch");
  }

  // A binding file with the slim header is compiled by build.binding_cxx (its fast path); every
  // other source, and a binding file again with the real header, by build.cxx.
  std::vector<std::string> compile(const std::string& rel, source_kind kind,
                                   const std::string& object, bool slim) const {
    auto argv = compile_without_pch(rel, kind, object, slim);
    if (kind == source_kind::binding_cpp && slim && tc.binding_cxx_is_clang)
      argv.insert(argv.end(), {"-include-pch", precompiled_slim_header()});
    return argv;
  }

  std::vector<std::string> compile_without_pch(const std::string& rel, source_kind kind,
                                               const std::string& object, bool slim) const {
    std::vector<std::string> argv;
    if (kind == source_kind::cuda) {
      const std::string compute = "compute_" + arch.substr(3);
      argv = {tc.nvcc.string(), "-c", rel, "-o", object, "-std=c++17", "-ccbin", tc.cxx.string(),
              "-Xcompiler", "-fPIC", "--generate-code=arch=" + compute + ",code=" + arch,
              "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__",
              "-D__CUDA_NO_BFLOAT16_CONVERSIONS__", "-D__CUDA_NO_HALF2_OPERATORS__",
              "--expt-relaxed-constexpr"};
      for (const auto& f : split_flags(settings.kernel_flags)) argv.push_back(f);
    } else {
      const auto& compiler =
          kind == source_kind::binding_cpp && slim ? tc.binding_cxx : tc.cxx;
      argv = {compiler.string(), "-c", rel, "-o", object, "-std=c++17", "-fPIC"};
      const auto& flags =
          kind == source_kind::binding_cpp ? settings.binding_flags : settings.kernel_flags;
      for (const auto& f : split_flags(flags)) argv.push_back(f);
      if (kind == source_kind::kernel_cpp) argv.push_back("-fopenmp");
    }
    for (const auto& f : defines()) argv.push_back(f);
    for (const auto& f : includes(slim)) argv.push_back(f);
    return argv;
  }

  // The slim header precompiled with exactly the binding files' flags. clang++ instantiates its
  // templates there, once, and embeds the header itself: a PCH names the absolute path it was
  // built from, a staging dir that is gone by the next build.
  std::vector<std::string> precompiled_header(const std::string& header) const {
    auto argv = compile_without_pch(header, source_kind::binding_cpp, precompiled_slim_header(), true);
    argv[1] = "-x";
    argv.insert(argv.begin() + 2, "c++-header");
    if (tc.binding_cxx_is_clang)
      argv.insert(argv.end(), {"-fpch-instantiate-templates", "-Xclang",
                               "-fmodules-embed-file=" + header});
    return argv;
  }

  std::vector<std::string> link(const std::vector<std::string>& objects,
                                const std::string& output) const {
    std::vector<std::string> argv{tc.cxx.string(), "-shared", "-o", output};
    // gold links against torch's large libraries in half the time of ld (0.30 s vs 0.58 s).
    if (!tc.gold.empty()) argv.push_back("-fuse-ld=gold");
    argv.insert(argv.end(), objects.begin(), objects.end());
    // -z defs with warnings instead of errors: every undefined symbol is listed, and the ones
    // that are not the Python C API fail the build (see undefined_symbols).
    argv.insert(argv.end(), {"-fopenmp", "-Wl,-z,defs", "-Wl,--warn-unresolved-symbols",
                             "-Wl,--as-needed", "-L" + tc.torch_lib().string(), "-lc10"});
    if (cuda) argv.push_back("-lc10_cuda");
    argv.insert(argv.end(), {"-ltorch_cpu"});
    if (cuda) argv.push_back("-ltorch_cuda");
    argv.insert(argv.end(), {"-ltorch", "-ltorch_python", "-Wl,-rpath," + tc.torch_lib().string()});
    if (cuda) {
      std::vector<fs::path> dirs{tc.cuda_lib()};
      std::error_code ec;
      for (fs::directory_iterator it(tc.site_packages / "nvidia", ec), end; !ec && it != end;
           it.increment(ec))
        dirs.push_back(it->path() / "lib");
      for (const char* lib : {"cudart", "cublas", "cublasLt", "cudnn"}) {
        const auto args = link_library(lib, dirs);
        argv.insert(argv.end(), args.begin(), args.end());
      }
      argv.push_back("-Wl,-rpath," + tc.cuda_lib().string());
    }
    return argv;
  }
};

// The sandbox mode is part of the key: an object compiled unsandboxed, which might have read
// anything, is never reused by a sandboxed build.
std::string object_key(const toolchain& tc, const std::string& sandbox, const compile_unit& unit,
                       const std::string& content, const std::string& headers_digest) {
  sha256 digest;
  digest.field("object v1").field(tc.fingerprint).field(sandbox).field(unit.rel).field(content).field(
      headers_digest);
  for (const auto& word : unit.argv) digest.field(word);
  return digest.hex();
}

// --- Running the compilers ----------------------------------------------------------------------

struct build_log {
  std::mutex mutex;
  std::string text;

  void append(const std::vector<std::string>& argv, const subprocess_result& result) {
    std::lock_guard<std::mutex> lock(mutex);
    text += "$ " + join(argv) + "\n" + result.out + result.err;
    text += "[" + result.describe() + (result.output_truncated ? ", output truncated" : "") +
            ", " + std::to_string(result.elapsed.count()) + " ms]\n\n";
  }
  void note(const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    text += line + "\n";
  }
};

struct unit_outcome {
  bool ok = false;
  bool timed_out = false;
  double ms = 0;  // all attempts together
  std::string output;  // the compiler's messages of the attempt that counts
  std::string failure;  // one line when the compiler did not simply report errors
};

class compiler_runner {
 public:
  compiler_runner(const build_settings& settings, sandbox_spec sandbox, clock_type::time_point deadline,
                  build_log& log)
      : settings_(settings), sandbox_(std::move(sandbox)), deadline_(deadline), log_(log) {}

  subprocess_result run(const std::vector<std::string>& argv) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - clock_type::now());
    if (left.count() <= 0) {
      subprocess_result expired;
      expired.timed_out = true;
      return expired;
    }
    subprocess_options options;
    options.timeout = left;
    options.max_output_bytes = static_cast<size_t>(settings_.max_output_kb) * 1024;
    options.working_dir = sandbox_.cwd;
    if (!sandbox_.bubblewrap) options.extra_env["TMPDIR"] = (sandbox_.writable / "tmp").string();
    const auto result = run_subprocess(sandboxed_command(sandbox_, argv), options);
    log_.append(argv, result);
    // bubblewrap's own failures (no user namespaces, say) are the host's, not the candidate's.
    if (sandbox_.bubblewrap && result.exited && result.exit_code == 1 &&
        result.err.rfind("bwrap: ", 0) == 0)
      throw std::runtime_error("the bwrap sandbox does not work here (" +
                               result.err.substr(0, result.err.find('\n')) +
                               "); fix it or set build.sandbox=none");
    return result;
  }

  unit_outcome compile(const compile_unit& unit) {
    unit_outcome outcome = attempt(unit.argv);
    if (!outcome.ok && !outcome.timed_out && !unit.fallback_argv.empty()) {
      log_.note("# " + unit.rel + ": failed with the slim <torch/extension.h>; again by build.cxx with the real one");
      outcome = attempt(unit.fallback_argv, outcome.ms);
    }
    if (outcome.timed_out)
      outcome.failure = unit.rel + ": compilation did not finish within the build's time limit of " +
                        std::to_string(settings_.timeout.count() / 1000) +
                        " s (build.timeout_s) and was killed";
    return outcome;
  }

 private:
  unit_outcome attempt(const std::vector<std::string>& argv, double ms_before = 0) {
    const auto result = run(argv);
    unit_outcome outcome;
    outcome.ms = ms_before + static_cast<double>(result.elapsed.count());
    outcome.ok = result.ok();
    outcome.timed_out = result.timed_out;
    outcome.output = result.out + result.err;
    return outcome;
  }

  const build_settings& settings_;
  sandbox_spec sandbox_;
  clock_type::time_point deadline_;
  build_log& log_;
};

// Links or copies a file into place; the cache and the work dir share a file system.
void place(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_hard_link(from, to, ec);
  if (ec) fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

// Publishes by rename, so readers never see a half-written file; a concurrent build that got
// there first leaves the same content.
void publish(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec && !fs::exists(to)) throw std::runtime_error("cannot publish " + to.string() + ": " + ec.message());
}

std::string unique_suffix() {
  static std::atomic<unsigned> counter{0};
  return std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

sandbox_spec make_sandbox(const build_settings& settings, const toolchain& tc,
                          const fs::path& work, const fs::path& stage) {
  sandbox_spec spec;
  spec.bubblewrap = settings.sandbox == "bwrap";
  if (spec.bubblewrap) {
    spec.bwrap = find_program(settings.bwrap);
    if (spec.bwrap.empty())
      throw std::runtime_error("build.sandbox = bwrap but '" + settings.bwrap +
                               "' was not found; install bubblewrap, set build.bwrap=PATH, "
                               "or set build.sandbox=none");
  }
  spec.read_only = tc.read_only_roots();
  // The host's library path reaches the compilers (a clang unpacked under /opt/deps finds its
  // libLLVM there), with its directories readable.
  if (const char* library_path = std::getenv("LD_LIBRARY_PATH"); library_path && *library_path) {
    spec.library_path = library_path;
    std::istringstream dirs(spec.library_path);
    for (std::string dir; std::getline(dirs, dir, ':');)
      if (!dir.empty() && fs::is_directory(dir)) spec.read_only.emplace_back(dir);
  }
  spec.writable = work;
  spec.cwd = stage;
  spec.path_dirs = {tc.cxx.parent_path(), tc.binding_cxx.parent_path()};
  if (!tc.nvcc.empty()) spec.path_dirs.push_back(tc.nvcc.parent_path());
  spec.memory_bytes = settings.memory_mb << 20;
  spec.file_bytes = settings.max_file_mb << 20;
  return spec;
}

double elapsed_ms(clock_type::time_point start) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
}

void fail_candidate(build_result& result, const std::string& diagnostics, const fs::path& log_path,
                    const std::string& log_text) {
  result.ok = false;
  result.diagnostics = diagnostics;
  result.log_path = log_path;
  write_file(log_path, log_text);
}

}  // namespace

build_settings build_settings::from(const settings& config) {
  build_settings s;
  s.cache_dir = config.get_string("build.cache_dir");
  s.jobs = static_cast<int>(config.get_int("build.jobs"));
  s.timeout = std::chrono::seconds{config.get_int("build.timeout_s")};
  s.memory_mb = config.get_int("build.memory_mb");
  s.max_file_mb = config.get_int("build.max_file_mb");
  s.max_output_kb = config.get_int("build.max_output_kb");
  s.diagnostics_chars = config.get_int("build.diagnostics_chars");
  s.sandbox = config.get_string("build.sandbox");
  s.bwrap = config.get_string("build.bwrap");
  s.cxx = config.get_string("build.cxx");
  s.binding_cxx = config.get_string("build.binding_cxx");
  s.nvcc = config.get_string("build.nvcc");
  s.kernel_flags = config.get_string("build.kernel_flags");
  s.binding_flags = config.get_string("build.binding_flags");
  s.python = config.get_string("harness.python");
  return s;
}

build_result build_solution(const build_settings& settings, const build_request& request) {
  const auto start = clock_type::now();
  const auto deadline = start + settings.timeout;
  build_result result;
  const auto finish = [&]() -> build_result {
    result.duration_ms = elapsed_ms(start);
    return result;
  };

  // --- Everything that is not the candidate's fault first. ---
  if (request.device != "cpu" && request.device != "cuda") {
    result.error = "device must be cpu or cuda, got '" + request.device + "'";
    return finish();
  }
  const bool cuda = request.device == "cuda";
  if (!fs::is_directory(request.solution_dir)) {
    result.error = "solution directory " + request.solution_dir.string() + " does not exist";
    return finish();
  }
  if (settings.sandbox == "bwrap" && find_program(settings.bwrap).empty()) {
    result.error = "build.sandbox = bwrap but '" + settings.bwrap +
                   "' was not found; install bubblewrap, set build.bwrap=PATH, or set "
                   "build.sandbox=none";
    return finish();
  }
  const toolchain* tc = nullptr;
  std::string arch = request.arch;
  try {
    tc = &probe_toolchain(settings.python, settings.cxx, settings.binding_cxx, settings.nvcc, cuda);
    if (cuda && arch.empty()) arch = detect_gpu_arch();
  } catch (const std::exception& e) {
    result.error = e.what();
    return finish();
  }
  if (cuda && (arch.rfind("sm_", 0) != 0 || arch.size() < 5)) {
    result.error = "arch must look like sm_90, got '" + arch + "'";
    return finish();
  }

  const fs::path cache = fs::absolute(settings.cache_dir);
  const fs::path log_dir = cache / "logs";
  solution_files solution;
  try {
    solution = collect_solution(request.solution_dir);
  } catch (const candidate_error& e) {
    result.diagnostics = std::string("error: ") + e.what();
    return finish();
  } catch (const std::exception& e) {
    result.error = e.what();
    return finish();
  }

  // --- The units, their digests, and the module's digest. ---
  command_builder commands{settings, *tc, cuda, arch};
  std::vector<compile_unit> units;
  std::string layout_problem;
  for (size_t index : solution.sources) {
    const auto& file = solution.files[index];
    compile_unit unit;
    unit.rel = file.rel;
    unit.kind = kind_of(file.rel);
    if (unit.kind == source_kind::cuda && !cuda) {
      layout_problem += file.rel + ": a CUDA source, but this build is for the CPU (--device cpu); "
                        "write C++ kernels in kernels/*.cpp\n";
      continue;
    }
    std::string stem = file.rel;
    std::replace(stem.begin(), stem.end(), '/', '_');
    unit.object = std::string(kObjDir) + "/" + stem + ".o";
    unit.argv = commands.compile(unit.rel, unit.kind, unit.object, true);
    const bool may_need_full_header =
        file.content.find("extension.h") != std::string::npos ||
        file.content.find("binding_registry.h") != std::string::npos ||
        solution.headers_mention_torch;
    if (may_need_full_header) unit.fallback_argv = commands.compile(unit.rel, unit.kind, unit.object, false);
    unit.key = object_key(*tc, settings.sandbox, unit, file.content, solution.headers_digest);
    units.push_back(std::move(unit));
  }
  if (units.size() == 1 && layout_problem.empty()) layout_problem += "error: no kernels/*.cpp or kernels/*.cu sources found\n";
  if (!layout_problem.empty()) {
    result.diagnostics = layout_problem;
    return finish();
  }

  std::vector<std::string> objects;
  for (const auto& unit : units) objects.push_back(unit.object);
  const std::string so_name = std::string(kModuleName) + tc->ext_suffix;
  const auto link_argv = commands.link(objects, std::string(kOutDir) + "/" + so_name);
  sha256 module_digest;
  module_digest.field("module v1").field(tc->fingerprint).field(request.device).field(arch);
  for (const auto& unit : units) module_digest.field(unit.key);
  for (const auto& word : link_argv) module_digest.field(word);
  const std::string module_key = module_digest.hex().substr(0, 32);
  const fs::path module_dir = cache / "modules" / module_key;
  result.log_path = log_dir / (module_key + ".log");

  if (fs::exists(module_dir / so_name)) {
    result.ok = true;
    result.cache_hit = true;
    result.module_path = module_dir / so_name;
    return finish();
  }

  // --- A miss: stage, compile what the object cache lacks, link, publish. ---
  const fs::path work = cache / "work" / (module_key + "-" + unique_suffix());
  const fs::path stage = work / "stage";
  build_log log;
  log.note("# cuda-agent build of " + fs::absolute(request.solution_dir).string() + " (" +
           request.device + (cuda ? " " + arch : "") + "), module " + module_key);
  try {
    for (const auto& file : solution.files) write_file(stage / file.rel, file.content);
    // One fixed mtime: clang checks it against the PCH wherever the header's path still exists.
    const fs::path slim = stage / kSlimHeader;
    write_file(slim, slim_torch_extension_h());
    fs::last_write_time(slim, fs::file_time_type{std::chrono::hours{24}});
    fs::create_directories(stage / kObjDir);
    fs::create_directories(stage / kOutDir);
    fs::create_directories(work / "tmp");
    fs::create_directories(cache / "objects");
    fs::create_directories(log_dir);
  } catch (const std::exception& e) {
    result.error = std::string("cannot stage the build: ") + e.what();
    return finish();
  }
  const auto cleanup = [&] {
    std::error_code ec;
    fs::remove_all(work, ec);
  };

  std::vector<compile_unit*> pending;
  for (auto& unit : units) {
    const fs::path cached = cache / "objects" / (unit.key + ".o");
    if (fs::exists(cached)) {
      place(cached, stage / unit.object);
      unit.cached = true;
      ++result.cached_objects;
    } else {
      pending.push_back(&unit);
    }
  }

  sandbox_spec sandbox;
  try {
    sandbox = make_sandbox(settings, *tc, work, stage);
  } catch (const std::exception& e) {
    cleanup();
    result.error = e.what();
    return finish();
  }
  compiler_runner runner(settings, sandbox, deadline, log);

  // The precompiled slim header, built once per toolchain and flags (the first build pays for
  // it), before the binding files that use it. Should it fail, they compile without it.
  const std::string staged_pch = commands.precompiled_slim_header();
  const auto pch_argv = commands.precompiled_header(kSlimHeader);
  sha256 pch_digest;
  pch_digest.field("pch v2").field(tc->fingerprint).field(settings.sandbox).field(
      slim_torch_extension_h());
  for (const auto& word : pch_argv) pch_digest.field(word);
  const fs::path pch_path = cache / "pch" / (pch_digest.hex() + fs::path(staged_pch).extension().string());
  const bool bindings_pending = std::any_of(pending.begin(), pending.end(), [](const compile_unit* u) {
    return u->kind == source_kind::binding_cpp;
  });
  if (bindings_pending) {
    try {
      if (!fs::exists(pch_path)) {
        const auto built = runner.run(pch_argv);
        result.step_ms.emplace_back("precompiled header", static_cast<double>(built.elapsed.count()));
        if (built.ok()) {
          fs::create_directories(pch_path.parent_path());
          publish(stage / staged_pch, pch_path);
        } else {
          log.note("# the precompiled slim header did not build (" + built.describe() +
                   "); compiling without it");
        }
      }
      if (fs::exists(pch_path)) {
        place(pch_path, stage / staged_pch);
      } else {
        // clang++ would fail on a missing -include-pch; the object is the same without it.
        for (auto* unit : pending) unit->argv = without_option(std::move(unit->argv), "-include-pch", 1);
      }
    } catch (const std::exception& e) {
      cleanup();
      result.error = std::string("cannot build the precompiled header: ") + e.what();
      return finish();
    }
  }

  // Independent files compile in parallel; after the first failure no new one starts.
  std::vector<unit_outcome> outcomes(pending.size());
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t workers =
      std::min<size_t>(pending.size(), settings.jobs > 0 ? static_cast<size_t>(settings.jobs) : cores);
  std::vector<std::thread> threads;
  std::mutex error_mutex;
  std::string infrastructure_error;
  for (size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (size_t i; !failed && (i = next++) < pending.size();) {
        try {
          outcomes[i] = runner.compile(*pending[i]);
        } catch (const std::exception& e) {  // the compiler could not be started at all
          std::lock_guard<std::mutex> lock(error_mutex);
          infrastructure_error = e.what();
          outcomes[i].ok = false;
        }
        if (!outcomes[i].ok) failed = true;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  result.compiled_files = static_cast<int>(std::min(next.load(), pending.size()));
  for (size_t i = 0; i < static_cast<size_t>(result.compiled_files); ++i)
    result.step_ms.emplace_back(pending[i]->rel, outcomes[i].ms);

  diagnostics_options condense;
  condense.rewrites = {{stage.string() + "/", ""}, {work.string() + "/", ""}};
  condense.max_chars = static_cast<size_t>(settings.diagnostics_chars);
  condense.full_log = result.log_path.string();

  if (!infrastructure_error.empty()) {
    cleanup();
    result.error = "cannot run the compiler: " + infrastructure_error;
    return finish();
  }
  if (failed) {
    std::string messages, failures;
    for (const auto& outcome : outcomes) {
      if (outcome.ok) continue;
      messages += outcome.output;
      if (!outcome.failure.empty()) failures += outcome.failure + "\n";
      result.timed_out = result.timed_out || outcome.timed_out;
    }
    std::string diagnostics = failures;
    if (!messages.empty()) diagnostics += condense_diagnostics(messages, condense);
    fail_candidate(result, diagnostics, result.log_path, log.text);
    cleanup();
    return finish();
  }
  for (auto* unit : pending) publish(stage / unit->object, cache / "objects" / (unit->key + ".o"));
  for (auto* unit : pending) place(cache / "objects" / (unit->key + ".o"), stage / unit->object);

  subprocess_result linked;
  try {
    linked = runner.run(link_argv);
    // Should gold itself fail where no symbol is missing, ld gets the same objects.
    if (!linked.ok() && !linked.timed_out && !tc->gold.empty() &&
        undefined_symbols(linked.out + linked.err).empty()) {
      log.note("# the link with gold failed (" + linked.describe() + "); again with ld");
      const auto first_ms = linked.elapsed;
      linked = runner.run(without_option(link_argv, "-fuse-ld=gold", 0));
      linked.elapsed += first_ms;
    }
    result.step_ms.emplace_back("link", static_cast<double>(linked.elapsed.count()));
  } catch (const std::exception& e) {
    cleanup();
    result.error = std::string("cannot run the linker: ") + e.what();
    return finish();
  }
  const std::string link_output = linked.out + linked.err;
  const auto undefined = undefined_symbols(link_output);
  if (!linked.ok() || !undefined.empty()) {
    std::string relevant;  // drop the Python C API's undefined symbols, expected in a module
    std::istringstream in(link_output);
    for (std::string line; std::getline(in, line);) {
      // ld quotes the symbol as `x', gold as 'x'.
      const auto at = line.find("undefined reference to ");
      if (at != std::string::npos &&
          (line.compare(at + 24, 2, "Py") == 0 || line.compare(at + 24, 3, "_Py") == 0))
        continue;
      relevant += line + "\n";
    }
    std::string diagnostics;
    if (linked.timed_out) {
      result.timed_out = true;
      diagnostics = "link: did not finish within the build's time limit (build.timeout_s) and was killed\n";
    }
    for (const auto& symbol : undefined)
      diagnostics += "link error: undefined symbol " + symbol +
                     " (declared and used, but no source defines it)\n";
    if (undefined.empty()) diagnostics += condense_diagnostics(relevant, condense);
    fail_candidate(result, diagnostics, result.log_path, log.text);
    cleanup();
    return finish();
  }

  try {
    fs::create_directories(cache / "modules");
    publish(stage / kOutDir, module_dir);
    write_file(result.log_path, log.text);
  } catch (const std::exception& e) {
    cleanup();
    result.error = e.what();
    return finish();
  }
  cleanup();
  result.ok = true;
  result.module_path = module_dir / so_name;
  return finish();
}

compile_result to_compile_result(const std::string& job_id, const build_result& result) {
  compile_result out;
  out.job_id = job_id;
  out.ok = result.ok;
  out.module_path = result.module_path.string();
  out.diagnostics = result.diagnostics;
  out.cache_hit = result.cache_hit;
  out.duration_ms = result.duration_ms;
  out.error = result.error;
  return out;
}

}  // namespace cuda_agent::build
