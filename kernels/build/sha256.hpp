// SHA-256 (FIPS 180-4), for the content-addressed build cache: object files and modules are
// named by the digest of everything that went into them.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cuda_agent::build {

class sha256 {
 public:
  sha256();
  sha256& update(std::string_view bytes);
  // Feeds a length-prefixed field, so that ("ab","c") and ("a","bc") hash differently.
  sha256& field(std::string_view bytes);
  std::string hex();  // finishes the digest; the object is spent afterwards

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;
};

inline std::string sha256_hex(std::string_view bytes) { return sha256{}.update(bytes).hex(); }

}  // namespace cuda_agent::build
