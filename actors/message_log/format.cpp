#include "actors/message_log/format.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <system_error>

#include "actors/message_log/crc32c.hpp"

namespace cuda_agent::message_log {
namespace {

// Little-endian stores and loads, written out so that the format does not depend on the host.
template <typename T>
void put_le(std::string& out, T value) {
  auto bits = static_cast<std::make_unsigned_t<T>>(value);
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

template <typename T>
void store_le(char* p, T value) {
  auto bits = static_cast<std::make_unsigned_t<T>>(value);
  for (size_t i = 0; i < sizeof(T); ++i) p[i] = static_cast<char>((bits >> (8 * i)) & 0xFF);
}

template <typename T>
T get_le(const char* p) {
  std::make_unsigned_t<T> bits = 0;
  for (size_t i = sizeof(T); i-- > 0;)
    bits = static_cast<decltype(bits)>((bits << 8) | static_cast<unsigned char>(p[i]));
  return static_cast<T>(bits);
}

void check_field(std::string_view name, std::string_view value) {
  if (value.size() > kMaxFieldBytes)
    throw std::invalid_argument(fmt::format("message log: {} is {} bytes; at most {} are allowed",
                                            name, value.size(), kMaxFieldBytes));
}

size_t body_size(const record_view& rec) {
  return kBodyFixedBytes + rec.sender.size() + rec.receiver.size() + rec.type.size() +
         rec.episode.size() + rec.payload.size();
}

}  // namespace

record record::from(const record_view& view) {
  return record{view.seq,
                view.ts_ns,
                std::string(view.sender),
                std::string(view.receiver),
                std::string(view.type),
                std::string(view.episode),
                std::string(view.payload)};
}

bool record::operator==(const record& other) const {
  return seq == other.seq && ts_ns == other.ts_ns && sender == other.sender &&
         receiver == other.receiver && type == other.type && episode == other.episode &&
         payload == other.payload;
}

size_t frame_size(const record_view& rec) { return kFrameHeaderBytes + body_size(rec); }

void encode_frame(const record_view& rec, std::string& out) {
  check_field("sender", rec.sender);
  check_field("receiver", rec.receiver);
  check_field("type", rec.type);
  check_field("episode", rec.episode);
  const size_t body_bytes = body_size(rec);
  if (body_bytes > kMaxBodyBytes)
    throw std::invalid_argument(fmt::format(
        "message log: a {} record of {} payload bytes exceeds the record limit of {} bytes; "
        "send large data out of band and log a reference to it",
        rec.type, rec.payload.size(), kMaxBodyBytes));

  const size_t frame_start = out.size();
  out.reserve(frame_start + kFrameHeaderBytes + body_bytes);
  put_le(out, static_cast<uint32_t>(body_bytes));
  put_le(out, uint32_t{0});  // checksum, filled in below once the body is in place
  const size_t body_start = out.size();
  put_le(out, rec.seq);
  put_le(out, rec.ts_ns);
  put_le(out, static_cast<uint16_t>(rec.sender.size()));
  put_le(out, static_cast<uint16_t>(rec.receiver.size()));
  put_le(out, static_cast<uint16_t>(rec.type.size()));
  put_le(out, static_cast<uint16_t>(rec.episode.size()));
  out.append(rec.sender).append(rec.receiver).append(rec.type).append(rec.episode);
  out.append(rec.payload);

  store_le(out.data() + frame_start + 4, crc32c(std::string_view(out).substr(body_start)));
}

frame_header decode_frame_header(const char* bytes) {
  return frame_header{get_le<uint32_t>(bytes), get_le<uint32_t>(bytes + 4)};
}

std::optional<std::string> decode_body(std::string_view body, record_view& out) {
  if (body.size() < kBodyFixedBytes)
    return fmt::format("body of {} bytes is shorter than its {} fixed bytes", body.size(),
                       kBodyFixedBytes);
  const char* p = body.data();
  out.seq = get_le<uint64_t>(p);
  out.ts_ns = get_le<int64_t>(p + 8);
  size_t lengths[4];
  size_t strings_bytes = 0;
  for (int i = 0; i < 4; ++i) {
    lengths[i] = get_le<uint16_t>(p + 16 + 2 * i);
    strings_bytes += lengths[i];
  }
  if (kBodyFixedBytes + strings_bytes > body.size())
    return fmt::format("string fields of {} bytes do not fit a body of {} bytes", strings_bytes,
                       body.size());
  size_t at = kBodyFixedBytes;
  std::string_view* fields[4] = {&out.sender, &out.receiver, &out.type, &out.episode};
  for (int i = 0; i < 4; ++i) {
    *fields[i] = body.substr(at, lengths[i]);
    at += lengths[i];
  }
  out.payload = body.substr(at);
  return std::nullopt;
}

frame_parse parse_frame(const char* bytes, size_t available, record_view& out) {
  if (available < kFrameHeaderBytes)
    return {frame_status::incomplete, kFrameHeaderBytes, available, {}};
  const frame_header header = decode_frame_header(bytes);
  if (header.body_bytes < kBodyFixedBytes || header.body_bytes > kMaxBodyBytes)
    return {frame_status::bad_length, 0, available,
            fmt::format("record length {} is outside [{}, {}]", header.body_bytes, kBodyFixedBytes,
                        kMaxBodyBytes)};
  const size_t frame_bytes = kFrameHeaderBytes + header.body_bytes;
  if (available < frame_bytes) return {frame_status::incomplete, frame_bytes, available, {}};
  const std::string_view body(bytes + kFrameHeaderBytes, header.body_bytes);
  const uint32_t actual_crc = crc32c(body);
  if (actual_crc != header.body_crc)
    return {frame_status::bad_checksum, frame_bytes, available,
            fmt::format("checksum mismatch (stored {:08x}, computed {:08x}) over {} body bytes",
                        header.body_crc, actual_crc, header.body_bytes)};
  if (auto error = decode_body(body, out))
    return {frame_status::bad_body, frame_bytes, available, *error};
  return {frame_status::ok, frame_bytes, available, {}};
}

std::string encode_segment_header(uint64_t first_seq) {
  std::string out(kSegmentMagic, sizeof kSegmentMagic);
  put_le(out, kFormatVersion);
  put_le(out, static_cast<uint32_t>(kSegmentHeaderBytes));
  put_le(out, first_seq);
  put_le(out, uint32_t{0});  // reserved
  put_le(out, crc32c(out));
  return out;
}

segment_header_parse decode_segment_header(const char* bytes) {
  if (std::memcmp(bytes, kSegmentMagic, sizeof kSegmentMagic) != 0)
    return {0, "bad magic: not a cuda-agent message log segment"};
  const auto stored_crc = get_le<uint32_t>(bytes + 28);
  const uint32_t actual_crc = crc32c(std::string_view(bytes, 28));
  if (stored_crc != actual_crc)
    return {0, fmt::format("segment header checksum mismatch (stored {:08x}, computed {:08x})",
                           stored_crc, actual_crc)};
  const auto version = get_le<uint32_t>(bytes + 8);
  if (version != kFormatVersion)
    return {0, fmt::format("format version {} is not supported (this build reads version {}); "
                           "use a cuda-agent that matches the log",
                           version, kFormatVersion)};
  const auto header_bytes = get_le<uint32_t>(bytes + 12);
  if (header_bytes != kSegmentHeaderBytes)
    return {0, fmt::format("segment header size {} is not {}", header_bytes, kSegmentHeaderBytes)};
  return {get_le<uint64_t>(bytes + 16), {}};
}

std::string segment_file_name(uint64_t first_seq) {
  return fmt::format("{:020}{}", first_seq, kSegmentSuffix);
}

std::optional<uint64_t> parse_segment_file_name(std::string_view file_name) {
  if (file_name.size() != 20 + kSegmentSuffix.size()) return std::nullopt;
  if (file_name.substr(20) != kSegmentSuffix) return std::nullopt;
  uint64_t value = 0;
  for (char c : file_name.substr(0, 20)) {
    if (c < '0' || c > '9') return std::nullopt;
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

std::vector<segment_info> list_segments(const std::filesystem::path& dir) {
  std::vector<segment_info> segments;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (auto first_seq = parse_segment_file_name(it->path().filename().native()))
      segments.push_back({it->path(), *first_seq});
  }
  if (ec)
    throw log_error(
        fmt::format("cannot list message log directory {}: {}", dir.string(), ec.message()));
  std::sort(segments.begin(), segments.end(),
            [](const segment_info& a, const segment_info& b) { return a.first_seq < b.first_seq; });
  return segments;
}

}  // namespace cuda_agent::message_log
