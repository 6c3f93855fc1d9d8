#include "kernels/build/toolchain.hpp"

#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <unistd.h>

#include "actors/process/subprocess.hpp"
#include "kernels/build/sha256.hpp"

namespace cuda_agent::build {
namespace fs = std::filesystem;
namespace {

// find_spec locates torch without importing it (an import costs seconds); the version comes
// from torch/version.py, read as text.
constexpr const char* kProbeScript = R"py(
import importlib.util, re, sysconfig, os
spec = importlib.util.find_spec("torch")
if spec is None or not spec.submodule_search_locations:
    raise SystemExit("no torch package")
torch_dir = os.path.realpath(list(spec.submodule_search_locations)[0])
text = open(os.path.join(torch_dir, "version.py")).read()
version = re.search(r"__version__\s*(?::\s*str)?\s*=\s*'([^']*)'", text)
cuda = re.search(r"^cuda\s*(?::[^=]*)?=\s*'([^']*)'", text, re.M)
print("torch_dir=" + torch_dir)
print("torch_version=" + (version.group(1) if version else ""))
print("torch_cuda=" + (cuda.group(1) if cuda else ""))
print("python_include=" + sysconfig.get_path("include", scheme="posix_prefix"))
print("ext_suffix=" + sysconfig.get_config_var("EXT_SUFFIX"))
)py";

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::map<std::string, std::string> parse_lines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

std::string version_of(const fs::path& program) {
  subprocess_options options;
  options.timeout = std::chrono::seconds{30};
  const auto result = run_subprocess({program.string(), "--version"}, options);
  if (!result.ok())
    throw std::runtime_error(program.string() + " --version failed: " + result.describe());
  // nvcc prints several lines; the last names the release.
  std::string text = result.out;
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return program.filename() == "nvcc" ? text.substr(text.rfind('\n') + 1) : first_line(text);
}

// Whether `compiler` runs here and finds the standard library and its own headers (<cstddef>
// needs both; 60 ms): a clang unpacked without its libraries is passed over by "auto" instead of
// failing builds.
bool compiles_cxx17(const fs::path& compiler) {
  subprocess_options options;
  options.timeout = std::chrono::seconds{30};
  options.stdin_data = "#include <cstddef>\n";
  try {
    return run_subprocess({compiler.string(), "-std=c++17", "-fsyntax-only", "-x", "c++", "-"},
                          options)
        .ok();
  } catch (const std::exception&) {
    return false;
  }
}

toolchain probe(const std::string& python, const std::string& cxx, const std::string& binding_cxx,
                const std::string& nvcc, bool cuda) {
  toolchain tc;
  tc.python = python;
  subprocess_options options;
  options.timeout = std::chrono::seconds{60};
  subprocess_result result;
  try {
    result = run_subprocess({python, "-c", kProbeScript}, options);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot run the harness python '" + python + "' (" + e.what() +
                             "); set harness.python");
  }
  if (!result.ok())
    throw std::runtime_error("harness python '" + python + "' has no usable torch (" +
                             first_line(result.err + result.out) + "); set harness.python");
  auto values = parse_lines(result.out);
  tc.torch_dir = values["torch_dir"];
  tc.site_packages = tc.torch_dir.parent_path();
  tc.torch_version = values["torch_version"];
  tc.torch_cuda = values["torch_cuda"];
  tc.python_include = values["python_include"];
  tc.ext_suffix = values["ext_suffix"];
  if (tc.ext_suffix.empty()) throw std::runtime_error("python '" + python + "' has no EXT_SUFFIX");

  tc.cxx = find_program(cxx);
  if (tc.cxx.empty()) throw std::runtime_error("host compiler '" + cxx + "' not found; set build.cxx");
  tc.cxx_version = version_of(tc.cxx);

  if (binding_cxx == "auto") {
    tc.binding_cxx = find_program("clang++");
    if (!tc.binding_cxx.empty() && !compiles_cxx17(tc.binding_cxx)) tc.binding_cxx.clear();
    if (tc.binding_cxx.empty()) tc.binding_cxx = tc.cxx;
  } else {
    tc.binding_cxx = find_program(binding_cxx);
    if (tc.binding_cxx.empty())
      throw std::runtime_error("binding compiler '" + binding_cxx +
                               "' not found; install it or set build.binding_cxx=auto");
  }
  tc.binding_cxx_version = tc.binding_cxx == tc.cxx ? tc.cxx_version : version_of(tc.binding_cxx);
  tc.binding_cxx_is_clang = tc.binding_cxx_version.find("clang") != std::string::npos;
  tc.gold = find_program("ld.gold");

  if (cuda) {
    std::string nvcc_name = nvcc;
    if (nvcc_name.empty()) {
      const char* home = std::getenv("CUDA_HOME");
      nvcc_name = home && *home ? std::string(home) + "/bin/nvcc" : "/usr/local/cuda/bin/nvcc";
    }
    tc.nvcc = find_program(nvcc_name);
    if (tc.nvcc.empty())
      throw std::runtime_error("CUDA compiler '" + nvcc_name + "' not found; set build.nvcc");
    tc.nvcc = fs::weakly_canonical(tc.nvcc);
    tc.cuda_home = tc.nvcc.parent_path().parent_path();
    tc.nvcc_version = version_of(tc.nvcc);
    if (tc.torch_cuda.empty())
      throw std::runtime_error("torch " + tc.torch_version + " of '" + python +
                               "' is a CPU build; a CUDA build needs a CUDA torch");
  }

  sha256 digest;
  for (const auto& part : {tc.torch_dir.string(), tc.torch_version, tc.torch_cuda,
                           tc.python_include.string(), tc.ext_suffix, tc.cxx.string(),
                           tc.cxx_version, tc.binding_cxx.string(), tc.binding_cxx_version,
                           tc.gold.string(), tc.nvcc.string(), tc.nvcc_version})
    digest.field(part);
  tc.fingerprint = digest.hex();
  return tc;
}

}  // namespace

