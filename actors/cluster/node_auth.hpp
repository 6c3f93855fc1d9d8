// The shared secret of a cluster and the proofs built on it. A node and the coordinator each prove
// that they hold the token without sending it: each signs the other's fresh nonce with
// HMAC-SHA256 keyed by the token, and a nonce is good for one proof only. So a peer that merely
// reached the port, or replays a proof it overheard, gets nothing. (Without TLS the messages
// themselves are not encrypted: see cluster.tls_* in config/README.md.)
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace cuda_agent::cluster {

// The token file's contents without surrounding whitespace. Throws std::runtime_error (one line)
// when the file is missing, unreadable, empty or shorter than 16 characters.
std::string read_token_file(const std::filesystem::path& path);

// 32 random bytes from the kernel, as hex.
std::string random_nonce();

std::string hmac_sha256_hex(std::string_view key, std::string_view message);

// Compares in time that depends only on the lengths, so a proof is not guessed byte by byte.
bool same_secret(std::string_view a, std::string_view b);

// The coordinator's proof over the nonce a node (or `status`) sent with its hello.
std::string coordinator_proof(std::string_view token, std::string_view node_nonce);
// A node's proof over the coordinator's nonce, bound to the node's name.
std::string node_proof(std::string_view token, std::string_view coordinator_nonce, std::string_view node_id);

}  // namespace cuda_agent::cluster
