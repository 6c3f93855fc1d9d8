#include "actors/model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "actors/model/model_config.hpp"

namespace cuda_agent::model {
namespace {

struct dtype_info {
  const char* name;
  torch::ScalarType type;
  int64_t bytes;
};

const dtype_info dtypes[] = {
    {"F64", torch::kFloat64, 8},       {"F32", torch::kFloat32, 4},
    {"F16", torch::kFloat16, 2},       {"BF16", torch::kBFloat16, 2},
    {"I64", torch::kInt64, 8},         {"I32", torch::kInt32, 4},
    {"I16", torch::kInt16, 2},         {"I8", torch::kInt8, 1},
    {"U8", torch::kUInt8, 1},          {"BOOL", torch::kBool, 1},
    {"F8_E4M3", torch::kFloat8_e4m3fn, 1}, {"F8_E5M2", torch::kFloat8_e5m2, 1},
};

const dtype_info* find_dtype(const std::string& name) {
  for (const auto& d : dtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

// Headers this large are corrupt (the format's reference reader refuses above 100 MB).
constexpr uint64_t max_header_bytes = uint64_t{100} << 20;

}  // namespace

safetensors_file::safetensors_file(const std::filesystem::path& path) : path_(path) {
  const std::string file = path.string();
  auto fail = [&](const std::string& problem) -> void { throw model_error(file + ": " + problem); };
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(std::string("cannot be opened: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail("truncated: " + std::to_string(size_) + " bytes, shorter than the 8-byte header length");
  }
  void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) fail(std::string("cannot be memory-mapped: ") + std::strerror(errno));
  data_ = static_cast<const uint8_t*>(map);
  try {
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data_[i];
    if (header_len > size_ - 8) {
      fail("header length " + std::to_string(header_len) + " runs past the end of the file (" +
           std::to_string(size_) + " bytes): truncated or not a safetensors file");
    }
    if (header_len > max_header_bytes) fail("header length " + std::to_string(header_len) + " is implausibly large");
    data_start_ = 8 + header_len;
    const char* text = reinterpret_cast<const char*>(data_ + 8);
    nlohmann::json header = nlohmann::json::parse(text, text + header_len, nullptr, false);
    if (header.is_discarded() || !header.is_object()) fail("header is not a JSON object");
    const uint64_t data_bytes = size_ - data_start_;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    std::map<uint64_t, std::string> by_begin;
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      if (name == "__metadata__") {
        if (!it->is_object()) fail("__metadata__ is not an object");
        metadata_ = *it;
        continue;
      }
      auto bad = [&](const std::string& problem) { fail("tensor '" + name + "': " + problem); };
      const nlohmann::json& e = *it;
      if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() || !e.contains("shape") ||
          !e["shape"].is_array() || !e.contains("data_offsets") || !e["data_offsets"].is_array() ||
          e["data_offsets"].size() != 2) {
        bad("entry lacks dtype, shape or data_offsets [begin, end]");
      }
      safetensors_entry entry;
      entry.dtype = e["dtype"].get<std::string>();
      const dtype_info* info = find_dtype(entry.dtype);
      if (!info) bad("unsupported dtype '" + entry.dtype + "'");
      uint64_t numel = 1;
      for (const auto& dim : e["shape"]) {
        if (!dim.is_number_unsigned()) bad("shape holds a negative or non-integer size");
        uint64_t n = dim.get<uint64_t>();
        if (n != 0 && numel > (uint64_t{1} << 62) / n) bad("shape is implausibly large");
        numel *= n;
        entry.shape.push_back(static_cast<int64_t>(n));
      }
      for (const auto& off : e["data_offsets"]) {
        if (!off.is_number_unsigned()) bad("data_offsets hold a negative or non-integer offset");
      }
      entry.begin = e["data_offsets"][0].get<uint64_t>();
      entry.end = e["data_offsets"][1].get<uint64_t>();
      if (entry.end < entry.begin) bad("data_offsets end before they begin");
      if (entry.end > data_bytes) {
        bad("data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
            ") run past the end of the file's " + std::to_string(data_bytes) +
            " data bytes: the file is truncated or corrupt");
      }
      if (entry.end - entry.begin != numel * uint64_t(info->bytes)) {
        bad("holds " + std::to_string(entry.end - entry.begin) + " bytes, but " + entry.dtype +
            " of its shape needs " + std::to_string(numel * uint64_t(info->bytes)));
      }
      if (entry.end > entry.begin) by_begin.emplace(entry.begin, name);
      tensors_.emplace(name, std::move(entry));
    }
    uint64_t previous_end = 0;
    std::string previous;
    for (const auto& [begin, name] : by_begin) {
      if (begin < previous_end) fail("tensors '" + previous + "' and '" + name + "' overlap");
      previous_end = tensors_.at(name).end;
      previous = name;
    }
  } catch (...) {
    ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = nullptr;
    throw;
  }
}

safetensors_file::~safetensors_file() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

torch::Tensor safetensors_file::load(const std::string& name, torch::Device device,
                                     torch::ScalarType dtype) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw model_error(path_.string() + ": no tensor '" + name + "'");
  const safetensors_entry& e = it->second;
  const dtype_info* info = find_dtype(e.dtype);
  const uint8_t* ptr = data_ + data_start_ + e.begin;
  auto options = torch::TensorOptions().dtype(info->type);
  torch::Tensor source;
  if (reinterpret_cast<uintptr_t>(ptr) % uintptr_t(info->bytes) != 0) {
    // An unaligned tensor (the header's length is not a multiple of 8): copy it out first.
    source = torch::empty(e.shape, options);
    std::memcpy(source.data_ptr(), ptr, e.end - e.begin);
  } else {
    source = torch::from_blob(const_cast<uint8_t*>(ptr), e.shape, options);
  }
  return source.to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
}

