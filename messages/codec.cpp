#include "messages/codec.hpp"

#include <algorithm>
#include <cmath>

#include "messages/messages.hpp"

namespace cuda_agent {
namespace detail {

std::vector<std::string> split_names(std::string_view list) {
  constexpr std::string_view blanks = " \t\r\n";
  std::vector<std::string> names;
  while (!list.empty()) {
    const auto comma = list.find(',');
    auto name = list.substr(0, comma);
    name.remove_prefix(std::min(name.size(), name.find_first_not_of(blanks)));
    name.remove_suffix(name.size() - std::min(name.size(), name.find_last_not_of(blanks) + 1));
    names.emplace_back(name);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return names;
}

namespace {

// The deepest protocol message nests about five levels; anything much deeper is corrupt, and
// bounding it keeps the recursive JSON rendering off the end of the stack.
constexpr std::size_t max_depth = 64;

std::string_view key_of(const msgpack::object& key) {
  return key.type == msgpack::type::STR ? std::string_view{key.via.str.ptr, key.via.str.size}
                                        : std::string_view{};
}

// "the string \"Bash\"", "the integer 7", "an array of 3 values": what a payload held, for errors.
std::string describe(const msgpack::object& value) {
  constexpr std::size_t max_shown = 40;
  auto shown = [&](const nlohmann::json& j) {
    auto text = j.dump();
    if (text.size() > max_shown) text = text.substr(0, max_shown) + "...";
    return text;
  };
  switch (value.type) {
    case msgpack::type::NIL: return "nil";
    case msgpack::type::BOOLEAN: return value.via.boolean ? "the boolean true" : "the boolean false";
    case msgpack::type::POSITIVE_INTEGER: return "the integer " + std::to_string(value.via.u64);
    case msgpack::type::NEGATIVE_INTEGER: return "the integer " + std::to_string(value.via.i64);
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return "the number " + std::to_string(value.via.f64);
    case msgpack::type::STR:
      return "the string " + shown(std::string{value.via.str.ptr, value.via.str.size});
    case msgpack::type::BIN: return std::to_string(value.via.bin.size) + " bytes of binary";
    case msgpack::type::ARRAY: return "an array of " + std::to_string(value.via.array.size);
    case msgpack::type::MAP: return "a map of " + std::to_string(value.via.map.size);
    case msgpack::type::EXT: return "an ext value";
  }
  return "an unknown value";
}

nlohmann::json to_json(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL: return nullptr;
    case msgpack::type::BOOLEAN: return o.via.boolean;
    case msgpack::type::POSITIVE_INTEGER: return o.via.u64;
    case msgpack::type::NEGATIVE_INTEGER: return o.via.i64;
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      // JSON has no NaN or infinity; NaN is how messages say "not measured".
      if (!std::isfinite(o.via.f64)) return nullptr;
      return o.via.f64;
    case msgpack::type::STR: return std::string{o.via.str.ptr, o.via.str.size};
    case msgpack::type::BIN: {
      constexpr char digits[] = "0123456789abcdef";
      std::string hex;
      hex.reserve(2 * o.via.bin.size);
      for (uint32_t i = 0; i < o.via.bin.size; ++i) {
        const auto byte = static_cast<unsigned char>(o.via.bin.ptr[i]);
        hex += digits[byte >> 4];
        hex += digits[byte & 15];
      }
      return hex;
    }
    case msgpack::type::ARRAY: {
      auto array = nlohmann::json::array();
      for (uint32_t i = 0; i < o.via.array.size; ++i) array.push_back(to_json(o.via.array.ptr[i]));
      return array;
    }
    case msgpack::type::MAP: {
      auto object = nlohmann::json::object();
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        const auto& entry = o.via.map.ptr[i];
        auto key = entry.key.type == msgpack::type::STR ? std::string{key_of(entry.key)}
                                                        : to_json(entry.key).dump();
        object[std::move(key)] = to_json(entry.val);
      }
      return object;
    }
    case msgpack::type::EXT:
      return "<msgpack ext type " + std::to_string(o.via.ext.type()) + ", " +
             std::to_string(o.via.ext.size) + " bytes>";
  }
  return nullptr;
}

}  // namespace

msgpack::object_handle unpack_exactly_one(std::string_view bytes, std::string_view what) {
  // Every element of a container takes at least one byte, so no valid payload exceeds these.
  const msgpack::unpack_limit limits{bytes.size(), bytes.size(), bytes.size(),
                                     bytes.size(), bytes.size(), max_depth};
  std::size_t offset = 0;
  msgpack::object_handle handle;
  try {
    handle = msgpack::unpack(bytes.data(), bytes.size(), offset, nullptr, nullptr, limits);
  } catch (const msgpack::insufficient_bytes&) {
    throw decode_error{std::string{what} + ": payload is truncated (" +
                       std::to_string(bytes.size()) + " bytes)"};
  } catch (const std::exception& e) {
    throw decode_error{std::string{what} + ": payload is not valid msgpack (" + e.what() + ")"};
  }
  if (offset != bytes.size())
    throw decode_error{std::string{what} + ": " + std::to_string(bytes.size() - offset) +
                       " trailing bytes after the payload"};
  return handle;
}

const msgpack::object* find_field(const msgpack::object& map, const std::string& name) {
  for (uint32_t i = 0; i < map.via.map.size; ++i)
    if (key_of(map.via.map.ptr[i].key) == name) return &map.via.map.ptr[i].val;
  return nullptr;
}

void throw_missing_field(const char* type, const std::string& name) {
  throw decode_error{std::string{type} + ": field '" + name + "' is missing"};
}

void throw_field_error(const char* type, const std::string& name, const msgpack::object& value,
                       const std::exception& e) {
  // A nested message or enumeration already said what is wrong; add where it is.
  if (dynamic_cast<const decode_error*>(&e) != nullptr)
    throw decode_error{std::string{type} + ": field '" + name + "': " + e.what()};
  throw decode_error{std::string{type} + ": field '" + name + "' has the wrong type or range (got " +
                     describe(value) + ")"};
}

void throw_not_a_map(const char* type, const msgpack::object& value) {
  throw decode_error{std::string{type} + ": expected a map of fields, got " + describe(value)};
}

void throw_extra_fields(const char* type, const msgpack::object& map,
                        const std::vector<std::string>& names) {
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& key = map.via.map.ptr[i].key;
    if (key.type != msgpack::type::STR)
      throw decode_error{std::string{type} + ": a field name is not a string (got " +
                         describe(key) + ")"};
    if (std::find(names.begin(), names.end(), key_of(key)) == names.end())
      throw decode_error{std::string{type} + ": unknown field '" + std::string{key_of(key)} + "'"};
  }
  // Every key is a known name, so some name appears twice.
  for (const auto& name : names) {
    uint32_t count = 0;
    for (uint32_t i = 0; i < map.via.map.size; ++i) count += key_of(map.via.map.ptr[i].key) == name;
    if (count > 1)
      throw decode_error{std::string{type} + ": field '" + name + "' appears " +
                         std::to_string(count) + " times"};
  }
  throw decode_error{std::string{type} + ": map size does not match its fields"};
}

