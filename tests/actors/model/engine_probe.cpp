// Drives a generation_engine from a JSON script, for tests/actors/model/test_engine.py.
//
//   engine_probe script.json > out.json
//
// The script: {"model": DIR, "dtype": "float32", "device": "cpu" (or "cuda:0"), "batched_decode": false, "cuda_graphs": false,
// "decode_pool": [slots, tokens] (optional),
// "options": {"max_batch", "cache_budget_bytes", "prefill_batch_tokens"},
// "ops": [...]}, each op one of
//   {"op": "submit", "name", "sequence_id", "prompt": [ids], "sampling": {...}}
//   {"op": "submit_parallel", "requests": [submit ops]}  each from a thread of its own, at once
//   {"op": "submit_all", "requests": [submit ops]}       in one submit_all call
//   {"op": "wait", "names": [...]}          the named results (or their errors) are recorded
//   {"op": "wait_all"}                      every result not waited for yet
//   {"op": "stats", "name"}                 engine_stats at this point
//   {"op": "release", "sequence_id"}
//   {"op": "update_weights", "model": DIR, "version": N}   weights read from another checkpoint
//   {"op": "new_engine", "options": {...}}  the old one destroyed first, the model kept
//   {"op": "destroy"}                       the engine destroyed with requests pending
//   {"op": "timer_start"} / {"op": "timer_stop", "name"}   wall seconds, recorded
// The output: {"results": {name: result | {"error": message}}, "stats": {name: ...},
// "timings": {name: seconds}, "errors": {op index: message}, "pooled_steps": decode steps run as one
// graph on the decode pool}.
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/model/generation_engine.hpp"

namespace model = cuda_agent::model;
using nlohmann::json;

namespace {

model::engine_options options_from(const json& j) {
  model::engine_options o;
  o.max_batch = j.value("max_batch", o.max_batch);
  o.cache_budget_bytes = j.value("cache_budget_bytes", o.cache_budget_bytes);
  o.prefill_batch_tokens = j.value("prefill_batch_tokens", o.prefill_batch_tokens);
  return o;
}

model::sampling_params sampling_from(const json& j) {
  model::sampling_params s;
  s.temperature = j.value("temperature", s.temperature);
  s.top_p = j.value("top_p", s.top_p);
  s.top_k = j.value("top_k", s.top_k);
  s.max_tokens = j.value("max_tokens", s.max_tokens);
  s.stop_token_ids = j.value("stop_token_ids", s.stop_token_ids);
  s.seed = j.value("seed", s.seed);
  return s;
}

json stats_json(const model::engine_stats& s) {
  return {{"prefilled_tokens", s.prefilled_tokens}, {"cached_tokens", s.cached_tokens},
          {"decoded_tokens", s.decoded_tokens},     {"decode_steps", s.decode_steps},
          {"prefill_steps", s.prefill_steps},
          {"evictions", s.evictions},               {"largest_batch", s.largest_batch},
          {"cache_bytes", s.cache_bytes},           {"slot_handovers", s.slot_handovers}};
}

torch::ScalarType dtype_from(const std::string& name) {
  if (name == "float32") return torch::kFloat32;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  throw std::runtime_error("unknown dtype " + name);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: engine_probe script.json\n";
    return 2;
  }
  std::ifstream in{argv[1]};
  json script = json::parse(in);
  const auto dtype = dtype_from(script.value("dtype", std::string{"float32"}));
  const torch::Device device{script.value("device", std::string{"cpu"})};
  auto transformer = model::transformer::load(script.at("model").get<std::string>(), device, dtype);
  transformer->set_batched_decode(script.value("batched_decode", false));
  transformer->set_cuda_graphs(script.value("cuda_graphs", false));
  if (script.contains("decode_pool")) {  // [slots, tokens]
    transformer->set_decode_pool(script["decode_pool"].at(0).get<int64_t>(), script["decode_pool"].at(1).get<int64_t>());
  }
  auto engine = std::make_unique<model::generation_engine>(
      transformer, options_from(script.value("options", json::object())));

