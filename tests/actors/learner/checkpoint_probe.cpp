// Drives actors/learner/checkpoint.* for tests/actors/learner/test_checkpoint.py:
//
//   checkpoint_probe train ROOT STEPS CHECKPOINT_AT STOP_AFTER OUT.json FINAL.safetensors [resume]
//       trains a small MLP with AdamW on random batches from the default generator (their targets
//       scaled by a std::mt19937_64), checkpointing after step CHECKPOINT_AT and exiting after
//       STOP_AFTER (-1: never); with `resume`, starts from latest_checkpoint(ROOT). Writes the
//       per-step losses (float bits in hex) to OUT.json and the final parameters.
//   checkpoint_probe read DIR HIDDEN       reads a `train` checkpoint into an MLP of HIDDEN units
//   checkpoint_probe write_loop ROOT MIB COUNT   writes COUNT checkpoints (0: until killed) after
//       the latest under ROOT, each of a MIB MiB tensor filled with its step (keep 2), printing
//       "written N" after each
//   checkpoint_probe verify ROOT MIB       loads latest_checkpoint(ROOT) and checks its contents
//   checkpoint_probe export MODEL_DIR TOKENIZER_DIR OUT
//
// A learner_error is printed to stderr as "learner_error: <message>" with exit status 2.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "actors/learner/checkpoint.hpp"
#include "actors/model/safetensors.hpp"
#include "actors/model/transformer.hpp"

namespace {

namespace fs = std::filesystem;
using cuda_agent::learner::checkpoint_contents;
using cuda_agent::learner::named_tensors;

constexpr int64_t kInputs = 8;
constexpr int64_t kBatch = 16;

struct mlp {
  torch::nn::Sequential net;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::mt19937_64 targets_rng{12345};

  explicit mlp(int64_t hidden)
      : net(torch::nn::Linear(kInputs, hidden), torch::nn::Tanh(), torch::nn::Linear(hidden, 1)),
        optimizer(std::make_unique<torch::optim::AdamW>(
            net->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1))) {}

  named_tensors parameters() const {
    named_tensors out;
    for (const auto& item : net->named_parameters()) out.emplace_back(item.key(), item.value());
    return out;
  }

  checkpoint_contents contents() {
    checkpoint_contents c;
    c.tensor_sets = {{"model", parameters()}};
    c.optimizers = {{"adamw", optimizer.get()}};
    c.engines = {{"targets", &targets_rng}};
    return c;
  }

  float train_step() {
    torch::Tensor x = torch::randn({kBatch, kInputs});
    const double scale = std::uniform_real_distribution<double>(0.5, 2.0)(targets_rng);
    torch::Tensor y = torch::sin(x.sum(1, /*keepdim=*/true)) * scale;
    optimizer->zero_grad();
    torch::Tensor loss = torch::mse_loss(net->forward(x), y);
    loss.backward();
    optimizer->step();
    return loss.item<float>();
  }
};

std::string bits(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  char text[16];
  std::snprintf(text, sizeof text, "%08x", word);
  return text;
}

int train(const fs::path& root, int64_t steps, int64_t checkpoint_at, int64_t stop_after,
          const fs::path& out, const fs::path& final_weights, bool resume) {
  // A resumed run starts from other weights and another generator state: only the checkpoint
  // can make it continue where the first one stopped.
  torch::manual_seed(resume ? 999 : 1);
  mlp model(32);
  nlohmann::json losses = nlohmann::json::array();
  int64_t first = 1;
  if (resume) {
    const auto dir = cuda_agent::learner::latest_checkpoint(root);
    if (!dir) throw std::runtime_error("no checkpoint under " + root.string());
    checkpoint_contents contents = model.contents();
    cuda_agent::learner::read_checkpoint(*dir, contents);
    first = contents.state.at("step").get<int64_t>() + 1;
    losses = contents.state.at("losses");
  }
  for (int64_t step = first; step <= steps; ++step) {
    losses.push_back(bits(model.train_step()));
    if (step == checkpoint_at) {
      checkpoint_contents contents = model.contents();
      contents.state = {{"step", step}, {"losses", losses}};
      cuda_agent::learner::write_checkpoint(root, step, contents, 2);
    }
    if (step == stop_after) break;
  }
  std::ofstream(out) << nlohmann::json{{"losses", losses}, {"first", first}}.dump() << "\n";
  cuda_agent::model::write_safetensors(final_weights, model.parameters());
  return 0;
}