void throw_unknown_enum_name(const char* enum_type, const msgpack::object& value) {
  throw decode_error{"unknown " + std::string{enum_type} + " '" + std::string{key_of(value)} +
                     "'"};
}

}  // namespace detail

namespace {

// Reads each retired field of `map` that is present into its successor; returns how many it read.
template <class Message, class... Fields>
uint32_t read_retired(const msgpack::object& map, Message& message,
                      std::pair<const char*, Fields*>... retired) {
  const char* type = type_name_of<Message>();
  uint32_t read = 0;
  auto one = [&](const char* name, auto* successor) {
    const msgpack::object* value = detail::find_field(map, name);
    if (value == nullptr) return;
    if (detail::find_field(map, "judging") != nullptr)
      throw decode_error{std::string{type} + ": field '" + name + "' is retired (now in 'judging'), but both are given"};
    try {
      value->convert(*successor);
    } catch (const std::exception& e) {
      detail::throw_field_error(type, name, *value, e);
    }
    ++read;
  };
  (one(retired.first, retired.second), ...);
  return read;
}

}  // namespace

uint32_t read_retired_fields(const msgpack::object& map, verify_job& job) {
  auto& j = job.judging;
  return read_retired(map, job, std::pair{"atol", &j.atol}, std::pair{"rtol", &j.rtol},
                      std::pair{"input_sets", &j.input_sets});
}

uint32_t read_retired_fields(const msgpack::object& map, profile_job& job) {
  auto& j = job.judging;
  const uint32_t read =
      read_retired(map, job, std::pair{"warmup_runs", &j.warmup_runs}, std::pair{"timed_runs", &j.timed_runs});
  // There 0 meant "the profiler slot's setting", which those logs did not record.
  const judging_parameters defaults;
  if (j.warmup_runs <= 0) j.warmup_runs = defaults.warmup_runs;
  if (j.timed_runs <= 0) j.timed_runs = defaults.timed_runs;
  return read;
}

nlohmann::json msgpack_to_json(std::string_view bytes) {
  return detail::to_json(detail::unpack_exactly_one(bytes, "msgpack payload").get());
}

}  // namespace cuda_agent
