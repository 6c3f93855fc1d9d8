// msgpack encoding of protocol messages (the message log's payloads), strict decoding, and
// rendering of any msgpack payload as JSON (`cuda-agent log show`, `log export`).
//
// A message is encoded as a map from field name to value, and an enumeration as its name, so a
// payload describes itself: a log can be read without the program that wrote it. Decoding is
// strict: a payload that is not exactly one well-formed encoding of the expected type throws
// decode_error naming the type and the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include "messages/fields.hpp"

namespace cuda_agent {

// A payload that is not a valid encoding of the expected type, e.g.
// "profile_result: field 'eager': timing_stats: field 'cv' is missing".
struct decode_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class T>
std::string encode(const T& message) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, message);
  return std::string{buffer.data(), buffer.size()};
}

namespace detail {

// Parses exactly one msgpack value spanning all of `bytes`; `what` prefixes error messages.
// Container sizes are bounded by the payload's length, so a corrupt length cannot make the
// parser allocate gigabytes.
msgpack::object_handle unpack_exactly_one(std::string_view bytes, std::string_view what);

}  // namespace detail

// Decodes exactly one T from the bytes. A truncated payload, trailing bytes, a payload that is not
// a map, a missing, extra, duplicated or mistyped field and an unknown enumeration name all
// throw decode_error. Fields are only ever appended to a type, so a payload that lacks the last
// fields of its type (written before they were added: an older log) decodes them to their
// defaults; a field missing before one that is present is an error.
template <class T>
T decode(std::string_view bytes) {
  const auto handle = detail::unpack_exactly_one(bytes, type_name_of<T>());
  T message;
  try {
    handle.get().convert(message);
  } catch (const decode_error&) {
    throw;
  } catch (const std::exception& e) {
    throw decode_error{std::string{type_name_of<T>()} + ": " + e.what()};
  }
  return message;
}

// Renders any msgpack payload: maps become objects (keys that are not strings are rendered as
// JSON text), NaN and infinities become null, binary data a lowercase hex string, ext values a
// placeholder string. Throws decode_error when the bytes are not exactly one msgpack value.
nlohmann::json msgpack_to_json(std::string_view bytes);

namespace detail {

// Not templates, so that they are compiled once (codec.cpp).
const msgpack::object* find_field(const msgpack::object& map, const std::string& name);
[[noreturn]] void throw_missing_field(const char* type, const std::string& name);
[[noreturn]] void throw_field_error(const char* type, const std::string& name,
                                    const msgpack::object& value, const std::exception& e);
[[noreturn]] void throw_not_a_map(const char* type, const msgpack::object& value);
// Called when the map holds more entries than the fields that were found in it.
[[noreturn]] void throw_extra_fields(const char* type, const msgpack::object& map,
                                     const std::vector<std::string>& names);
[[noreturn]] void throw_unknown_enum_name(const char* enum_type, const msgpack::object& value);

// Converts the field when the map holds it; a missing one is remembered in `first_missing`, and
// is an error only when a later field is present (see decode).
template <class Field>
void convert_field(const msgpack::object& map, const char* type, const std::string& name,
                   Field& field, const std::string*& first_missing, uint32_t& found) {
  const msgpack::object* value = find_field(map, name);
  if (value == nullptr) {
    if (first_missing == nullptr) first_missing = &name;
    return;
  }
  if (first_missing != nullptr) throw_missing_field(type, *first_missing);
  ++found;
  try {
    value->convert(field);
  } catch (const std::exception& e) {
    throw_field_error(type, name, *value, e);
  }
}

// A type whose older payloads hold fields it no longer has declares
//   uint32_t read_retired_fields(const msgpack::object& map, T& message);
// beside it: called when a payload holds entries besides the type's fields, it reads the retired
// ones it finds into their successors and returns how many it read (the rest are still an error).
template <class T, class = void>
struct has_retired_fields : std::false_type {};
template <class T>
struct has_retired_fields<T, std::void_t<decltype(read_retired_fields(std::declval<const msgpack::object&>(),
                                                                      std::declval<T&>()))>>
    : std::true_type {};

}  // namespace detail

