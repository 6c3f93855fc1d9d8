// Hugging Face .safetensors checkpoints: reading (memory-mapped, one file or the shards that
// model.safetensors.index.json names) and writing (one file or shards plus an index).
//
// The format: an 8-byte little-endian header length N, N bytes of JSON mapping each tensor's name
// to {dtype, shape, data_offsets: [begin, end)} (offsets into the data that follows the header),
// and an optional "__metadata__" object of strings. Every header is checked on opening: a header
// or a tensor past the end of the file, overlapping tensors, a size that is not dtype x shape.
//
//   model::safetensors_checkpoint weights{dir};
//   torch::Tensor w = weights.load("model.norm.weight", torch::kCUDA, torch::kBFloat16);
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

namespace cuda_agent::model {

struct safetensors_entry {
  std::string dtype;  // as written: "BF16", "F32", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offsets into the data section
  uint64_t end = 0;
};

// One memory-mapped .safetensors file; the mapping lives as long as the object.
class safetensors_file {
 public:
  explicit safetensors_file(const std::filesystem::path& path);  // throws model_error
  ~safetensors_file();
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::map<std::string, safetensors_entry>& tensors() const { return tensors_; }
  const nlohmann::json& metadata() const { return metadata_; }
  // A copy of the tensor on `device` in `dtype` (never a view of the mapping).
  torch::Tensor load(const std::string& name, torch::Device device, torch::ScalarType dtype) const;

 private:
  std::filesystem::path path_;
  std::map<std::string, safetensors_entry> tensors_;
  nlohmann::json metadata_ = nlohmann::json::object();
  const uint8_t* data_ = nullptr;  // the mapping
  uint64_t size_ = 0;              // of the file
  uint64_t data_start_ = 0;        // 8 + header length
};

// A checkpoint directory's weights: model.safetensors, or the shards of
// model.safetensors.index.json (each shard opened once).
class safetensors_checkpoint {
 public:
  explicit safetensors_checkpoint(const std::filesystem::path& dir);  // throws model_error
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return where_.count(name) != 0; }
  const safetensors_entry& entry(const std::string& name) const;
  const std::filesystem::path& file_of(const std::string& name) const;
  torch::Tensor load(const std::string& name, torch::Device device, torch::ScalarType dtype) const;

 private:
  std::vector<std::unique_ptr<safetensors_file>> files_;
  std::map<std::string, const safetensors_file*> where_;
};

// The safetensors name of a torch dtype ("BF16"); throws model_error for one it cannot hold.
std::string safetensors_dtype(torch::ScalarType dtype);

// Writes one .safetensors file (tensors in the given order, copied to the CPU).
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// Writes model.safetensors, or, where the tensors together exceed shard_bytes,
// model-0000i-of-0000n.safetensors plus model.safetensors.index.json, as transformers does.
void write_safetensors_checkpoint(const std::filesystem::path& dir,
                                  const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                                  int64_t shard_bytes);

}  // namespace cuda_agent::model
