// Drives the transformer for test_transformer.py, which compares what it prints with transformers.
//
//   transformer_probe logits DIR INPUT.json [DTYPE [DEVICE]]
//                                                     {"input_ids": [[..]], "attention_mask": [[..]]}
//   transformer_probe greedy DIR INPUT.json N         {"prompts": [[..], ..]}: all prompts in one
//                                                     batch, N greedy tokens each through step()
//   transformer_probe pool DIR INPUT.json N SLOTS TOKENS
//                                                     as greedy, with a decode pool of SLOTS slots
//                                                     of TOKENS tokens; also which caches held a
//                                                     slot after the prefill and at the end, and
//                                                     whether a new cache takes a freed slot
//   transformer_probe mixed DIR INPUT.json            {"a_prefix", "a_next", "b"}: A decodes while
//                                                     B prefills in one step(), and each alone
//   transformer_probe grad DIR INPUT.json NAME [recompute]
//                                                     next-token loss over INPUT and NAME's gradient
//                                                     ("*": all); recompute: activation checkpointing
//   transformer_probe save DIR OUT SHARD_BYTES        load, then save_pretrained to OUT
//   transformer_probe check DIR DTYPE DEVICE          load, forward and 8 greedy steps; finite?
//   transformer_probe update DIR                      load_weights with halved weights
//   transformer_probe config DIR                      config.json as parsed (to_json)
//
// Prints one JSON object on stdout. A model_error prints "error: <message>" on stderr, exit 2.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "actors/model/transformer.hpp"

namespace model = cuda_agent::model;
using nlohmann::json;

namespace {

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

torch::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "fp32") return torch::kFloat32;
  if (name == "bfloat16" || name == "bf16") return torch::kBFloat16;
  if (name == "float16" || name == "fp16") return torch::kFloat16;
  throw std::runtime_error("unknown dtype " + name);
}

torch::Tensor int_matrix(const json& rows) {
  std::vector<int64_t> flat;
  int64_t cols = rows.empty() ? 0 : int64_t(rows[0].size());
  for (const auto& row : rows) {
    if (int64_t(row.size()) != cols) throw std::runtime_error("ragged matrix");
    for (const auto& v : row) flat.push_back(v.get<int64_t>());
  }
  return torch::tensor(flat, torch::kInt64).view({int64_t(rows.size()), cols});
}

json to_json(const torch::Tensor& t) {
  torch::Tensor c = t.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  if (c.dim() == 0) return c.item<double>();
  json out = json::array();
  for (int64_t i = 0; i < c.size(0); ++i) out.push_back(to_json(c[i]));
  return out;
}

// The autograd nodes behind t: what the graph keeps for the backward, node by node.
int64_t graph_nodes(const torch::Tensor& t) {
  std::set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo{t.grad_fn().get()};
  while (!todo.empty()) {
    torch::autograd::Node* n = todo.back();
    todo.pop_back();
    if (n == nullptr || !seen.insert(n).second) continue;
    for (const auto& edge : n->next_edges()) todo.push_back(edge.function.get());
  }
  return int64_t(seen.size());
}