fs::path toolchain::cuda_lib() const {
  for (const char* sub : {"lib64", "targets/x86_64-linux/lib", "lib"})
    if (fs::exists(cuda_home / sub / "libcudart.so")) return cuda_home / sub;
  return cuda_home / "lib64";
}

std::vector<fs::path> toolchain::read_only_roots() const {
  std::vector<fs::path> roots{site_packages, python_include, cxx.parent_path(),
                             binding_cxx.parent_path()};
  // clang finds its own headers beside its real binary (llvm-14/bin/../lib/clang/14.0.6), which
  // may lie outside /usr where it was unpacked from a .deb.
  std::error_code ec;
  const fs::path real_binding_cxx = fs::canonical(binding_cxx, ec);
  if (!ec && binding_cxx_is_clang) roots.push_back(real_binding_cxx.parent_path().parent_path());
  if (!cuda_home.empty()) roots.push_back(cuda_home);
  return roots;
}

const toolchain& probe_toolchain(const std::string& python, const std::string& cxx,
                                 const std::string& binding_cxx, const std::string& nvcc,
                                 bool cuda) {
  static std::mutex mutex;
  static std::map<std::tuple<std::string, std::string, std::string, std::string, bool>, toolchain>
      probed;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(python, cxx, binding_cxx, nvcc, cuda);
  auto it = probed.find(key);
  if (it == probed.end())
    it = probed.emplace(key, probe(python, cxx, binding_cxx, nvcc, cuda)).first;
  return it->second;
}

std::string detect_gpu_arch() {
  subprocess_options options;
  options.timeout = std::chrono::seconds{30};
  subprocess_result result;
  try {
    result = run_subprocess(
        {"nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"}, options);
  } catch (const std::exception&) {
    throw std::runtime_error("no GPU found (nvidia-smi is missing); pass --arch sm_XX");
  }
  const std::string line = first_line(result.out);
  const auto dot = line.find('.');
  if (!result.ok() || dot == std::string::npos)
    throw std::runtime_error("no GPU found (nvidia-smi: " + first_line(result.err + result.out) +
                             "); pass --arch sm_XX");
  return "sm_" + line.substr(0, dot) + line.substr(dot + 1);
}

fs::path find_program(const std::string& name) {
  if (name.empty()) return {};
  if (name.find('/') != std::string::npos)
    return ::access(name.c_str(), X_OK) == 0 ? fs::absolute(name) : fs::path{};
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return fs::absolute(candidate);
  }
  return {};
}

std::vector<std::string> link_library(const std::string& name, const std::vector<fs::path>& dirs) {
  const std::string plain = "lib" + name + ".so";
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (fs::exists(dir / plain, ec)) return {"-L" + dir.string(), "-l" + name};
    std::string best;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string file = it->path().filename().string();
      if (file.rfind(plain + ".", 0) == 0 && file > best) best = file;
    }
    if (!best.empty())
      return {"-L" + dir.string(), "-l:" + best, "-Wl,-rpath," + dir.string()};
  }
  return {};
}

}  // namespace cuda_agent::build
