// One field list per message type drives everything that walks its fields: CAF inspection (the
// wire between actors and nodes), msgpack encoding (the message log) and equality. A second list
// that could drift from the first does not exist.
//
//   struct tool_call { std::string call_id; std::string tool; std::string arguments_json; };
//   CUDA_AGENT_FIELDS(tool_call, call_id, tool, arguments_json)
//
// msgpack encodes a message as a map from field name to value, so a log stays readable (and
// exportable to JSON) without the program that wrote it. Enumerations declared with
// CUDA_AGENT_ENUM are encoded as their names.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "messages/for_each.hpp"

namespace cuda_agent::detail {

// Splits "a, b, c" (the stringified field list) into names.
std::vector<std::string> split_names(std::string_view list);

template <class T, class = void>
struct has_fields : std::false_type {};
template <class T>
struct has_fields<T, std::void_t<decltype(field_names(static_cast<const T*>(nullptr)))>>
    : std::true_type {};

template <class T, class = void>
struct is_named_enum : std::false_type {};
template <class T>
struct is_named_enum<T, std::void_t<decltype(enum_names(static_cast<const T*>(nullptr)))>>
    : std::true_type {};

// Defined in codec.hpp: byte equality of the encodings, so that NaN (an absent measurement)
// compares equal to NaN.
template <class T>
bool encoded_equal(const T& a, const T& b);

}  // namespace cuda_agent::detail

#define CUDA_AGENT_FIELD_REF_(name) , x.name

#define CUDA_AGENT_FIELDS(T, ...)                                                           \
  template <class Inspector>                                                                \
  typename Inspector::result_type inspect(Inspector& f, T& x) {                             \
    return f(caf::meta::type_name(#T) CUDA_AGENT_FOR_EACH(CUDA_AGENT_FIELD_REF_, __VA_ARGS__)); \
  }                                                                                         \
  inline const std::vector<std::string>& field_names(const T*) {                            \
    static const auto names = ::cuda_agent::detail::split_names(#__VA_ARGS__);              \
    return names;                                                                           \
  }                                                                                         \
  constexpr const char* message_name(const T*) { return #T; }                              \
  inline bool operator==(const T& a, const T& b) {                                          \
    return ::cuda_agent::detail::encoded_equal(a, b);                                       \
  }                                                                                         \
  inline bool operator!=(const T& a, const T& b) { return !(a == b); }

// Declares `enum class E : uint8_t { a, b, c }` with to_string(E) and from_string(text, E&).
#define CUDA_AGENT_ENUM(E, ...)                                                   \
  enum class E : uint8_t { __VA_ARGS__ };                                         \
  inline const std::vector<std::string>& enum_names(const E*) {                   \
    static const auto names = ::cuda_agent::detail::split_names(#__VA_ARGS__);    \
    return names;                                                                 \
  }                                                                               \
  inline std::string to_string(E e) {                                             \
    const auto& names = enum_names(static_cast<const E*>(nullptr));               \
    const auto i = static_cast<size_t>(e);                                        \
    return i < names.size() ? names[i] : "<invalid " #E ">";                      \
  }                                                                               \
  inline bool from_string(std::string_view text, E& out) {                        \
    const auto& names = enum_names(static_cast<const E*>(nullptr));               \
    for (size_t i = 0; i < names.size(); ++i)                                     \
      if (names[i] == text) {                                                     \
        out = static_cast<E>(i);                                                  \
        return true;                                                              \
      }                                                                           \
    return false;                                                                 \
  }