int run(int argc, char** argv) {
  if (argc < 3) throw std::runtime_error("usage: transformer_probe COMMAND DIR ...");
  const std::string command = argv[1];
  const std::string dir = argv[2];
  json out;
  if (command == "logits" && argc >= 4) {
    auto dtype = argc >= 5 ? parse_dtype(argv[4]) : torch::kFloat32;
    const torch::Device device{argc >= 6 ? argv[5] : "cpu"};
    auto m = model::transformer::load(dir, device, dtype);
    json input = read_json(argv[3]);
    torch::Tensor ids = int_matrix(input["input_ids"]).to(device);
    torch::Tensor mask =
        input.contains("attention_mask") ? int_matrix(input["attention_mask"]).to(device) : torch::Tensor();
    torch::NoGradGuard no_grad;
    out["logits"] = to_json(m->forward(ids, mask));
  } else if ((command == "greedy" && argc >= 5) || (command == "pool" && argc >= 7)) {
    auto m = model::transformer::load(dir, torch::kCPU, torch::kFloat32);
    const bool pool = command == "pool";
    if (pool) m->set_decode_pool(std::atoll(argv[5]), std::atoll(argv[6]));
    json input = read_json(argv[3]);
    const int n = std::atoi(argv[4]);
    std::vector<std::vector<int64_t>> next;
    for (const auto& p : input["prompts"]) next.push_back(p.get<std::vector<int64_t>>());
    std::vector<model::kv_cache> caches(next.size());
    std::vector<model::kv_cache*> pointers;
    for (auto& c : caches) pointers.push_back(&c);
    std::vector<std::vector<int64_t>> tokens(next.size());
    std::vector<std::vector<double>> logprobs(next.size());
    auto pooled = [&] {
      json flags = json::array();
      for (const auto& c : caches) flags.push_back(c.pooled());
      return flags;
    };
    for (int i = 0; i < n; ++i) {
      torch::Tensor logits = m->step(next, pointers);
      if (i == 0 && pool) out["pooled_after_prefill"] = pooled();
      torch::Tensor lp = torch::log_softmax(logits, -1);
      torch::Tensor best = logits.argmax(-1);
      for (size_t b = 0; b < next.size(); ++b) {
        int64_t t = best[int64_t(b)].item<int64_t>();
        tokens[b].push_back(t);
        logprobs[b].push_back(lp[int64_t(b)][t].item<double>());
        next[b] = {t};
      }
    }
    out["tokens"] = tokens;
    out["logprobs"] = logprobs;
    json lengths = json::array();
    for (auto& c : caches) lengths.push_back(c.length());
    out["cache_lengths"] = lengths;
    if (pool) {
      out["pooled_at_end"] = pooled();
      out["cache_bytes"] = json::array();
      for (const auto& c : caches) out["cache_bytes"].push_back(c.bytes());
      caches.clear();  // their slots go back
      model::kv_cache later = m->new_cache();
      m->step({{1, 2, 3}}, {&later});
      out["later_cache_pooled"] = later.pooled();
    }
  } else if (command == "mixed" && argc >= 4) {
    auto m = model::transformer::load(dir, torch::kCPU, torch::kFloat32);
    json input = read_json(argv[3]);
    auto a_prefix = input["a_prefix"].get<std::vector<int64_t>>();
    auto a_next = input["a_next"].get<std::vector<int64_t>>();
    auto b = input["b"].get<std::vector<int64_t>>();
    model::kv_cache a_cache = m->new_cache(), b_cache = m->new_cache();
    m->step({a_prefix}, {&a_cache});
    torch::Tensor mixed = m->step({a_next, b}, {&a_cache, &b_cache});
    model::kv_cache a_alone = m->new_cache(), b_alone = m->new_cache();
    m->step({a_prefix}, {&a_alone});
    torch::Tensor a_logits = m->step({a_next}, {&a_alone});
    torch::Tensor b_logits = m->step({b}, {&b_alone});
    out["mixed"] = to_json(mixed);
    out["alone"] = to_json(torch::cat({a_logits, b_logits}, 0));
    out["cache_lengths"] = {a_cache.length(), b_cache.length()};
    // A truncated cache resumes as if the dropped tokens had never been there.
    a_cache.truncate(int64_t(a_prefix.size()));
    out["after_truncate"] = to_json(m->step({a_next}, {&a_cache}));
  } else if (command == "grad" && argc >= 5) {
    auto m = model::transformer::load(dir, torch::kCPU, torch::kFloat32);
    json input = read_json(argv[3]);
    torch::Tensor ids = int_matrix(input["input_ids"]);
    torch::Tensor mask = input.contains("attention_mask") ? int_matrix(input["attention_mask"])
                                                          : torch::ones_like(ids);
    const bool recompute = argc >= 6 && std::string(argv[5]) == "recompute";
    torch::Tensor hidden = m->hidden_states(ids, mask, recompute);
    out["graph_nodes"] = graph_nodes(hidden);
    torch::Tensor logits = m->logits(hidden);
    // Mean next-token cross-entropy over real targets, as transformers' labels=... loss.
    torch::Tensor targets = ids.slice(1, 1).reshape({-1});
    torch::Tensor valid = mask.slice(1, 1).reshape({-1}).to(torch::kBool);
    torch::Tensor lp = torch::log_softmax(logits.slice(1, 0, -1).reshape({-1, logits.size(-1)}), -1);
    torch::Tensor nll = -lp.gather(1, targets.unsqueeze(1)).squeeze(1);
    torch::Tensor loss = nll.masked_select(valid).mean();
    loss.backward();
    // NAME, or "*": every weight's gradient under its name.
    for (const auto& [name, t] : m->named_parameters()) {
      if (name == argv[4]) out["grad"] = to_json(t.grad());
      if (std::string(argv[4]) == "*") out["grads"][name] = to_json(t.grad());
    }
    out["loss"] = loss.item<double>();
  } else if (command == "save" && argc >= 5) {
    auto m = model::transformer::load(dir, torch::kCPU, torch::kFloat32);
    m->save_pretrained(argv[3], std::atoll(argv[4]));
    out["saved"] = argv[3];
  } else if (command == "check" && argc >= 5) {
    auto m = model::transformer::load(dir, torch::Device(argv[4]), parse_dtype(argv[3]));
    torch::NoGradGuard no_grad;
    torch::Tensor logits = m->forward(torch::arange(1, 9, torch::kInt64).view({1, 8}));
    model::kv_cache cache = m->new_cache();
    std::vector<int64_t> next{1, 2, 3, 4};
    std::vector<int64_t> tokens;
    bool finite = logits.isfinite().all().item<bool>();
    for (int i = 0; i < 8; ++i) {
      torch::Tensor l = m->step({next}, {&cache});
      finite = finite && l.isfinite().all().item<bool>();
      next = {l.argmax(-1)[0].item<int64_t>()};
      tokens.push_back(next[0]);
    }
    out["finite"] = finite;
    out["tokens"] = tokens;
    out["dtype"] = std::string(c10::toString(m->dtype()));
    out["cache_bytes"] = cache.bytes();
  } else if (command == "config") {
    model::model_config c = model::model_config::read(dir);
    out = c.to_json();
    out["eos_token_ids"] = c.eos_token_ids;
    out["qk_norm"] = c.qk_norm;
    out["attention_bias"] = c.attention_bias;
    out["yarn_attention_factor"] = c.rope.attention_factor;
  } else if (command == "update") {
    auto m = model::transformer::load(dir, torch::kCPU, torch::kFloat32);
    torch::NoGradGuard no_grad;
    torch::Tensor ids = torch::arange(1, 9, torch::kInt64).view({1, 8});
    torch::Tensor before = m->forward(ids);
    std::vector<std::pair<std::string, torch::Tensor>> halved;
    for (const auto& [name, t] : m->named_parameters()) halved.emplace_back(name, t * 0.5);
    m->load_weights(halved, 7);
    torch::Tensor after = m->forward(ids);
    out["version"] = m->weight_version();
    out["changed"] = (before - after).abs().max().item<double>();
    // A wrong shape is refused before anything is copied.
    std::string refused;
    try {
      m->load_weights({{"model.norm.weight", torch::zeros({3})}}, 8);
    } catch (const model::model_error& e) {
      refused = e.what();
    }
    out["refused"] = refused;
    out["version_after_refusal"] = m->weight_version();
    out["unchanged_after_refusal"] = (m->forward(ids) - after).abs().max().item<double>();
  } else {
    throw std::runtime_error("unknown command or missing arguments: " + command);
  }
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const model::model_error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "probe failure: " << e.what() << "\n";
    return 3;
  }
}
