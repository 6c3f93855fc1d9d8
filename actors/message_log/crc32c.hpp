// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every log record.
//
// Chosen over CRC-32 (zlib) because x86-64 computes it in hardware (SSE4.2 `crc32`), which keeps
// checksumming far below the cost of the write(2) it protects. The hardware path is picked at
// run time, so the build needs no -msse4.2 and the binary still runs on CPUs without it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cuda_agent::message_log {

// Continues a CRC over `size` more bytes. Start a fresh CRC with `crc = 0`; feeding the same
// bytes in pieces gives the same result as feeding them at once.
uint32_t crc32c_extend(uint32_t crc, const void* data, size_t size);

inline uint32_t crc32c(std::string_view bytes) {
  return crc32c_extend(0, bytes.data(), bytes.size());
}

// The two implementations behind crc32c_extend, exposed so that tests can check each.
uint32_t crc32c_extend_portable(uint32_t crc, const void* data, size_t size);  // slicing-by-8
// Only callable when crc32c_hardware_available(); SSE4.2 `crc32` instruction.
uint32_t crc32c_extend_hardware(uint32_t crc, const void* data, size_t size);
bool crc32c_hardware_available();

}  // namespace cuda_agent::message_log
