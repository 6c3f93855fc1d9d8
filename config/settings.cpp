#include "config/settings.hpp"

#include <charconv>
#include <cmath>
#include <optional>
#include <sstream>

#include <toml++/toml.h>

#ifndef CUDA_AGENT_DEFAULT_PYTHON
#define CUDA_AGENT_DEFAULT_PYTHON "python3"
#endif

namespace cuda_agent {
namespace {

const char* type_name(setting_type type) {
  switch (type) {
    case setting_type::boolean: return "a boolean (true or false)";
    case setting_type::integer: return "an integer";
    case setting_type::real: return "a number";
    case setting_type::string: return "a string";
    case setting_type::choice: return "one of the listed words";
  }
  return "?";
}

std::string join(const std::vector<std::string>& words, const char* sep) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += sep;
    out += w;
  }
  return out;
}

const setting_spec* find_spec(std::string_view key) {
  for (const auto& spec : settings::schema())
    if (spec.key == key) return &spec;
  return nullptr;
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return std::string{s.substr(first, last - first + 1)};
}

// Parses a value written as text (defaults, --set) according to its spec. The caller adds
// the key and origin to the error message.
setting_value parse_text(const setting_spec& spec, const std::string& text) {
  switch (spec.type) {
    case setting_type::boolean:
      if (text == "true") return true;
      if (text == "false") return false;
      break;
    case setting_type::integer: {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec == std::errc{} && end == text.data() + text.size() && !text.empty()) return v;
      break;
    }
    case setting_type::real: {
      if (text.empty()) break;
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (end == text.c_str() + text.size() && std::isfinite(v)) return v;
      break;
    }
    case setting_type::string:
    case setting_type::choice:
      return text;
  }
  throw config_error{"must be " + std::string{type_name(spec.type)} + ", got '" + text + "'"};
}

// A TOML value of the spec's type, or nothing when the node holds another type. Integers are
// accepted where a real number is expected, as TOML writes 1 and 1.0 differently.
std::optional<setting_value> from_toml(const setting_spec& spec, const toml::node& node) {
  switch (spec.type) {
    case setting_type::boolean:
      if (auto v = node.value_exact<bool>()) return *v;
      break;
    case setting_type::integer:
      if (auto v = node.value_exact<int64_t>()) return *v;
      break;
    case setting_type::real:
      if (node.is_floating_point() || node.is_integer()) return *node.value<double>();
      break;
    case setting_type::string:
    case setting_type::choice:
      if (auto v = node.value_exact<std::string>()) return *v;
      break;
  }
  return std::nullopt;
}

}  // namespace

