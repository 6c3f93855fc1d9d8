#include "actors/cluster/node_auth.hpp"

#include <array>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/build/sha256.hpp"

namespace cuda_agent::cluster {
namespace {

std::string bytes_of_hex(const std::string& hex) {
  std::string bytes;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return bytes;
}

}  // namespace

std::string read_token_file(const std::filesystem::path& path) {
  std::ifstream in{path, std::ios::binary};
  if (!in)
    throw std::runtime_error{fmt::format("--token-file {}: cannot be read; write the cluster's shared token "
                                         "into it (e.g. `head -c 32 /dev/urandom | base64 > {}`)",
                                         path.string(), path.string())};
  std::stringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  const auto first = token.find_first_not_of(" \t\r\n");
  const auto last = token.find_last_not_of(" \t\r\n");
  token = first == std::string::npos ? std::string{} : token.substr(first, last - first + 1);
  if (token.size() < 16)
    throw std::runtime_error{fmt::format("--token-file {}: the token is {} characters; use at least 16 "
                                         "(e.g. `head -c 32 /dev/urandom | base64 > {}`)",
                                         path.string(), token.size(), path.string())};
  return token;
}

std::string random_nonce() {
  std::ifstream urandom{"/dev/urandom", std::ios::binary};
  std::array<unsigned char, 32> bytes{};
  if (!urandom.read(reinterpret_cast<char*>(bytes.data()), bytes.size()))
    throw std::runtime_error{"cannot read /dev/urandom for a nonce"};
  std::string hex;
  for (const auto b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

std::string hmac_sha256_hex(std::string_view key, std::string_view message) {
  constexpr std::size_t block = 64;
  std::string k{key};
  if (k.size() > block) k = bytes_of_hex(build::sha256_hex(k));
  k.resize(block, '\0');
  std::string inner_pad = k, outer_pad = k;
  for (std::size_t i = 0; i < block; ++i) {
    inner_pad[i] = static_cast<char>(inner_pad[i] ^ 0x36);
    outer_pad[i] = static_cast<char>(outer_pad[i] ^ 0x5c);
  }
  const auto inner = bytes_of_hex(build::sha256{}.update(inner_pad).update(message).hex());
  return build::sha256{}.update(outer_pad).update(inner).hex();
}

bool same_secret(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string coordinator_proof(std::string_view token, std::string_view node_nonce) {
  return hmac_sha256_hex(token, fmt::format("cuda-agent coordinator\n{}", node_nonce));
}

std::string node_proof(std::string_view token, std::string_view coordinator_nonce, std::string_view node_id) {
  return hmac_sha256_hex(token, fmt::format("cuda-agent node\n{}\n{}", coordinator_nonce, node_id));
}

}  // namespace cuda_agent::cluster
