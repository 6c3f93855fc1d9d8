// One field list per message type drives everything that walks its fields: CAF inspection (the
// wire between actors and nodes), msgpack encoding (the message log) and equality. A second list
// that could drift from the first does not exist.
//
//   struct tool_call { std::string call_id; std::string tool; std::string arguments_json; };
//   CUDA_AGENT_FIELDS(tool_call, call_id, tool, arguments_json)
//
// defines, beside the struct: CAF's `inspect`, `field_names`, `message_name`, `==` and `!=`.
// Enumerations declared with CUDA_AGENT_ENUM get `to_string` and `from_string`; msgpack
// encodes them by name (codec.hpp).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "messages/for_each.hpp"

namespace cuda_agent {

// The name a message type has on the wire and in the log ("policy_request").
template <class T>
constexpr const char* type_name_of() {
  return message_name(static_cast<const T*>(nullptr));
}

namespace detail {

// Splits "a, b, c" (a stringified macro argument list) into names.
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

// An inspector in CAF's sense that hands the fields (without the type_name annotation) to a
// function: every walk over a message's fields goes through its one inspect overload.
template <class F>
struct field_visitor {
  using result_type = void;
  F& visit;
  template <class... Fields>
  void operator()(caf::meta::type_name_t, Fields&... fields) {
    visit(fields...);
  }
};

// Equality in which NaN (a measurement not taken) equals NaN, so that a message equals its
// decoded copy.
template <class T>
bool field_equal(const T& a, const T& b);

template <class T>
bool field_equal(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!field_equal(a[i], b[i])) return false;
  return true;
}

template <class T>
bool field_equal(const T& a, const T& b) {
  if constexpr (std::is_floating_point_v<T>)
    return a == b || (std::isnan(a) && std::isnan(b));
  else
    return a == b;
}

// The number of members of an aggregate: the largest N for which T{a1, ..., aN} compiles, where
// each a converts to any member type (the technique of Boost.PFR). It lets CUDA_AGENT_FIELDS
// check that its list names every member, since C++17 cannot enumerate them itself.
struct any_member {
  template <class T>
  operator T&() const&&;  // only named in unevaluated contexts
};
template <std::size_t>
using any_member_t = any_member;

template <class T, class Indices, class = void>
struct brace_constructible : std::false_type {};
template <class T, std::size_t... Is>
struct brace_constructible<T, std::index_sequence<Is...>, std::void_t<decltype(T{any_member_t<Is>{}...})>>
    : std::true_type {};

template <class T, std::size_t N = 0>
constexpr std::size_t member_count() {
  if constexpr (brace_constructible<T, std::make_index_sequence<N + 1>>::value)
    return member_count<T, N + 1>();
  else
    return N;
}

}  // namespace detail

// Calls f(field1, field2, ...) with the message's fields in declaration order.
template <class T, class F>
void visit_fields(T& message, F&& f) {
  static_assert(detail::has_fields<std::remove_const_t<T>>::value,
                "declare the type's fields with CUDA_AGENT_FIELDS");
  detail::field_visitor<F> visitor{f};
  inspect(visitor, message);
}

// Read-only walk: the fields are passed as const references.
template <class T, class F>
void visit_fields(const T& message, F&& f) {
  visit_fields(const_cast<T&>(message), [&f](auto&... fields) { f(std::as_const(fields)...); });
}

template <class T>
bool fields_equal(const T& a, const T& b) {
  bool equal = false;
  visit_fields(a, [&](const auto&... xs) {
    visit_fields(b, [&](const auto&... ys) { equal = (detail::field_equal(xs, ys) && ...); });
  });
  return equal;
}

}  // namespace cuda_agent

#define CUDA_AGENT_FIELD_REF_(name) , x.name

// The list must name every member of T, in declaration order (the count is checked at compile
// time for aggregates). Each expansion also takes one __COUNTER__ value, so that messages.hpp
// can check that every type declared there is listed in all_message_types.
#define CUDA_AGENT_FIELDS(T, ...)                                                               \
  template <class Inspector>                                                                    \
  typename Inspector::result_type inspect(Inspector& f, T& x) {                                 \
    return f(caf::meta::type_name(#T) CUDA_AGENT_FOR_EACH(CUDA_AGENT_FIELD_REF_, __VA_ARGS__)); \
  }                                                                                             \
  inline const std::vector<std::string>& field_names(const T*) {                                \
    static const auto names = ::cuda_agent::detail::split_names(#__VA_ARGS__);                  \
    return names;                                                                               \
  }                                                                                             \
  constexpr const char* message_name(const T*) { return #T; }                                   \
  inline bool operator==(const T& a, const T& b) { return ::cuda_agent::fields_equal(a, b); }   \
  inline bool operator!=(const T& a, const T& b) { return !(a == b); }                          \
  static_assert(!std::is_aggregate_v<T> ||                                                       \
                    ::cuda_agent::detail::member_count<T>() == CUDA_AGENT_NARGS(__VA_ARGS__),   \
                "CUDA_AGENT_FIELDS(" #T ", ...) must list every member of " #T);                \
  static_assert(__COUNTER__ >= 0, "counts declared message types")

// Declares `enum class E : uint8_t { a, b, c }` with `std::string to_string(E)` (CAF's
// deep_to_string and the msgpack encoding use it) and `bool from_string(std::string_view, E&)`.
#define CUDA_AGENT_ENUM(E, ...)                                                     \
  enum class E : uint8_t { __VA_ARGS__ };                                           \
  inline const std::vector<std::string>& enum_names(const E*) {                     \
    static const auto names = ::cuda_agent::detail::split_names(#__VA_ARGS__);      \
    return names;                                                                   \
  }                                                                                 \
  constexpr const char* enum_type_name(const E*) { return #E; }                     \
  inline std::string to_string(E e) {                                               \
    const auto& names = enum_names(static_cast<const E*>(nullptr));                 \
    const auto i = static_cast<std::size_t>(e);                                     \
    return i < names.size() ? names[i] : #E "(" + std::to_string(i) + ")";          \
  }                                                                                 \
  inline bool from_string(std::string_view text, E& out) {                          \
    const auto& names = enum_names(static_cast<const E*>(nullptr));                 \
    for (std::size_t i = 0; i < names.size(); ++i) {                                \
      if (names[i] == text) {                                                       \
        out = static_cast<E>(i);                                                    \
        return true;                                                                \
      }                                                                             \
    }                                                                               \
    return false;                                                                   \
  }                                                                                 \
  static_assert(true, "")