  std::map<std::string, std::future<model::generation_result>> futures;
  json out = {{"results", json::object()}, {"stats", json::object()},
              {"timings", json::object()}, {"errors", json::object()}};
  auto collect = [&](const std::string& name) {
    auto it = futures.find(name);
    if (it == futures.end()) return;
    try {
      auto r = it->second.get();
      out["results"][name] = {{"token_ids", r.token_ids},         {"logprobs", r.logprobs},
                              {"finish_reason", r.finish_reason}, {"weight_version", r.weight_version},
                              {"prompt_tokens", r.prompt_tokens}, {"cached_tokens", r.cached_tokens}};
    } catch (const model::model_error& e) {
      out["results"][name] = {{"error", e.what()}};
    }
    futures.erase(it);
  };
  auto started = std::chrono::steady_clock::now();

  const auto& ops = script.at("ops");
  for (size_t i = 0; i < ops.size(); ++i) {
    const auto& op = ops[i];
    const auto kind = op.at("op").get<std::string>();
    try {
      auto request_of = [](const json& j) {
        model::generation_request r;
        r.sequence_id = j.value("sequence_id", std::string{});
        r.prompt = j.at("prompt").get<std::vector<int64_t>>();
        r.sampling = sampling_from(j.value("sampling", json::object()));
        return r;
      };
      if (kind == "submit") {
        futures[op.at("name").get<std::string>()] = engine->submit(request_of(op));
      } else if (kind == "submit_all") {
        std::vector<model::generation_request> requests;
        for (const auto& r : op.at("requests")) requests.push_back(request_of(r));
        auto submitted = engine->submit_all(std::move(requests));
        for (size_t k = 0; k < submitted.size(); ++k)
          futures[op.at("requests")[k].at("name").get<std::string>()] = std::move(submitted[k]);
      } else if (kind == "submit_parallel") {
        const auto& requests = op.at("requests");
        std::vector<std::future<model::generation_result>> submitted(requests.size());
        std::vector<std::thread> threads;
        for (size_t k = 0; k < requests.size(); ++k)
          threads.emplace_back([&, k] { submitted[k] = engine->submit(request_of(requests[k])); });
        for (auto& t : threads) t.join();
        for (size_t k = 0; k < requests.size(); ++k)
          futures[requests[k].at("name").get<std::string>()] = std::move(submitted[k]);
      } else if (kind == "wait") {
        for (const auto& name : op.at("names")) collect(name.get<std::string>());
      } else if (kind == "wait_all") {
        while (!futures.empty()) collect(futures.begin()->first);
      } else if (kind == "stats") {
        out["stats"][op.at("name").get<std::string>()] = stats_json(engine->stats());
      } else if (kind == "release") {
        engine->release(op.at("sequence_id").get<std::string>());
      } else if (kind == "update_weights") {
        auto source = model::transformer::load(op.at("model").get<std::string>(), device, dtype);
        engine->update_weights(source->named_parameters(), op.at("version").get<int64_t>());
      } else if (kind == "new_engine") {
        engine.reset();
        engine = std::make_unique<model::generation_engine>(
            transformer, options_from(op.value("options", json::object())));
      } else if (kind == "destroy") {
        engine.reset();
      } else if (kind == "timer_start") {
        started = std::chrono::steady_clock::now();
      } else if (kind == "timer_stop") {
        out["timings"][op.at("name").get<std::string>()] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      } else {
        throw std::runtime_error("unknown op " + kind);
      }
    } catch (const std::exception& e) {
      out["errors"][std::to_string(i)] = e.what();
    }
  }
  while (!futures.empty()) collect(futures.begin()->first);
  engine.reset();
  out["pooled_steps"] = transformer->pooled_steps();
  std::cout << out.dump() << "\n";
  return 0;
}
