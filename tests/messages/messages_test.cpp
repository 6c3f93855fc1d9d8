#include <gtest/gtest.h>

#include <functional>
#include <set>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include "messages/registry.hpp"
#include "tests/messages/samples.hpp"

namespace cuda_agent {
namespace {

// One actor system with the protocol registered, for the tests that need CAF's wire format. It
// lives in a gtest environment so that it is torn down before exit: an actor_system destroyed
// during static destruction reads CAF state that is already gone.
class caf_environment : public ::testing::Environment {
 public:
  void SetUp() override {
    register_message_types(cfg_);
    system_ = std::make_unique<caf::actor_system>(cfg_);
  }
  void TearDown() override { system_.reset(); }
  static caf::actor_system& system() { return *system_; }

 private:
  caf::actor_system_config cfg_;
  static inline std::unique_ptr<caf::actor_system> system_;
};

[[maybe_unused]] auto* const registered_environment =
    ::testing::AddGlobalTestEnvironment(new caf_environment);

caf::actor_system& actor_system() { return caf_environment::system(); }

template <class List>
struct gtest_types;
template <class... Ts>
struct gtest_types<caf::detail::type_list<Ts...>> {
  using type = ::testing::Types<Ts...>;
};

template <class T>
class every_message : public ::testing::Test {};
TYPED_TEST_SUITE(every_message, gtest_types<all_message_types>::type);

TYPED_TEST(every_message, sample_sets_every_field) {
  // Each field of the sample is compared with a default instance through the msgpack map.
  const auto set = msgpack_to_json(encode(testing::sample<TypeParam>()));
  const auto unset = msgpack_to_json(encode(TypeParam{}));
  ASSERT_EQ(set.size(), field_names(static_cast<const TypeParam*>(nullptr)).size());
  for (const auto& [name, value] : set.items())
    EXPECT_NE(value, unset.at(name)) << type_name_of<TypeParam>() << "." << name;
}

TYPED_TEST(every_message, msgpack_round_trip) {
  const auto original = testing::sample<TypeParam>();
  const auto bytes = encode(original);
  const auto decoded = decode<TypeParam>(bytes);
  EXPECT_EQ(decoded, original);
  EXPECT_EQ(encode(decoded), bytes);
}

TYPED_TEST(every_message, caf_binary_round_trip) {
  const auto original = testing::sample<TypeParam>();
  std::vector<char> buffer;
  caf::binary_serializer sink{actor_system(), buffer};
  ASSERT_FALSE(sink(const_cast<TypeParam&>(original)));
  TypeParam decoded;
  caf::binary_deserializer source{actor_system(), buffer};
  ASSERT_FALSE(source(decoded));
  EXPECT_EQ(decoded, original);
}

TYPED_TEST(every_message, caf_message_round_trip_through_the_registry) {
  // A caf::message is serialized with the registered type name; an unregistered type would
  // fail to serialize or come back empty.
  auto msg = caf::make_message(testing::sample<TypeParam>());
  std::vector<char> buffer;
  caf::binary_serializer sink{actor_system(), buffer};
  ASSERT_FALSE(sink(msg));
  caf::message decoded;
  caf::binary_deserializer source{actor_system(), buffer};
  ASSERT_FALSE(source(decoded));
  ASSERT_TRUE(decoded.match_elements<TypeParam>()) << caf::to_string(decoded);
  EXPECT_EQ(decoded.get_as<TypeParam>(0), testing::sample<TypeParam>());
}

TYPED_TEST(every_message, every_truncation_is_a_decode_error) {
  const auto bytes = encode(testing::sample<TypeParam>());
  for (std::size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(decode<TypeParam>(std::string_view{bytes}.substr(0, n)), decode_error) << n;
}

TEST(message_types, names_are_unique_and_listed) {
  const auto& names = message_type_names();
  EXPECT_EQ(names.size(), 23u);
  std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size());
  EXPECT_EQ(std::string{type_name_of<policy_request>()}, "policy_request");
}

std::string decode_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const decode_error& e) {
    return e.what();
  }
  return "";
}

// Builds a payload by hand from a JSON-like list of (name, packer action) pairs.
std::string tool_call_map(bool drop_tool, bool extra_field, bool tool_as_int) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> out{buffer};
  out.pack_map(3 - (drop_tool ? 1 : 0) + (extra_field ? 1 : 0));
  out.pack(std::string{"call_id"});
  out.pack(std::string{"c1"});
  if (!drop_tool) {
    out.pack(std::string{"tool"});
    if (tool_as_int) out.pack(7);
    else out.pack(std::string{"Bash"});
  }
  out.pack(std::string{"arguments_json"});
  out.pack(std::string{"{}"});
  if (extra_field) {
    out.pack(std::string{"surprise"});
    out.pack(1);
  }
  return {buffer.data(), buffer.size()};
}