struct verify_job;
struct profile_job;
// Older logs' verify_job.{atol, rtol, input_sets} and profile_job.{warmup_runs, timed_runs}, read
// into `judging`; a payload with both a retired field and `judging` is an error (codec.cpp).
uint32_t read_retired_fields(const msgpack::object& map, verify_job& job);
uint32_t read_retired_fields(const msgpack::object& map, profile_job& job);

}  // namespace cuda_agent

// msgpack-c adaptors for every type declared with CUDA_AGENT_FIELDS or CUDA_AGENT_ENUM.
namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  template <class T>
  struct pack<T, std::enable_if_t<cuda_agent::detail::has_fields<T>::value>> {
    template <class Stream>
    packer<Stream>& operator()(packer<Stream>& out, const T& message) const {
      const auto& names = field_names(static_cast<const T*>(nullptr));
      cuda_agent::visit_fields(message, [&](const auto&... fields) {
        out.pack_map(static_cast<uint32_t>(sizeof...(fields)));
        std::size_t i = 0;
        ((out.pack(names[i++]), out.pack(fields)), ...);
      });
      return out;
    }
  };

  template <class T>
  struct convert<T, std::enable_if_t<cuda_agent::detail::has_fields<T>::value>> {
    const msgpack::object& operator()(const msgpack::object& in, T& message) const {
      const char* type = cuda_agent::type_name_of<T>();
      if (in.type != msgpack::type::MAP) cuda_agent::detail::throw_not_a_map(type, in);
      const auto& names = field_names(static_cast<const T*>(nullptr));
      message = T{};  // the fields a payload lacks keep their defaults
      const std::string* first_missing = nullptr;
      uint32_t found = 0;
      cuda_agent::visit_fields(message, [&](auto&... fields) {
        std::size_t i = 0;
        (cuda_agent::detail::convert_field(in, type, names[i++], fields, first_missing, found),
         ...);
      });
      if (in.via.map.size != found) {
        if constexpr (cuda_agent::detail::has_retired_fields<T>::value)
          found += read_retired_fields(in, message);
        if (in.via.map.size != found) cuda_agent::detail::throw_extra_fields(type, in, names);
      }
      return in;
    }
  };

  template <class T>
  struct object_with_zone<T, std::enable_if_t<cuda_agent::detail::has_fields<T>::value>> {
    void operator()(msgpack::object::with_zone& out, const T& message) const {
      const auto& names = field_names(static_cast<const T*>(nullptr));
      cuda_agent::visit_fields(message, [&](const auto&... fields) {
        constexpr auto size = sizeof...(fields);
        auto* entries = static_cast<msgpack::object_kv*>(out.zone.allocate_align(
            sizeof(msgpack::object_kv) * size, MSGPACK_ZONE_ALIGNOF(msgpack::object_kv)));
        std::size_t i = 0;
        ((entries[i].key = msgpack::object{names[i], out.zone},
          entries[i].val = msgpack::object{fields, out.zone}, ++i),
         ...);
        out.type = msgpack::type::MAP;
        out.via.map.size = static_cast<uint32_t>(size);
        out.via.map.ptr = entries;
      });
    }
  };

  template <class E>
  struct pack<E, std::enable_if_t<cuda_agent::detail::is_named_enum<E>::value>> {
    template <class Stream>
    packer<Stream>& operator()(packer<Stream>& out, const E& value) const {
      return out.pack(to_string(value));
    }
  };

  template <class E>
  struct convert<E, std::enable_if_t<cuda_agent::detail::is_named_enum<E>::value>> {
    const msgpack::object& operator()(const msgpack::object& in, E& value) const {
      if (in.type != msgpack::type::STR) throw msgpack::type_error{};
      if (!from_string(std::string_view{in.via.str.ptr, in.via.str.size}, value))
        cuda_agent::detail::throw_unknown_enum_name(enum_type_name(static_cast<const E*>(nullptr)),
                                                    in);
      return in;
    }
  };

  template <class E>
  struct object_with_zone<E, std::enable_if_t<cuda_agent::detail::is_named_enum<E>::value>> {
    void operator()(msgpack::object::with_zone& out, const E& value) const {
      object_with_zone<std::string>{}(out, to_string(value));
    }
  };

  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack
