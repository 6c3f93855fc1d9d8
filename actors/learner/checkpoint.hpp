// The learner's checkpoints (everything a resumed run needs to continue bit for bit) and the
// Hugging Face export of the trained policy.
//
// A checkpoint is a directory root/step-<12 digits> holding
//   tensors.<set>.safetensors  one per named tensor set ("actor", "critic")
//   optimizer.<name>.pt        one per optimiser, its own serialize() archive
//   rng.safetensors            the default CPU generator's state and every CUDA device's
//   state.json                 the caller's JSON `state` plus each std::mt19937_64 it passed
//   manifest.json              every file above with its size and CRC-32C
//   COMPLETE                   the manifest's size and CRC-32C, written last
// It is written into a temporary sibling directory, every file fsynced, then renamed into place
// and the root fsynced; a crash at any moment leaves the previous checkpoints plus, at most, the
// new one complete. latest_checkpoint() only returns directories whose COMPLETE marker matches
// their manifest and whose files have the manifest's sizes; read_checkpoint() also verifies the
// checksums before it touches the caller's parameters.
//
//   learner::checkpoint_contents contents;
//   contents.tensor_sets = {{"actor", actor->named_parameters()}};
//   contents.optimizers = {{"actor", &actor_optimizer}};
//   contents.engines = {{"sampler", &sampler_rng}};
//   contents.state = {{"step", step}, {"weight_version", version}};
//   learner::write_checkpoint(root, step, contents, /*keep=*/3);
//   ...
//   if (auto dir = learner::latest_checkpoint(root)) learner::read_checkpoint(*dir, contents);
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "actors/learner/episode_sample.hpp"
#include "actors/model/transformer.hpp"

namespace cuda_agent::learner {

using named_tensors = std::vector<std::pair<std::string, torch::Tensor>>;

// What a checkpoint holds. The tensors, optimisers and engines are the caller's own: writing
// reads them, reading restores them in place. Names (of sets, optimisers, engines) become file
// names and JSON keys: letters, digits, '_', '-' and '.'.
struct checkpoint_contents {
  // Named tensor sets, e.g. {"actor", actor->named_parameters()}; read_checkpoint copies into
  // them (same names, shapes and dtypes as written).
  std::vector<std::pair<std::string, named_tensors>> tensor_sets;
  std::vector<std::pair<std::string, torch::optim::Optimizer*>> optimizers;
  // Engines of the caller's own (a sampler's, a data shuffler's), saved and restored exactly.
  std::vector<std::pair<std::string, std::mt19937_64*>> engines;
  // The default CPU generator's state and, where CUDA is available, every device's.
  bool torch_generators = true;
  // Step, stage, weight version, data cursor, anything else; read_checkpoint replaces it.
  nlohmann::json state = nlohmann::json::object();
};

// Writes `contents` as root/step-<step> (replacing one of that step, if any), then keeps the
// newest `keep` (>= 1) complete checkpoints and removes older ones and leftovers of interrupted
// writes. Throws learner_error.
void write_checkpoint(const std::filesystem::path& root, int64_t step,
                      const checkpoint_contents& contents, int keep);

// The newest complete checkpoint under `root`, if any (a missing root has none).
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& root);

// The complete checkpoints under `root`, oldest first.
std::vector<std::filesystem::path> complete_checkpoints(const std::filesystem::path& root);

// The step of a checkpoint directory's name (step-000000000042 -> 42); nullopt for another name.
std::optional<int64_t> checkpoint_step(const std::filesystem::path& dir);

// Verifies `dir` against its manifest, then restores every part of `contents` from it: tensors
// copied in place (no grad), optimiser states, generator and engine states, and `state`. What
// `contents` names must be in the checkpoint, and the other way round for tensor sets and
// optimisers. Throws a one-line learner_error naming the file or tensor at fault. The checksums,
// and every tensor's name, shape and dtype, are checked before anything of `contents` changes.
void read_checkpoint(const std::filesystem::path& dir, checkpoint_contents& contents);

// Writes `actor` as a Hugging Face checkpoint that transformers' from_pretrained and
// AutoTokenizer load: config.json, the safetensors weights, and the tokenizer files of
// `tokenizer_dir` (the source checkpoint). Built in a temporary sibling of `out` and renamed into
// place. `out` must be missing, empty, or an earlier export (which it replaces); anything else
// is refused with a learner_error.
void export_hugging_face(const model::transformer& actor, const std::filesystem::path& tokenizer_dir,
                         const std::filesystem::path& out);

}  // namespace cuda_agent::learner
