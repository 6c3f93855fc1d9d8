// The tokenizer for test_tokenizer.py, which compares it with HF tokenizers. One JSON value a line:
//
//   tokenizer_probe encode TOKENIZER.json [--no-special] < texts.jsonl > ids.jsonl
//   tokenizer_probe encode-threads TOKENIZER.json THREADS < texts.jsonl > ids.jsonl
//   tokenizer_probe decode TOKENIZER.json [--skip-special] < ids.jsonl > texts.jsonl
//   tokenizer_probe pre-tokens TOKENIZER.json < texts.jsonl > pieces.jsonl
//   tokenizer_probe vocab TOKENIZER.json > vocab.json
//   tokenizer_probe bench TOKENIZER.json < texts.jsonl      (prints seconds of two passes)
//
// A text line is a JSON string, or {"hex": "..."} for bytes that need not be UTF-8. A model_error
// is printed on stderr and the exit status is 1.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/model/tokenizer.hpp"

namespace {

using cuda_agent::model::tokenizer;
using json = nlohmann::json;

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::vector<std::string> read_texts() {
  std::vector<std::string> texts;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    texts.push_back(j.is_string() ? j.get<std::string>() : from_hex(j.at("hex").get<std::string>()));
  }
  return texts;
}

void print_ids(const std::vector<int64_t>& ids) { std::cout << json(ids).dump() << '\n'; }

int run(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: tokenizer_probe encode|encode-threads|decode|pre-tokens|vocab|bench TOKENIZER.json ...\n";
    return 2;
  }
  const std::string command = argv[1];
  const tokenizer tok = tokenizer::load(argv[2]);
  const std::string option = argc > 3 ? argv[3] : "";
  if (command == "encode") {
    for (const std::string& text : read_texts()) print_ids(tok.encode(text, option != "--no-special"));
  } else if (command == "encode-threads") {
    const std::vector<std::string> texts = read_texts();
    const int threads = std::stoi(option);
    std::vector<std::thread> pool;
    // Every thread encodes every text, interleaved, so that they share and race on the cache.
    std::vector<std::vector<std::vector<int64_t>>> per_thread(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        auto& mine = per_thread[static_cast<std::size_t>(t)];
        mine.resize(texts.size());
        for (std::size_t k = 0; k < texts.size(); ++k) {
          const std::size_t i = (k + static_cast<std::size_t>(t) * 7919) % texts.size();
          mine[i] = tok.encode(texts[i]);
        }
      });
    }
    for (auto& th : pool) th.join();
    for (std::size_t i = 0; i < texts.size(); ++i) {
      for (int t = 1; t < threads; ++t) {
        if (per_thread[static_cast<std::size_t>(t)][i] != per_thread[0][i]) {
          std::cerr << "threads disagree on text " << i << '\n';
          return 1;
        }
      }
      print_ids(per_thread[0][i]);
    }
  } else if (command == "decode") {
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.empty()) continue;
      const auto ids = json::parse(line).get<std::vector<int64_t>>();
      std::cout << json(tok.decode(ids, option == "--skip-special")).dump() << '\n';
    }
  } else if (command == "pre-tokens") {
    for (const std::string& text : read_texts()) std::cout << json(tok.pre_tokens(text)).dump() << '\n';
  } else if (command == "vocab") {
    json tokens = json::array();
    const int64_t n = tok.vocab_size();
    for (int64_t id = 0; id < n; ++id) {
      const auto t = tok.id_to_token(id);
      tokens.push_back(t ? json(*t) : json());
    }
    json specials = json::object();
    for (const auto& a : tok.added_tokens())
      if (a.special) specials[a.content] = *tok.special_token_id(a.content);
    std::cout << json{{"vocab_size", n}, {"tokens", tokens}, {"special", specials}}.dump() << '\n';
  } else if (command == "bench") {
    const std::vector<std::string> texts = read_texts();
    json passes = json::array();
    std::size_t count = 0;
    for (int pass = 0; pass < 2; ++pass) {
      const auto start = std::chrono::steady_clock::now();
      count = 0;
      for (const std::string& text : texts) count += tok.encode(text, false).size();
      passes.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::cout << json{{"seconds", passes}, {"tokens", count}}.dump() << '\n';
  } else {
    std::cerr << "unknown command " << command << '\n';
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const cuda_agent::model::model_error& e) {
    std::cerr << e.what() << '\n';
    return 1;
  }
}
