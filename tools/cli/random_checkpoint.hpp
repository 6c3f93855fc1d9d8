// Random checkpoints of named shapes, for the benchmarks that need a model of a real size where
// no weights can be downloaded (bench generate, bench learn).
#pragma once

#include <filesystem>
#include <string>

#include <torch/torch.h>

#include "actors/model/model_config.hpp"

namespace cuda_agent::cli {

// qwen2-0.5b, qwen2.5-7b or tiny; throws usage_error for another name.
model::model_config named_shape(const std::string& name);

// Random weights of a Qwen2 config under transformers' names: N(0, 0.02) matrices and biases,
// norm weights of one, written in `dtype`, with config.json. Drawn on `draw_on`: a GPU draws a
// 7B model's weights in a second, where the host's serial generator takes minutes.
void write_random_checkpoint(const std::filesystem::path& dir, const model::model_config& c, torch::ScalarType dtype,
                             torch::Device draw_on = torch::kCPU);

// Removes a temporary checkpoint however the command ends.
struct temp_dir {
  std::filesystem::path path;
  ~temp_dir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

}  // namespace cuda_agent::cli
