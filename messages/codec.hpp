// msgpack encoding of protocol messages, strict decoding, and rendering of any msgpack payload as
// JSON (for `cuda-agent log show --payload` and `log export`).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include "messages/fields.hpp"

namespace cuda_agent {

// A payload that is not a valid encoding of the expected type. The message names the type and,
// where there is one, the field.
struct decode_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The name a message type has in the log and on the wire ("policy_request").
template <class T>
constexpr const char* type_name_of() {
  return message_name(static_cast<const T*>(nullptr));
}

template <class T>
std::string encode(const T& message) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, message);
  return std::string{buffer.data(), buffer.size()};
}

// Decodes exactly one T from the bytes: a truncated payload, trailing bytes, a missing, extra or
// mistyped field all throw decode_error.
template <class T>
T decode(std::string_view bytes) {
  msgpack::object_handle handle;
  std::size_t offset = 0;
  try {
    handle = msgpack::unpack(bytes.data(), bytes.size(), offset);
  } catch (const std::exception& e) {
    throw decode_error{std::string{type_name_of<T>()} + ": payload is not valid msgpack (" +
                       e.what() + ")"};
  }
  if (offset != bytes.size())
    throw decode_error{std::string{type_name_of<T>()} + ": " +
                       std::to_string(bytes.size() - offset) + " trailing bytes after the message"};
  T out;
  handle.get().convert(out);
  return out;
}

// Renders any msgpack value: maps with string keys become objects, NaN and infinities null,
// binary data a hex string.
nlohmann::json msgpack_to_json(std::string_view bytes);

namespace detail {

template <class T>
bool encoded_equal(const T& a, const T& b) {
  return encode(a) == encode(b);
}

// Walks a message's fields (through its inspect overload) and packs them as a name -> value map.
template <class Stream>
struct field_packer {
  using result_type = void;
  msgpack::packer<Stream>& out;
  const std::vector<std::string>& names;

  template <class... Fields>
  void operator()(caf::meta::type_name_t, Fields&... fields) {
    out.pack_map(static_cast<uint32_t>(sizeof...(Fields)));
    std::size_t i = 0;
    ((out.pack(names[i++]), out.pack(fields)), ...);
  }
};

// Fills a message's fields from a name -> value map, strictly.
struct field_converter {
  using result_type = void;
  const msgpack::object& in;
  const std::vector<std::string>& names;
  const char* type;

  template <class... Fields>
  void operator()(caf::meta::type_name_t, Fields&... fields) {
    if (in.type != msgpack::type::MAP)
      throw decode_error{std::string{type} + ": expected a map of fields"};
    std::size_t i = 0;
    (convert_field(names[i++], fields), ...);
    if (in.via.map.size != sizeof...(Fields)) reject_unknown_field();
  }

  template <class Field>
  void convert_field(const std::string& name, Field& field) {
    for (uint32_t k = 0; k < in.via.map.size; ++k) {
      const auto& entry = in.via.map.ptr[k];
      if (entry.key.type == msgpack::type::STR && entry.key.as<std::string_view>() == name) {
        try {
          entry.val.convert(field);
        } catch (const msgpack::type_error&) {
          throw decode_error{std::string{type} + ": field '" + name + "' has the wrong type"};
        }
        return;
      }
    }
    throw decode_error{std::string{type} + ": field '" + name + "' is missing"};
  }

  void reject_unknown_field() const;
};

}  // namespace detail
}  // namespace cuda_agent

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  template <class T>
  struct pack<T, std::enable_if_t<cuda_agent::detail::has_fields<T>::value>> {
    template <class Stream>
    packer<Stream>& operator()(packer<Stream>& out, const T& message) const {
      cuda_agent::detail::field_packer<Stream> walk{out,
                                                    field_names(static_cast<const T*>(nullptr))};
      inspect(walk, const_cast<T&>(message));  // the packer only reads
      return out;
    }
  };

  template <class T>
  struct convert<T, std::enable_if_t<cuda_agent::detail::has_fields<T>::value>> {
    const msgpack::object& operator()(const msgpack::object& in, T& message) const {
      cuda_agent::detail::field_converter walk{in, field_names(static_cast<const T*>(nullptr)),
                                               cuda_agent::type_name_of<T>()};
      inspect(walk, message);
      return in;
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
      if (!from_string(in.as<std::string_view>(), value))
        throw cuda_agent::decode_error{"unknown enumeration value '" + in.as<std::string>() + "'"};
      return in;
    }
  };

  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE
}  // namespace msgpack