const std::vector<setting_spec>& settings::schema() {
  using T = setting_type;
  static const std::vector<setting_spec> specs = {
      {"logging.level", T::choice, "info", {"trace", "debug", "info", "warn", "error", "off"}, 0, 0,
       "Lowest severity of diagnostic lines written to standard error."},
      {"log.dir", T::string, "runs/log", {}, 0, 0,
       "Directory of the message log: the segment files every run appends to."},
      {"log.segment_bytes", T::integer, "67108864", {}, 4096, int64_t{1} << 40,
       "A new segment file is started when a record would grow the current one past this size."},
      {"log.fsync", T::choice, "interval", {"never", "interval", "always"}, 0, 0,
       "When appended records are forced to stable storage: never (the kernel decides), interval "
       "(at most log.fsync_interval_ms apart) or always (after every record)."},
      {"log.fsync_interval_ms", T::integer, "1000", {}, 1, 3600000,
       "Longest time between two forced writes when log.fsync = interval."},
      {"actors.scheduler_threads", T::integer, "0", {}, 0, 1024,
       "Worker threads of the actor scheduler; 0 means one per core."},
      {"harness.python", T::string, CUDA_AGENT_DEFAULT_PYTHON, {}, 0, 0,
       "Python interpreter, with torch 2.11.0, that runs the locked harness and reference models; "
       "defaults to the one the build took LibTorch from."},
      {"corpus.dir", T::string, "", {}, 0, 0,
       "The corpus/ folder (task sets, demonstrations, the cuda_agent_corpus package); empty "
       "means the source tree the binary was built from."},
      {"corpus.timeout_s", T::integer, "86400", {}, 1, int64_t{30} * 86400,
       "Longest a `cuda-agent corpus` validate, import or synth run may take before it is killed."},
      {"episode.max_turns", T::integer, "200", {}, 1, 100000,
       "Policy turns an episode may take before it ends with turn_budget (the paper: 150 in "
       "training, 200 in evaluation)."},
      {"episode.context_tokens", T::integer, "131072", {}, 1024, 100000000,
       "Context budget in tokens; an episode whose conversation reaches it ends with token_budget."},
      {"episode.wall_clock_s", T::integer, "7200", {}, 1, 604800,
       "Wall-clock budget of one episode, tools and builds included; then it ends with timeout."},
      {"episode.max_tokens_per_turn", T::integer, "8192", {}, 1, 1000000,
       "Completion tokens the policy may produce in one turn."},
      {"episode.temperature", T::real, "1.0", {}, 0, 0, "Sampling temperature asked of the policy."},
      {"episode.top_p", T::real, "1.0", {}, 0, 0, "Nucleus sampling threshold asked of the policy."},
      {"episode.policy_timeout_s", T::integer, "600", {}, 1, 86400,
       "Longest wait for one policy answer before the episode fails as an infrastructure failure."},
      {"episode.job_timeout_s", T::integer, "1800", {}, 1, 86400,
       "Longest wait for a build, verify, profile or final evaluation, queueing included."},
      {"rollout.concurrency", T::integer, "4", {}, 1, 100000, "Episodes that run at the same time."},
      {"rollout.retries", T::integer, "2", {}, 0, 100,
       "Times an episode is retried after an infrastructure failure (never after a candidate's)."},
      {"rollout.runs_dir", T::string, "runs", {}, 0, 0,
       "Where episode workdirs are created (runs_dir/<run>/episodes/<episode>)."},
      {"rollout.compiler_workers", T::integer, "2", {}, 1, 1024, "Builds that run at the same time."},
      {"rollout.gpu_slots", T::integer, "1", {}, 1, 1024,
       "Harness workers (one job each) on this node: one per GPU, or per CPU evaluator."},
      {"rollout.max_waiting_jobs", T::integer, "256", {}, 1, 1000000,
       "Jobs that may wait for a compiler worker or a GPU slot before new ones are rejected."},
      {"build.cache_dir", T::string, "runs/build-cache", {}, 0, 0,
       "Directory of the kernel build cache: object files, built modules and full compiler logs."},
      {"build.jobs", T::integer, "0", {}, 0, 256,
       "Compiler processes one build runs at once; 0 means one per core."},
      {"build.timeout_s", T::integer, "300", {}, 1, 86400,
       "Wall-clock limit of one build; a compiler still running then is killed and reported."},
      {"build.memory_mb", T::integer, "16384", {}, 256, 1048576,
       "Address-space limit of every compiler process, in MiB."},
      {"build.max_file_mb", T::integer, "2048", {}, 1, 1048576,
       "Largest file a compiler process may write, in MiB."},
      {"build.max_output_kb", T::integer, "1024", {}, 1, 1048576,
       "Compiler output kept per stream and process, in KiB; the rest is dropped."},
      {"build.diagnostics_chars", T::integer, "4000", {}, 200, 1000000,
       "Longest condensed diagnostics handed to the agent; the full log stays on disk."},
      {"build.sandbox", T::choice, "bwrap", {"bwrap", "none"}, 0, 0,
       "Isolation of compiler processes: bwrap (no network, read-only toolchain, writable build "
       "dir only) or none."},
      {"build.bwrap", T::string, "bwrap", {}, 0, 0,
       "The bubblewrap program used when build.sandbox = bwrap."},
      {"build.cxx", T::string, "g++", {}, 0, 0, "Host C++ compiler."},
      {"build.nvcc", T::string, "", {}, 0, 0,
       "CUDA compiler; empty: $CUDA_HOME/bin/nvcc, else /usr/local/cuda/bin/nvcc."},
      {"build.kernel_flags", T::string, "-O3", {}, 0, 0,
       "Optimisation flags of kernel sources (kernels/*.cpp, host compiler, and kernels/*.cu)."},
      {"build.binding_flags", T::string, "-O0", {}, 0, 0,
       "Optimisation flags of binding sources (binding.cpp, kernels/*_binding.cpp): they only "
       "marshal arguments."},
  };
  return specs;
}

settings::settings() {
  for (const auto& spec : schema()) assign(spec, parse_text(spec, spec.default_value), "default");
}

