// The on-disk format of the message log: segment headers, record frames and record bodies.
// FORMAT.md in this folder describes the same layout byte by byte; keep the two in step.
//
// Everything here is pure (bytes in, bytes out); files and descriptors live in writer/reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace cuda_agent::message_log {

// An I/O failure or a log that cannot be used (bad header, another writer holds it). The message
// names the file and says what to do.
struct log_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// --- Constants -----------------------------------------------------------------------------

inline constexpr char kSegmentMagic[8] = {'C', 'A', 'M', 'S', 'G', 'L', 'O', 'G'};
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr size_t kSegmentHeaderBytes = 32;
inline constexpr size_t kFrameHeaderBytes = 8;  // u32 body length, u32 CRC-32C of the body
inline constexpr size_t kBodyFixedBytes = 24;   // seq, timestamp, four string lengths
// A corrupt length field must not make a reader allocate gigabytes; no message comes near this.
inline constexpr size_t kMaxBodyBytes = size_t{64} << 20;
inline constexpr size_t kMaxFieldBytes = 0xFFFF;  // sender, receiver, type, episode: u16 lengths
inline constexpr std::string_view kSegmentSuffix = ".seg";

// --- Records ---------------------------------------------------------------------------------

// One decoded record whose strings point into a buffer owned by someone else (the reader's, or
// the bytes handed to decode_body); valid until that buffer changes.
struct record_view {
  uint64_t seq = 0;
  int64_t ts_ns = 0;  // nanoseconds since the Unix epoch (system clock of the writer)
  std::string_view sender;
  std::string_view receiver;
  std::string_view type;
  std::string_view episode;  // empty when the message belongs to no episode
  std::string_view payload;  // msgpack bytes, opaque to the log
};

// The same record owning its bytes.
struct record {
  uint64_t seq = 0;
  int64_t ts_ns = 0;
  std::string sender;
  std::string receiver;
  std::string type;
  std::string episode;
  std::string payload;

  static record from(const record_view& view);
  bool operator==(const record& other) const;
};

// Size of the frame that encode_frame would produce (header + body).
size_t frame_size(const record_view& rec);

// Appends one framed record (length, checksum, body) to `out`. Throws std::invalid_argument if a
// string field exceeds kMaxFieldBytes or the body exceeds kMaxBodyBytes.
void encode_frame(const record_view& rec, std::string& out);

struct frame_header {
  uint32_t body_bytes = 0;
  uint32_t body_crc = 0;
};
frame_header decode_frame_header(const char* bytes);  // reads kFrameHeaderBytes

// Decodes a body whose checksum was verified. Returns an error text if the field lengths do not
// fit inside the body.
std::optional<std::string> decode_body(std::string_view body, record_view& out);

// Why a frame at some offset does not hold a valid record.
enum class frame_status {
  ok,
  incomplete,    // fewer bytes available than the frame needs: torn tail or a write in flight
  bad_length,    // length below the fixed body size or above kMaxBodyBytes
  bad_checksum,  // body does not match its CRC-32C
  bad_body,      // checksum matches but the fields do not fit the body
};

struct frame_parse {
  frame_status status = frame_status::incomplete;
  size_t frame_bytes = 0;  // when ok: bytes the frame occupies; when incomplete: bytes it needs
                           // (kFrameHeaderBytes if even the length is missing)
  size_t available = 0;    // bytes that were available from the frame's start
  std::string detail;      // human-readable reason when not ok
};

// Parses the frame that starts at `bytes` given `available` bytes from there to the end of the
// data known so far.
frame_parse parse_frame(const char* bytes, size_t available, record_view& out);

// --- Segments --------------------------------------------------------------------------------

std::string encode_segment_header(uint64_t first_seq);

// Returns the first sequence number, or an error text naming what is wrong with the header.
struct segment_header_parse {
  uint64_t first_seq = 0;
  std::string error;  // empty when valid
};
segment_header_parse decode_segment_header(const char* bytes);  // reads kSegmentHeaderBytes

// "00000000000000000001.seg": the first sequence number, zero-padded to 20 digits so that
// lexical and numeric order agree.
std::string segment_file_name(uint64_t first_seq);
std::optional<uint64_t> parse_segment_file_name(std::string_view file_name);

struct segment_info {
  std::filesystem::path path;
  uint64_t first_seq = 0;  // from the file name
};

// The segment files of a log directory in sequence order (other files are ignored). Throws
// log_error if the directory cannot be listed.
std::vector<segment_info> list_segments(const std::filesystem::path& dir);

}  // namespace cuda_agent::message_log
