#include "actors/message_log/crc32c.hpp"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace cuda_agent::message_log {
namespace {

constexpr uint32_t kCheckValue = 0xE3069283;  // CRC-32C of "123456789", the standard check

TEST(Crc32c, PortableMatchesCheckValue) {
  EXPECT_EQ(crc32c_extend_portable(0, "123456789", 9), kCheckValue);
}

TEST(Crc32c, HardwareMatchesCheckValue) {
  if (!crc32c_hardware_available()) GTEST_SKIP() << "this CPU has no SSE4.2";
  EXPECT_EQ(crc32c_extend_hardware(0, "123456789", 9), kCheckValue);
}

TEST(Crc32c, DispatchedMatchesCheckValue) { EXPECT_EQ(crc32c("123456789"), kCheckValue); }

// Known vectors from RFC 3720 (iSCSI), appendix B.4.
TEST(Crc32c, MatchesRfc3720Vectors) {
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c(""), 0u);
}

// Both paths must agree on every length and alignment, including the byte-wise tails.
TEST(Crc32c, PathsAgreeOnRandomData) {
  std::mt19937 rng(42);
  std::string data(4096 + 16, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t start = 0; start < 9; ++start) {
    for (size_t size : {0, 1, 7, 8, 9, 15, 16, 63, 64, 65, 1000, 4096}) {
      const uint32_t portable = crc32c_extend_portable(0, data.data() + start, size);
      EXPECT_EQ(crc32c(std::string_view(data.data() + start, size)), portable)
          << "start " << start << " size " << size;
      if (crc32c_hardware_available()) {
        EXPECT_EQ(crc32c_extend_hardware(0, data.data() + start, size), portable)
            << "start " << start << " size " << size;
      }
    }
  }
}

TEST(Crc32c, ExtendInPiecesEqualsWhole) {
  const std::string text = "the quick brown fox jumps over the lazy dog, twice over";
  const uint32_t whole = crc32c(text);
  for (size_t split = 0; split <= text.size(); ++split) {
    const uint32_t first = crc32c_extend(0, text.data(), split);
    EXPECT_EQ(crc32c_extend(first, text.data() + split, text.size() - split), whole) << split;
    EXPECT_EQ(crc32c_extend_portable(crc32c_extend_portable(0, text.data(), split),
                                     text.data() + split, text.size() - split),
              whole)
        << split;
  }
}

}  // namespace
}  // namespace cuda_agent::message_log