void settings::assign(const setting_spec& spec, setting_value value, std::string origin) {
  if (spec.type == setting_type::integer) {
    const auto v = std::get<int64_t>(value);
    if (v < spec.min || v > spec.max)
      throw config_error{"setting '" + spec.key + "' (" + origin + ") must be between " +
                         std::to_string(spec.min) + " and " + std::to_string(spec.max) + ", got " +
                         std::to_string(v)};
  }
  if (spec.type == setting_type::choice) {
    const auto& v = std::get<std::string>(value);
    bool known = false;
    for (const auto& c : spec.choices) known = known || c == v;
    if (!known)
      throw config_error{"setting '" + spec.key + "' (" + origin + ") must be one of " +
                         join(spec.choices, ", ") + ", got '" + v + "'"};
  }
  values_[spec.key] = entry{std::move(value), std::move(origin)};
}

void settings::load_file(const std::filesystem::path& path) {
  const std::string origin = path.string();
  toml::table doc;
  try {
    doc = toml::parse_file(origin);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw config_error{origin + ":" + std::to_string(where.line) + ": " +
                       std::string{e.description()}};
  }
  for (const auto& [section_key, section_node] : doc) {
    const std::string section{section_key.str()};
    const auto* section_table = section_node.as_table();
    if (!section_table)
      throw config_error{origin + ": '" + section +
                         "' must be a [section] holding keys; see config/README.md"};
    for (const auto& [name_key, node] : *section_table) {
      const std::string key = section + "." + std::string{name_key.str()};
      const auto line = std::to_string(node.source().begin.line);
      const auto* spec = find_spec(key);
      if (!spec)
        throw config_error{origin + ":" + line + ": unknown setting '" + key +
                           "'; `cuda-agent config schema` lists the known ones"};
      auto value = from_toml(*spec, node);
      if (!value)
        throw config_error{origin + ":" + line + ": setting '" + key + "' must be " +
                           type_name(spec->type)};
      assign(*spec, std::move(*value), origin + ":" + line);
    }
  }
}

void settings::apply_override(std::string_view assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string_view::npos)
    throw config_error{"--set '" + std::string{assignment} + "' must have the form KEY=VALUE"};
  const std::string key = trim(assignment.substr(0, eq));
  const std::string text = trim(assignment.substr(eq + 1));
  const auto* spec = find_spec(key);
  if (!spec)
    throw config_error{"--set: unknown setting '" + key +
                       "'; `cuda-agent config schema` lists the known ones"};
  try {
    assign(*spec, parse_text(*spec, text), "--set");
  } catch (const config_error& e) {
    if (std::string_view{e.what()}.rfind("setting '", 0) == 0) throw;
    throw config_error{"--set: setting '" + key + "' " + e.what()};
  }
}

const settings::entry& settings::find(std::string_view key, setting_type type) const {
  const auto* spec = find_spec(key);
  const auto it = values_.find(key);
  if (!spec || it == values_.end())
    throw std::logic_error{"settings: '" + std::string{key} + "' is not in the schema"};
  const bool text = type == setting_type::string || type == setting_type::choice;
  const bool spec_text = spec->type == setting_type::string || spec->type == setting_type::choice;
  if (spec->type != type && !(text && spec_text))
    throw std::logic_error{"settings: '" + std::string{key} + "' read as the wrong type"};
  return it->second;
}

bool settings::get_bool(std::string_view key) const {
  return std::get<bool>(find(key, setting_type::boolean).value);
}
int64_t settings::get_int(std::string_view key) const {
  return std::get<int64_t>(find(key, setting_type::integer).value);
}
double settings::get_real(std::string_view key) const {
  return std::get<double>(find(key, setting_type::real).value);
}
const std::string& settings::get_string(std::string_view key) const {
  return std::get<std::string>(find(key, setting_type::string).value);
}

std::string settings::to_toml() const {
  std::ostringstream out;
  std::string section;
  for (const auto& spec : schema()) {
    const auto dot = spec.key.find('.');
    const auto this_section = spec.key.substr(0, dot);
    if (this_section != section) {
      out << (section.empty() ? "" : "\n") << "[" << this_section << "]\n";
      section = this_section;
    }
    const auto& e = values_.at(spec.key);
    out << spec.key.substr(dot + 1) << " = ";
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>) out << (v ? "true" : "false");
          else if constexpr (std::is_same_v<V, std::string>) out << toml::value<std::string>{v};
          else out << v;
        },
        e.value);
    out << "  # " << e.origin << "\n";
  }
  return out.str();
}

}  // namespace cuda_agent