TEST(decode_errors, name_the_type_and_the_field) {
  EXPECT_NO_THROW(decode<tool_call>(tool_call_map(false, false, false)));
  EXPECT_EQ(decode_error_of([] { decode<tool_call>(tool_call_map(true, false, false)); }),
            "tool_call: field 'tool' is missing");
  EXPECT_EQ(decode_error_of([] { decode<tool_call>(tool_call_map(false, true, false)); }),
            "tool_call: unknown field 'surprise'");
  EXPECT_EQ(decode_error_of([] { decode<tool_call>(tool_call_map(false, false, true)); }),
            "tool_call: field 'tool' has the wrong type");
}

TEST(decode_errors, another_type_payload_is_rejected) {
  const auto bytes = encode(testing::sample<policy_request>());
  const auto error = decode_error_of([&] { decode<tool_result>(bytes); });
  EXPECT_EQ(error.rfind("tool_result: ", 0), 0u) << error;
}

TEST(decode_errors, trailing_bytes_and_non_maps) {
  auto bytes = encode(testing::sample<node_leave>()) + "x";
  EXPECT_NE(decode_error_of([&] { decode<node_leave>(bytes); }).find("1 trailing bytes"),
            std::string::npos);
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, 42);
  EXPECT_EQ(decode_error_of([&] { decode<node_leave>({buffer.data(), buffer.size()}); }),
            "node_leave: expected a map of fields");
}

TEST(decode_errors, unknown_enum_name) {
  auto json = msgpack_to_json(encode(testing::sample<episode_ended>()));
  EXPECT_EQ(json["reason"], "token_budget");  // enums travel by name
  auto bytes = encode(testing::sample<episode_ended>());
  const std::string from = "token_budget", to = "token_budgex";
  bytes.replace(bytes.find(from), from.size(), to);
  EXPECT_NE(decode_error_of([&] { decode<episode_ended>(bytes); }).find("'token_budgex'"),
            std::string::npos);
}

TEST(json_rendering, field_names_nesting_and_nan_as_null) {
  reward_record r;  // times not measured: NaN
  r.episode_id = "ep-1";
  const auto json = msgpack_to_json(encode(r));
  EXPECT_EQ(json["episode_id"], "ep-1");
  EXPECT_TRUE(json["t_new_ms"].is_null());
  EXPECT_EQ(json["reward"], -1);
  const auto nested = msgpack_to_json(encode(testing::sample<profile_result>()));
  EXPECT_DOUBLE_EQ(nested["candidate"]["median_ms"].get<double>(), 0.9);
  const auto traj = msgpack_to_json(encode(testing::sample<trajectory_turn>()));
  EXPECT_EQ(traj["loss_mask"], "010100");  // bytes render as hex
}

TEST(json_rendering, invalid_msgpack_is_an_error) {
  EXPECT_THROW(msgpack_to_json("\xc1"), decode_error);  // 0xc1 is never used
  EXPECT_THROW(msgpack_to_json(""), decode_error);
}

TEST(milestone_reward, follows_the_paper) {
  EXPECT_EQ(milestone_reward(false, 1.0, 10.0, 10.0), -1);  // incorrect, however fast
  EXPECT_EQ(milestone_reward(true, 1.0, 10.0, 10.0), 3);
  EXPECT_EQ(milestone_reward(true, 1.0, 10.0, 1.0), 2);    // beats eager only
  EXPECT_EQ(milestone_reward(true, 10.0, 10.0, 10.0), 1);  // correct, not faster
  EXPECT_EQ(milestone_reward(true, 1.0, 1.0, 10.0), 1);    // beating compile alone earns nothing
}

TEST(milestone_reward, five_percent_is_not_faster) {
  // (100 - 95) / 100 = 0.05 exactly: not more than 5%.
  EXPECT_EQ(milestone_reward(true, 95.0, 100.0, 100.0), 1);
  EXPECT_EQ(milestone_reward(true, 94.99, 100.0, 100.0), 3);
  EXPECT_EQ(milestone_reward(true, 94.99, 100.0, 99.9), 2);  // (99.9-94.99)/99.9 = 4.9%
}

TEST(milestone_reward, unmeasured_times_are_never_faster) {
  EXPECT_EQ(milestone_reward(true, not_measured, 10.0, 10.0), 1);
  EXPECT_EQ(milestone_reward(true, 1.0, not_measured, 10.0), 1);
  EXPECT_EQ(milestone_reward(true, 1.0, 10.0, not_measured), 2);
}

}  // namespace
}  // namespace cuda_agent
