#include "actors/message_log/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace cuda_agent::message_log {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // Castagnoli, bit-reversed

// kTables[0] is the classic byte-at-a-time table; kTables[k][b] is the CRC of byte b followed by
// k zero bytes, which lets the portable path fold 8 input bytes per step (slicing-by-8).
using crc_tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr crc_tables make_tables() {
  crc_tables tables{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? kPolynomial : 0);
    tables[0][byte] = crc;
  }
  for (size_t k = 1; k < 8; ++k)
    for (size_t byte = 0; byte < 256; ++byte)
      tables[k][byte] = (tables[k - 1][byte] >> 8) ^ tables[0][tables[k - 1][byte] & 0xFF];
  return tables;
}

constexpr crc_tables kTables = make_tables();

inline uint64_t load_u64_le(const unsigned char* p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t extend_sse42(uint32_t crc, const unsigned char* p,
                                                        size_t size) {
  uint64_t state = crc;
  for (; size >= 8; size -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, sizeof word);  // unaligned-safe; x86 is little-endian
    state = _mm_crc32_u64(state, word);
  }
  auto state32 = static_cast<uint32_t>(state);
  for (; size > 0; --size, ++p) state32 = _mm_crc32_u8(state32, *p);
  return state32;
}
#endif

using extend_fn = uint32_t (*)(uint32_t, const void*, size_t);

extend_fn pick_implementation() {
  return crc32c_hardware_available() ? &crc32c_extend_hardware : &crc32c_extend_portable;
}

}  // namespace

uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t size) {
  auto* p = static_cast<const unsigned char*>(data);
  uint32_t state = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    const uint64_t word = load_u64_le(p) ^ state;
    state = kTables[7][word & 0xFF] ^ kTables[6][(word >> 8) & 0xFF] ^
            kTables[5][(word >> 16) & 0xFF] ^ kTables[4][(word >> 24) & 0xFF] ^
            kTables[3][(word >> 32) & 0xFF] ^ kTables[2][(word >> 40) & 0xFF] ^
            kTables[1][(word >> 48) & 0xFF] ^ kTables[0][word >> 56];
  }
  for (; size > 0; --size, ++p) state = (state >> 8) ^ kTables[0][(state ^ *p) & 0xFF];
  return ~state;
}

uint32_t crc32c_extend_hardware(uint32_t crc, const void* data, size_t size) {
#if defined(__x86_64__)
  return ~extend_sse42(~crc, static_cast<const unsigned char*>(data), size);
#else
  return crc32c_extend_portable(crc, data, size);
#endif
}

bool crc32c_hardware_available() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size) {
  static const extend_fn implementation = pick_implementation();
  return implementation(crc, data, size);
}

}  // namespace cuda_agent::message_log