int read(const fs::path& dir, int64_t hidden) {
  mlp model(hidden);
  checkpoint_contents contents = model.contents();
  cuda_agent::learner::read_checkpoint(dir, contents);
  std::cout << contents.state.dump() << "\n";
  return 0;
}

struct big_state {
  torch::Tensor weights;
  torch::Tensor bias = torch::zeros({4});
  std::mt19937_64 engine{7};

  explicit big_state(int64_t mib) : weights(torch::zeros({mib << 18})) {}

  checkpoint_contents contents() {
    checkpoint_contents c;
    c.tensor_sets = {{"big", {{"weights", weights}, {"bias", bias}}}};
    c.engines = {{"engine", &engine}};
    return c;
  }
};

int write_loop(const fs::path& root, int64_t mib, int64_t count) {
  big_state state(mib);
  const auto latest = cuda_agent::learner::latest_checkpoint(root);
  const int64_t first = latest ? *cuda_agent::learner::checkpoint_step(*latest) + 1 : 1;
  for (int64_t step = first; count == 0 || step < first + count; ++step) {
    state.weights.fill_(double(step));
    state.bias.fill_(double(-step));
    state.engine.seed(uint64_t(step));
    checkpoint_contents contents = state.contents();
    contents.state = {{"step", step}};
    cuda_agent::learner::write_checkpoint(root, step, contents, 2);
    std::cout << "written " << step << std::endl;
  }
  return 0;
}

int verify(const fs::path& root, int64_t mib) {
  nlohmann::json report;
  report["complete"] = cuda_agent::learner::complete_checkpoints(root).size();
  int partials = 0;
  for (const auto& item : fs::directory_iterator(root)) {
    partials += item.path().filename().string().rfind(".partial-", 0) == 0;
  }
  report["partials"] = partials;
  const auto dir = cuda_agent::learner::latest_checkpoint(root);
  if (!dir) {
    report["latest"] = nullptr;
  } else {
    big_state state(mib);
    checkpoint_contents contents = state.contents();
    cuda_agent::learner::read_checkpoint(*dir, contents);
    const int64_t step = contents.state.at("step").get<int64_t>();
    std::mt19937_64 expected(static_cast<uint64_t>(step));
    report["latest"] = step;
    report["matches_name"] = cuda_agent::learner::checkpoint_step(*dir) == step;
    report["ok"] = state.weights.eq(double(step)).all().item<bool>() &&
                   state.bias.eq(double(-step)).all().item<bool>() && state.engine == expected;
  }
  std::cout << report.dump() << "\n";
  return 0;
}

int export_model(const fs::path& model_dir, const fs::path& tokenizer_dir, const fs::path& out) {
  auto actor = cuda_agent::model::transformer::load(model_dir, torch::kCPU, torch::kFloat32);
  cuda_agent::learner::export_hugging_face(*actor, tokenizer_dir, out);
  return 0;
}

int run(const std::vector<std::string>& args) {
  const std::string& command = args.at(0);
  if (command == "train") {
    return train(args.at(1), std::stoll(args.at(2)), std::stoll(args.at(3)), std::stoll(args.at(4)),
                 args.at(5), args.at(6), args.size() > 7 && args[7] == "resume");
  }
  if (command == "read") return read(args.at(1), std::stoll(args.at(2)));
  if (command == "write_loop") return write_loop(args.at(1), std::stoll(args.at(2)), std::stoll(args.at(3)));
  if (command == "verify") return verify(args.at(1), std::stoll(args.at(2)));
  if (command == "export") return export_model(args.at(1), args.at(2), args.at(3));
  std::cerr << "unknown command " << command << "\n";
  return 64;
}

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const cuda_agent::learner::learner_error& e) {
    std::cerr << "learner_error: " << e.what() << "\n";
    return 2;
  }
}