safetensors_checkpoint::safetensors_checkpoint(const std::filesystem::path& dir) {
  std::filesystem::path index = dir / "model.safetensors.index.json";
  std::filesystem::path single = dir / "model.safetensors";
  if (std::filesystem::exists(single)) {
    files_.push_back(std::make_unique<safetensors_file>(single));
    for (const auto& [name, entry] : files_.back()->tensors()) where_[name] = files_.back().get();
    return;
  }
  if (!std::filesystem::exists(index)) {
    throw model_error(dir.string() + ": neither model.safetensors nor model.safetensors.index.json "
                      "(only safetensors checkpoints are read; convert .bin ones with transformers)");
  }
  std::ifstream in(index);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, false);
  if (json.is_discarded() || !json.is_object() || !json.contains("weight_map") ||
      !json["weight_map"].is_object()) {
    throw model_error(index.string() + ": not JSON with a 'weight_map' object");
  }
  std::map<std::string, const safetensors_file*> opened;
  for (auto it = json["weight_map"].begin(); it != json["weight_map"].end(); ++it) {
    if (!it->is_string()) throw model_error(index.string() + ": weight_map entry '" + it.key() + "' is not a file name");
    std::string shard = it->get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      throw model_error(index.string() + ": weight_map names '" + shard + "', not a file in the directory");
    }
    auto found = opened.find(shard);
    if (found == opened.end()) {
      files_.push_back(std::make_unique<safetensors_file>(dir / shard));
      found = opened.emplace(shard, files_.back().get()).first;
    }
    if (!found->second->tensors().count(it.key())) {
      throw model_error((dir / shard).string() + ": lacks tensor '" + it.key() +
                        "' that model.safetensors.index.json places there");
    }
    where_[it.key()] = found->second;
  }
}

std::vector<std::string> safetensors_checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, file] : where_) out.push_back(name);
  return out;
}

const safetensors_entry& safetensors_checkpoint::entry(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw model_error("checkpoint has no tensor '" + name + "'");
  return it->second->tensors().at(name);
}

const std::filesystem::path& safetensors_checkpoint::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw model_error("checkpoint has no tensor '" + name + "'");
  return it->second->path();
}

torch::Tensor safetensors_checkpoint::load(const std::string& name, torch::Device device,
                                           torch::ScalarType dtype) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw model_error("checkpoint has no tensor '" + name + "'");
  return it->second->load(name, device, dtype);
}

std::string safetensors_dtype(torch::ScalarType dtype) {
  for (const auto& d : dtypes) {
    if (d.type == dtype) return d.name;
  }
  throw model_error(std::string("safetensors cannot hold dtype ") + c10::toString(dtype));
}

void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> host;
  uint64_t offset = 0;
  std::set<std::string> seen;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__" || !seen.insert(name).second) {
      throw model_error(path.string() + ": tensor name '" + name + "' repeated or reserved");
    }
    torch::Tensor t = tensor.detach().to(torch::kCPU).contiguous();
    uint64_t bytes = uint64_t(t.numel()) * uint64_t(t.element_size());
    header[name] = {{"dtype", safetensors_dtype(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    host.push_back(std::move(t));
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps every tensor 8-byte aligned
  std::filesystem::path partial = path;
  partial += ".partial";
  {
    std::ofstream out(partial, std::ios::binary | std::ios::trunc);
    if (!out) throw model_error(partial.string() + ": cannot be written");
    uint64_t n = text.size();
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    out.write(len, 8);
    out.write(text.data(), std::streamsize(text.size()));
    for (const auto& t : host) {
      out.write(static_cast<const char*>(t.data_ptr()), std::streamsize(t.numel() * t.element_size()));
    }
    out.flush();
    if (!out) throw model_error(partial.string() + ": write failed (disk full?)");
  }
  std::filesystem::rename(partial, path);
}

void write_safetensors_checkpoint(const std::filesystem::path& dir,
                                  const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                  int64_t shard_bytes) {
  std::filesystem::create_directories(dir);
  // Old weights would shadow or mix with the new ones in from_pretrained.
  for (const auto& item : std::filesystem::directory_iterator(dir)) {
    std::string name = item.path().filename().string();
    bool shard = name.rfind("model-", 0) == 0 && name.find("-of-") != std::string::npos &&
                 item.path().extension() == ".safetensors";
    if (shard || name == "model.safetensors" || name == "model.safetensors.index.json") {
      std::filesystem::remove(item.path());
    }
  }
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> shards(1);
  int64_t current = 0;
  int64_t total = 0;
  for (const auto& named : tensors) {
    int64_t bytes = named.second.numel() * named.second.element_size();
    if (!shards.back().empty() && current + bytes > shard_bytes) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(named);
    current += bytes;
    total += bytes;
  }
  if (shards.size() == 1) {
    write_safetensors(dir / "model.safetensors", shards[0]);
    return;
  }
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char file[64];
    std::snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    write_safetensors(dir / file, shards[i]);
    for (const auto& [name, t] : shards[i]) weight_map[name] = file;
  }
  nlohmann::json index{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream out(dir / "model.safetensors.index.json", std::ios::trunc);
  out << index.dump(2) << "\n";
  if (!out) throw model_error((dir / "model.safetensors.index.json").string() + ": write failed");
}

}  // namespace cuda_agent::model
