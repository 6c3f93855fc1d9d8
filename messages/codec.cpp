#include "messages/codec.hpp"

#include <cmath>

namespace cuda_agent {
namespace detail {

std::vector<std::string> split_names(std::string_view list) {
  std::vector<std::string> names;
  while (!list.empty()) {
    const auto comma = list.find(',');
    auto name = list.substr(0, comma);
    while (!name.empty() && (name.front() == ' ' || name.front() == '\n')) name.remove_prefix(1);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\n')) name.remove_suffix(1);
    names.emplace_back(name);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return names;
}

void field_converter::reject_unknown_field() const {
  for (uint32_t k = 0; k < in.via.map.size; ++k) {
    const auto& key = in.via.map.ptr[k].key;
    const auto name = key.type == msgpack::type::STR ? key.as<std::string>() : std::string{"?"};
    bool known = false;
    for (const auto& n : names) known = known || n == name;
    if (!known) throw decode_error{std::string{type} + ": unknown field '" + name + "'"};
  }
  throw decode_error{std::string{type} + ": a field appears more than once"};
}

}  // namespace detail

namespace {

nlohmann::json to_json(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL: return nullptr;
    case msgpack::type::BOOLEAN: return o.via.boolean;
    case msgpack::type::POSITIVE_INTEGER: return o.via.u64;
    case msgpack::type::NEGATIVE_INTEGER: return o.via.i64;
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      if (!std::isfinite(o.via.f64)) return nullptr;
      return o.via.f64;
    case msgpack::type::STR: return std::string{o.via.str.ptr, o.via.str.size};
    case msgpack::type::BIN: {
      static const char* digits = "0123456789abcdef";
      std::string hex;
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
        const auto& kv = o.via.map.ptr[i];
        const auto key = kv.key.type == msgpack::type::STR ? kv.key.as<std::string>()
                                                            : to_json(kv.key).dump();
        object[key] = to_json(kv.val);
      }
      return object;
    }
    case msgpack::type::EXT: return "<msgpack ext type " + std::to_string(o.via.ext.type()) + ">";
  }
  return nullptr;
}

}  // namespace

nlohmann::json msgpack_to_json(std::string_view bytes) {
  std::size_t offset = 0;
  msgpack::object_handle handle;
  try {
    handle = msgpack::unpack(bytes.data(), bytes.size(), offset);
  } catch (const std::exception& e) {
    throw decode_error{std::string{"payload is not valid msgpack ("} + e.what() + ")"};
  }
  return to_json(handle.get());
}

}  // namespace cuda_agent
