#include "actors/learner/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include <ATen/Context.h>

#include "actors/message_log/crc32c.hpp"
#include "actors/message_log/file_io.hpp"
#include "actors/model/safetensors.hpp"

namespace cuda_agent::learner {
namespace {

namespace fs = std::filesystem;

constexpr const char* kStepPrefix = "step-";
constexpr const char* kPartialPrefix = ".partial-";  // interrupted writes and replaced ones
constexpr const char* kManifest = "manifest.json";
constexpr const char* kComplete = "COMPLETE";
constexpr const char* kRng = "rng.safetensors";
constexpr const char* kState = "state.json";
constexpr const char* kExportMarker = ".cuda-agent-export";
constexpr int kFormat = 1;

// The first line of an exception's message; LibTorch's carry a backtrace after it.
std::string first_line(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = torch_error != nullptr ? torch_error->what_without_backtrace() : e.what();
  return text.substr(0, text.find('\n'));
}

void check_name(const std::string& kind, const std::string& name) {
  const bool ok = !name.empty() && name[0] != '.' && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
  if (!ok) {
    throw learner_error("checkpoint " + kind + " name '" + name +
                        "' is not usable as a file name; use letters, digits, '_', '-' and '.'");
  }
}

std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "%s%012lld", kStepPrefix, static_cast<long long>(step));
  return name;
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

struct file_digest {
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

file_digest digest_file(const fs::path& path) {
  message_log::unique_fd fd = message_log::open_file(path, O_RDONLY);
  std::string buffer(size_t{1} << 20, '\0');
  file_digest digest;
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw learner_error("cannot read " + path.string() + ": " + std::strerror(errno));
    if (n == 0) return digest;
    digest.crc32c = message_log::crc32c_extend(digest.crc32c, buffer.data(), static_cast<size_t>(n));
    digest.bytes += static_cast<uint64_t>(n);
  }
}

void sync_file(const fs::path& path) {
  message_log::unique_fd fd = message_log::open_file(path, O_RDONLY);
  message_log::sync_data(fd.get(), path);
}

void write_file(const fs::path& path, const std::string& bytes) {
  message_log::unique_fd fd = message_log::open_file(path, O_WRONLY | O_CREAT | O_TRUNC);
  message_log::write_all(fd.get(), bytes, path);
  message_log::sync_data(fd.get(), path);
}

std::string read_small_file(const fs::path& path) {
  message_log::unique_fd fd = message_log::open_file(path, O_RDONLY);
  std::string bytes(message_log::file_size(fd.get(), path), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::pread(fd.get(), bytes.data() + done, bytes.size() - done, off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw learner_error("cannot read " + path.string() + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return bytes;
}

// Every regular file under `dir` and every directory, then `dir` itself, made durable.
void sync_tree(const fs::path& dir) {
  for (const auto& item : fs::recursive_directory_iterator(dir)) {
    if (item.is_regular_file()) sync_file(item.path());
  }
  for (const auto& item : fs::recursive_directory_iterator(dir)) {
    if (item.is_directory()) message_log::sync_directory(item.path());
  }
  message_log::sync_directory(dir);
}

// Renames the finished directory `from` to `to`. An existing non-empty `to` is swapped with
// `from` in one step (renameat2 RENAME_EXCHANGE), so that a reader sees the old or the new one
// and never neither; the old one then lies under `from` and is removed.
void move_into_place(const fs::path& from, const fs::path& to) {
  if (!fs::exists(to) || fs::is_empty(to)) {
    fs::rename(from, to);
  } else {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0) {
      throw learner_error("cannot swap " + from.string() + " with " + to.string() + ": " +
                          std::strerror(errno) + " (the file system needs renameat2 RENAME_EXCHANGE)");
    }
    message_log::sync_directory(to.parent_path());
    fs::remove_all(from);
  }
  message_log::sync_directory(to.parent_path());
}

// The manifest and marker of a directory whose data files are written and synced.
void seal(const fs::path& dir, int64_t step) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& item : fs::directory_iterator(dir)) {
    const file_digest digest = digest_file(item.path());
    files[item.path().filename().string()] = {{"bytes", digest.bytes}, {"crc32c", digest.crc32c}};
  }
  const std::string manifest =
      nlohmann::json{{"format", kFormat}, {"step", step}, {"files", files}}.dump(1) + "\n";
  write_file(dir / kManifest, manifest);
  const nlohmann::json marker{{"manifest_bytes", manifest.size()},
                              {"manifest_crc32c", message_log::crc32c(manifest)}};
  write_file(dir / kComplete, marker.dump() + "\n");
  message_log::sync_directory(dir);
}

// The manifest of `dir` after checking it against the marker and each file's size (and, with
// `checksums`, its CRC-32C). Throws learner_error naming what does not match.
nlohmann::json verified_manifest(const fs::path& dir, bool checksums) {
  if (!fs::exists(dir / kComplete)) {
    throw learner_error(dir.string() + ": no " + kComplete +
                        " marker, so the checkpoint was never finished; delete it");
  }
  const nlohmann::json marker = nlohmann::json::parse(read_small_file(dir / kComplete));
  const std::string manifest_text = read_small_file(dir / kManifest);
  if (manifest_text.size() != marker.at("manifest_bytes").get<uint64_t>() ||
      message_log::crc32c(manifest_text) != marker.at("manifest_crc32c").get<uint32_t>()) {
    throw learner_error((dir / kManifest).string() +
                        ": does not match the COMPLETE marker (damaged); delete the checkpoint");
  }
  nlohmann::json manifest = nlohmann::json::parse(manifest_text);
  if (manifest.at("format").get<int>() != kFormat) {
    throw learner_error(dir.string() + ": checkpoint format " + manifest.at("format").dump() +
                        " is not the format " + std::to_string(kFormat) + " this build reads");
  }
  for (const auto& [name, expected] : manifest.at("files").items()) {
    const fs::path path = dir / name;
    if (!fs::exists(path)) {
      throw learner_error(path.string() + ": missing from the checkpoint; delete the checkpoint");
    }
    const uint64_t bytes = expected.at("bytes").get<uint64_t>();
    if (fs::file_size(path) != bytes) {
      throw learner_error(path.string() + ": " + std::to_string(fs::file_size(path)) +
                          " bytes where the manifest says " + std::to_string(bytes) +
                          " (torn or damaged); delete the checkpoint");
    }
    if (checksums && digest_file(path).crc32c != expected.at("crc32c").get<uint32_t>()) {
      throw learner_error(path.string() +
                          ": CRC-32C does not match the manifest (damaged); delete the checkpoint");
    }
  }
  return manifest;
}

bool is_complete(const fs::path& dir) {
  try {
    verified_manifest(dir, /*checksums=*/false);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::vector<at::Generator> torch_generators() {
  std::vector<at::Generator> generators{at::globalContext().defaultGenerator(at::kCPU)};
  // Untested here: the build hosts have no GPU.
  if (torch::cuda::is_available()) {
    const auto devices = static_cast<int>(torch::cuda::device_count());
    for (int i = 0; i < devices; ++i) {
      generators.push_back(at::globalContext().defaultGenerator(at::Device(at::kCUDA, i)));
    }
  }
  return generators;
}

std::string generator_name(size_t index) {
  return index == 0 ? "cpu" : "cuda." + std::to_string(index - 1);
}

void check_contents(const checkpoint_contents& contents) {
  for (const auto& [name, tensors] : contents.tensor_sets) check_name("tensor set", name);
  for (const auto& [name, optimizer] : contents.optimizers) check_name("optimizer", name);
  for (const auto& [name, engine] : contents.engines) check_name("engine", name);
}

void write_parts(const fs::path& dir, int64_t step, const checkpoint_contents& contents) {
  for (const auto& [name, tensors] : contents.tensor_sets) {
    const fs::path path = dir / ("tensors." + name + ".safetensors");
    if (fs::exists(path)) throw learner_error("checkpoint tensor set '" + name + "' named twice");
    model::write_safetensors(path, tensors);
  }
  for (const auto& [name, optimizer] : contents.optimizers) {
    const fs::path path = dir / ("optimizer." + name + ".pt");
    if (fs::exists(path)) throw learner_error("checkpoint optimizer '" + name + "' named twice");
    torch::serialize::OutputArchive archive;
    optimizer->save(archive);
    archive.save_to(path.string());
  }
  if (contents.torch_generators) {
    named_tensors states;
    auto generators = torch_generators();
    for (size_t i = 0; i < generators.size(); ++i) {
      std::lock_guard<std::mutex> lock(generators[i].mutex());
      states.emplace_back(generator_name(i), generators[i].get_state());
    }
    model::write_safetensors(dir / kRng, states);
  }
  nlohmann::json engines = nlohmann::json::object();
  for (const auto& [name, engine] : contents.engines) {
    if (engines.contains(name)) throw learner_error("checkpoint engine '" + name + "' named twice");
    std::ostringstream text;
    text << *engine;
    engines[name] = text.str();
  }
  const nlohmann::json state{{"step", step}, {"state", contents.state}, {"engines", engines}};
  write_file(dir / kState, state.dump(1) + "\n");
  sync_tree(dir);
}

// Removes leftovers of interrupted writes, step directories that are not complete, and all but
// the newest `keep` complete checkpoints.
void prune(const fs::path& root, int keep) {
  std::vector<std::pair<int64_t, fs::path>> complete;
  bool removed = false;
  for (const auto& item : fs::directory_iterator(root)) {
    const std::string name = item.path().filename().string();
    const auto step = checkpoint_step(item.path());
    if (starts_with(name, kPartialPrefix) || (step && !is_complete(item.path()))) {
      fs::remove_all(item.path());
      removed = true;
    } else if (step) {
      complete.emplace_back(*step, item.path());
    }
  }
  std::sort(complete.begin(), complete.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < complete.size(); ++i) {
    fs::remove_all(complete[i].second);
    removed = true;
  }
  if (removed) message_log::sync_directory(root);
}

struct tensor_set_file {
  std::unique_ptr<model::safetensors_file> file;
  named_tensors* targets = nullptr;
};

// Opens the set's file and checks that it holds exactly the caller's tensors, shapes and dtypes.
tensor_set_file open_tensor_set(const fs::path& dir, const std::string& set, named_tensors& targets) {
  const fs::path path = dir / ("tensors." + set + ".safetensors");
  if (!fs::exists(path)) {
    throw learner_error(dir.string() + ": no tensor set '" + set + "' in the checkpoint");
  }
  tensor_set_file out{std::make_unique<model::safetensors_file>(path), &targets};
  const auto& written = out.file->tensors();
  std::map<std::string, bool> named;
  for (const auto& [name, tensor] : targets) {
    const auto it = written.find(name);
    if (it == written.end()) {
      throw learner_error(path.string() + ": no tensor '" + name + "'; the checkpoint is of another model");
    }
    const std::vector<int64_t> shape = tensor.sizes().vec();
    if (it->second.shape != shape || it->second.dtype != model::safetensors_dtype(tensor.scalar_type())) {
      throw learner_error(path.string() + ": tensor '" + name + "' is " + it->second.dtype + " " +
                          nlohmann::json(it->second.shape).dump() + " in the checkpoint but " +
                          model::safetensors_dtype(tensor.scalar_type()) + " " +
                          nlohmann::json(shape).dump() + " here; the checkpoint is of another model");
    }
    named[name] = true;
  }
  for (const auto& [name, entry] : written) {
    if (named.count(name) == 0) {
      throw learner_error(path.string() + ": holds tensor '" + name + "' that set '" + set +
                          "' has not; the checkpoint is of another model");
    }
  }
  return out;
}

void read_parts(const fs::path& dir, const nlohmann::json& manifest, checkpoint_contents& contents) {
  // Everything is opened and checked first; the caller's objects change only after that.
  std::vector<tensor_set_file> sets;
  for (auto& [name, tensors] : contents.tensor_sets) sets.push_back(open_tensor_set(dir, name, tensors));
  std::vector<torch::serialize::InputArchive> archives(contents.optimizers.size());
  for (size_t i = 0; i < contents.optimizers.size(); ++i) {
    const fs::path path = dir / ("optimizer." + contents.optimizers[i].first + ".pt");
    if (!fs::exists(path)) {
      throw learner_error(dir.string() + ": no optimizer '" + contents.optimizers[i].first +
                          "' in the checkpoint");
    }
    archives[i].load_from(path.string());
  }
  size_t written_sets = 0;
  size_t written_optimizers = 0;
  for (const auto& [name, digest] : manifest.at("files").items()) {
    written_sets += starts_with(name, "tensors.");
    written_optimizers += starts_with(name, "optimizer.");
  }
  if (written_sets != sets.size() || written_optimizers != archives.size()) {
    throw learner_error(dir.string() + ": holds " + std::to_string(written_sets) + " tensor sets and " +
                        std::to_string(written_optimizers) + " optimizers where the learner has " +
                        std::to_string(sets.size()) + " and " + std::to_string(archives.size()) +
                        "; the checkpoint is of another setup");
  }
  named_tensors generator_states;
  std::vector<at::Generator> generators;
  if (contents.torch_generators) {
    if (!fs::exists(dir / kRng)) throw learner_error(dir.string() + ": no generator states in the checkpoint");
    const model::safetensors_file rng(dir / kRng);
    generators = torch_generators();
    if (rng.tensors().size() != generators.size()) {
      throw learner_error((dir / kRng).string() + ": holds " + std::to_string(rng.tensors().size()) +
                          " generator states (CPU and CUDA devices) where this process has " +
                          std::to_string(generators.size()) + "; resume on as many GPUs");
    }
    for (size_t i = 0; i < generators.size(); ++i) {
      if (rng.tensors().count(generator_name(i)) == 0) {
        throw learner_error((dir / kRng).string() + ": no state for generator " + generator_name(i));
      }
      generator_states.emplace_back(generator_name(i), rng.load(generator_name(i), torch::kCPU, torch::kUInt8));
    }
  }
  const nlohmann::json state = nlohmann::json::parse(read_small_file(dir / kState));
  const nlohmann::json& engines = state.at("engines");
  std::vector<std::mt19937_64> engine_states;
  for (const auto& [name, engine] : contents.engines) {
    if (!engines.contains(name)) throw learner_error(dir.string() + ": no engine '" + name + "' in the checkpoint");
    std::istringstream text(engines.at(name).get<std::string>());
    engine_states.emplace_back();
    if (!(text >> engine_states.back())) {
      throw learner_error((dir / kState).string() + ": engine '" + name + "' is not a std::mt19937_64 state");
    }
  }

  {
    torch::NoGradGuard no_grad;
    for (auto& set : sets) {
      for (auto& [name, tensor] : *set.targets) {
        tensor.copy_(set.file->load(name, tensor.device(), tensor.scalar_type()));
      }
    }
  }
  for (size_t i = 0; i < archives.size(); ++i) contents.optimizers[i].second->load(archives[i]);
  for (size_t i = 0; i < generators.size(); ++i) {
    std::lock_guard<std::mutex> lock(generators[i].mutex());
    generators[i].set_state(generator_states[i].second);
  }
  for (size_t i = 0; i < engine_states.size(); ++i) *contents.engines[i].second = engine_states[i];
  contents.state = state.at("state");
}

}  // namespace

std::optional<int64_t> checkpoint_step(const fs::path& dir) {
  const std::string name = dir.filename().string();
  const size_t prefix = std::strlen(kStepPrefix);
  if (name.size() != prefix + 12 || !starts_with(name, kStepPrefix)) return std::nullopt;
  if (!std::all_of(name.begin() + long(prefix), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoll(name.substr(prefix));
}

std::vector<fs::path> complete_checkpoints(const fs::path& root) {
  std::vector<std::pair<int64_t, fs::path>> found;
  if (!fs::is_directory(root)) return {};
  for (const auto& item : fs::directory_iterator(root)) {
    const auto step = checkpoint_step(item.path());
    if (step && item.is_directory() && is_complete(item.path())) found.emplace_back(*step, item.path());
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

std::optional<fs::path> latest_checkpoint(const fs::path& root) {
  auto all = complete_checkpoints(root);
  if (all.empty()) return std::nullopt;
  return all.back();
}

void write_checkpoint(const fs::path& root, int64_t step, const checkpoint_contents& contents, int keep) {
  if (keep < 1) throw learner_error("checkpoint keep is " + std::to_string(keep) + "; keep at least 1");
  if (step < 0) throw learner_error("checkpoint step " + std::to_string(step) + " is negative");
  check_contents(contents);
  const fs::path target = root / step_name(step);
  const fs::path partial = root / (kPartialPrefix + step_name(step) + "-" + std::to_string(::getpid()));
  try {
    fs::create_directories(root);
    fs::remove_all(partial);
    fs::create_directory(partial);
    write_parts(partial, step, contents);
    seal(partial, step);
    move_into_place(partial, target);
    prune(root, keep);
  } catch (const std::exception& e) {
    std::error_code ignored;  // the next write removes what is left
    fs::remove_all(partial, ignored);
    if (dynamic_cast<const learner_error*>(&e) != nullptr) throw;
    throw learner_error("cannot write checkpoint " + target.string() + ": " + first_line(e));
  }
}

void read_checkpoint(const fs::path& dir, checkpoint_contents& contents) {
  check_contents(contents);
  try {
    const nlohmann::json manifest = verified_manifest(dir, /*checksums=*/true);
    read_parts(dir, manifest, contents);
  } catch (const learner_error&) {
    throw;
  } catch (const std::exception& e) {
    throw learner_error("cannot read checkpoint " + dir.string() + ": " + first_line(e) +
                        "; delete it to resume from an earlier one");
  }
}

void export_hugging_face(const model::transformer& actor, const fs::path& tokenizer_dir, const fs::path& out) {
  fs::path target = fs::absolute(out).lexically_normal();
  if (target.filename().empty()) target = target.parent_path();
  if (fs::exists(target)) {
    if (!fs::is_directory(target)) {
      throw learner_error("export target " + target.string() + " is a file; choose a directory");
    }
    if (!fs::is_empty(target) && !fs::exists(target / kExportMarker)) {
      throw learner_error("export target " + target.string() + " is not empty and not an earlier export (it has no " +
                          kExportMarker + "); choose a new directory or empty it");
    }
  }
  static const char* const kTokenizerFiles[] = {
      "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json",
      "chat_template.jinja", "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model"};
  if (!fs::exists(tokenizer_dir / "tokenizer.json") && !fs::exists(tokenizer_dir / "tokenizer_config.json")) {
    throw learner_error(tokenizer_dir.string() +
                        ": no tokenizer.json or tokenizer_config.json; pass the source checkpoint's directory");
  }
  const std::string prefix = "." + target.filename().string() + kPartialPrefix;
  const fs::path partial = target.parent_path() / (prefix + std::to_string(::getpid()));
  try {
    fs::create_directories(target.parent_path());
    for (const auto& item : fs::directory_iterator(target.parent_path())) {
      if (starts_with(item.path().filename().string(), prefix)) fs::remove_all(item.path());
    }
    fs::create_directory(partial);
    actor.save_pretrained(partial);
    for (const char* name : kTokenizerFiles) {
      if (fs::exists(tokenizer_dir / name)) fs::copy_file(tokenizer_dir / name, partial / name);
    }
    write_file(partial / kExportMarker,
               nlohmann::json{{"weight_version", actor.weight_version()}}.dump() + "\n");
    sync_tree(partial);
    move_into_place(partial, target);
  } catch (const learner_error&) {
    throw;
  } catch (const std::exception& e) {
    throw learner_error("cannot export to " + target.string() + ": " + first_line(e));
  }
}

}  // namespace cuda_agent::learner
