#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <typeinfo>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

#include "messages/codec.hpp"
#include "messages/registry.hpp"
#include "messages/reward.hpp"
#include "tests/messages/samples.hpp"

namespace cuda_agent {

// gtest prints a message that fails a comparison the way CAF renders it.
template <class T, class = std::enable_if_t<detail::has_fields<T>::value>>
std::ostream& operator<<(std::ostream& out, const T& message) {
  return out << caf::deep_to_string(message);
}

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

template <class T>
std::size_t field_count() {
  return field_names(static_cast<const T*>(nullptr)).size();
}

// The message's field `index` set from `from`, every other field from `to`.
template <class T>
T with_field_from(T to, const T& from, std::size_t index) {
  visit_fields(to, [&](auto&... dst) {
    visit_fields(from, [&](const auto&... src) {
      std::size_t i = 0;
      ((i++ == index ? (void)(dst = src) : (void)0), ...);
    });
  });
  return to;
}

std::string decode_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const decode_error& e) {
    return e.what();
  }
  return "(no decode_error)";
}

// --- Every message type ------------------------------------------------------------------------

template <class List>
struct gtest_types;
template <class... Ts>
struct gtest_types<caf::detail::type_list<Ts...>> {
  using type = ::testing::Types<Ts...>;
};

template <class T>
class messages_every_type : public ::testing::Test {};
TYPED_TEST_SUITE(messages_every_type, gtest_types<all_message_types>::type);

TYPED_TEST(messages_every_type, sample_sets_every_field) {
  // Each field of the sample is compared with a default instance through the msgpack map, so a
  // field the sample forgot (and a round trip could not check) fails here.
  const auto set = msgpack_to_json(encode(testing::sample<TypeParam>()));
  const auto unset = msgpack_to_json(encode(TypeParam{}));
  ASSERT_TRUE(set.is_object());
  ASSERT_EQ(set.size(), field_count<TypeParam>());
  for (const auto& name : field_names(static_cast<const TypeParam*>(nullptr))) {
    ASSERT_TRUE(set.contains(name)) << name;
    EXPECT_NE(set.at(name), unset.at(name)) << type_name_of<TypeParam>() << "." << name;
  }
}

TYPED_TEST(messages_every_type, equality_compares_every_field) {
  const auto sample = testing::sample<TypeParam>();
  const TypeParam blank{};
  EXPECT_EQ(sample, sample);
  EXPECT_NE(sample, blank);
  for (std::size_t i = 0; i < field_count<TypeParam>(); ++i) {
    const auto one_field_changed = with_field_from(sample, blank, i);
    EXPECT_NE(one_field_changed, sample) << field_names(&sample)[i];
    EXPECT_FALSE(one_field_changed == sample) << field_names(&sample)[i];
  }
}

TYPED_TEST(messages_every_type, msgpack_round_trip) {
  const auto original = testing::sample<TypeParam>();
  const auto bytes = encode(original);
  const auto decoded = decode<TypeParam>(bytes);
  EXPECT_EQ(decoded, original);
  EXPECT_EQ(encode(decoded), bytes);
  // A default instance holds NaN for measurements not taken: it must survive as well.
  EXPECT_EQ(decode<TypeParam>(encode(TypeParam{})), TypeParam{});
}

TYPED_TEST(messages_every_type, msgpack_object_round_trip) {
  const auto original = testing::sample<TypeParam>();
  msgpack::zone zone;
  const msgpack::object object{original, zone};
  ASSERT_EQ(object.type, msgpack::type::MAP);
  EXPECT_EQ(object.via.map.size, field_count<TypeParam>());
  EXPECT_EQ(object.as<TypeParam>(), original);
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, object);  // the object packs to the same bytes as the message
  EXPECT_EQ(std::string(buffer.data(), buffer.size()), encode(original));
}

TYPED_TEST(messages_every_type, caf_binary_round_trip) {
  auto original = testing::sample<TypeParam>();
  std::vector<char> buffer;
  caf::binary_serializer sink{actor_system(), buffer};
  ASSERT_FALSE(sink(original));
  TypeParam decoded;
  caf::binary_deserializer source{actor_system(), buffer};
  ASSERT_FALSE(source(decoded));
  EXPECT_EQ(source.remaining(), 0u);
  EXPECT_EQ(decoded, original);
}

TYPED_TEST(messages_every_type, registered_with_caf_under_its_name) {
  EXPECT_EQ(actor_system().types().portable_name(0, &typeid(TypeParam)),
            type_name_of<TypeParam>());
}

TYPED_TEST(messages_every_type, caf_message_round_trip_through_the_registry) {
  // A caf::message is serialized with the registered type name, and deserialized by looking that
  // name up: an unregistered type fails here.
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

TYPED_TEST(messages_every_type, caf_renders_it_as_text) {
  const auto text = caf::deep_to_string(testing::sample<TypeParam>());
  EXPECT_EQ(text.rfind(type_name_of<TypeParam>(), 0), 0u) << text;
}

TYPED_TEST(messages_every_type, every_truncation_is_a_decode_error) {
  const auto bytes = encode(testing::sample<TypeParam>());
  for (std::size_t n = 0; n < bytes.size(); ++n)
    EXPECT_THROW(decode<TypeParam>(std::string_view{bytes}.substr(0, n)), decode_error) << n;
}

TYPED_TEST(messages_every_type, a_missing_field_before_a_present_one_is_named) {
  const auto& names = field_names(static_cast<const TypeParam*>(nullptr));
  for (std::size_t k = 0; k + 1 < names.size(); ++k) {
    const auto& name = names[k];
    msgpack::zone zone;
    msgpack::object object{testing::sample<TypeParam>(), zone};
    auto& map = object.via.map;
    for (uint32_t i = 0; i < map.size; ++i) {
      if (map.ptr[i].key.as<std::string>() == name) {
        map.ptr[i] = map.ptr[map.size - 1];
        --map.size;
        break;
      }
    }
    msgpack::sbuffer buffer;
    msgpack::pack(buffer, object);
    EXPECT_EQ(decode_error_of([&] { decode<TypeParam>({buffer.data(), buffer.size()}); }),
              std::string{type_name_of<TypeParam>()} + ": field '" + name + "' is missing");
  }
}

// A log written before a type's last fields were added: its payloads lack them, and they decode
// to the defaults while the fields that are there keep their values.
TYPED_TEST(messages_every_type, missing_last_fields_decode_to_their_defaults) {
  const auto& names = field_names(static_cast<const TypeParam*>(nullptr));
  const TypeParam defaults{};
  for (uint32_t kept = 0; kept < names.size(); ++kept) {
    msgpack::zone zone;
    msgpack::object older{testing::sample<TypeParam>(), zone};
    older.via.map.size = kept;  // entries are packed in field order
    msgpack::object expected{testing::sample<TypeParam>(), zone};
    const msgpack::object fresh{defaults, zone};
    for (uint32_t i = kept; i < names.size(); ++i) expected.via.map.ptr[i] = fresh.via.map.ptr[i];
    msgpack::sbuffer older_bytes;
    msgpack::pack(older_bytes, older);
    msgpack::sbuffer expected_bytes;
    msgpack::pack(expected_bytes, expected);
    EXPECT_EQ(decode<TypeParam>({older_bytes.data(), older_bytes.size()}),
              decode<TypeParam>({expected_bytes.data(), expected_bytes.size()}))
        << "first missing field: " << names[kept];
  }
}

TEST(messages_decode_older_logs, a_trajectory_from_before_turn_tool_calls) {
  msgpack::zone zone;
  msgpack::object older{testing::sample<trajectory>(), zone};
  auto& turns = older.via.map.ptr[3].val.via.array;  // trajectory.turns
  for (uint32_t i = 0; i < turns.size; ++i) {
    auto& turn = turns.ptr[i].via.map;
    ASSERT_EQ(turn.ptr[turn.size - 1].key.as<std::string>(), "tool_calls");
    --turn.size;
  }
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, older);
  const auto decoded = decode<trajectory>({buffer.data(), buffer.size()});
  auto expected = testing::sample<trajectory>();
  for (auto& turn : expected.turns) turn.tool_calls.clear();
  EXPECT_EQ(decoded, expected);
}

// A map of string keys to values, packed in the given order, as an older build wrote it.
template <class... Values>
std::string pack_map(const std::pair<const char*, Values>&... entries) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> out{buffer};
  out.pack_map(sizeof...(entries));
  ((out.pack(std::string{entries.first}), out.pack(entries.second)), ...);
  return {buffer.data(), buffer.size()};
}

TEST(messages_decode_older_logs, a_verify_job_with_its_tolerances_beside_the_paths) {
  const std::string older = pack_map(
      std::pair{"job_id", std::string{"j"}}, std::pair{"episode_id", std::string{"e"}},
      std::pair{"task_path", std::string{"/t.py"}}, std::pair{"solution_dir", std::string{"/w"}},
      std::pair{"module_path", std::string{"/m"}}, std::pair{"device", std::string{"cpu"}},
      std::pair{"atol", 0.05}, std::pair{"rtol", 0.02}, std::pair{"input_sets", 3},
      std::pair{"seed", uint64_t{9}});
  const auto job = decode<verify_job>(older);
  EXPECT_EQ(job.judging.atol, 0.05);
  EXPECT_EQ(job.judging.rtol, 0.02);
  EXPECT_EQ(job.judging.input_sets, 3);
  EXPECT_EQ(job.seed, 9u);
  EXPECT_EQ(job.judging.timed_runs, judging_parameters{}.timed_runs);  // not recorded then
}

TEST(messages_decode_older_logs, a_profile_job_with_its_run_counts) {
  auto older_with = [](int32_t warmup, int32_t timed) {
    return pack_map(std::pair{"job_id", std::string{"j"}}, std::pair{"episode_id", std::string{"e"}},
                    std::pair{"task_path", std::string{"/t.py"}}, std::pair{"solution_dir", std::string{"/w"}},
                    std::pair{"module_path", std::string{"/m"}}, std::pair{"device", std::string{"cuda"}},
                    std::pair{"warmup_runs", warmup}, std::pair{"timed_runs", timed});
  };
  const auto counted = decode<profile_job>(older_with(2, 7));
  EXPECT_EQ(counted.judging.warmup_runs, 2);
  EXPECT_EQ(counted.judging.timed_runs, 7);
  // 0 meant "the slot's setting", which was not recorded: the defaults stand in.
  const auto unset = decode<profile_job>(older_with(0, 0));
  EXPECT_EQ(unset.judging.warmup_runs, judging_parameters{}.warmup_runs);
  EXPECT_EQ(unset.judging.timed_runs, judging_parameters{}.timed_runs);
}

TEST(messages_decode_older_logs, a_retired_field_beside_judging_is_an_error) {
  // A current verify_job's fields and one more entry, named `extra`.
  auto current_with = [](const char* extra) {
    return pack_map(std::pair{"job_id", std::string{"j"}}, std::pair{"episode_id", std::string{"e"}},
                    std::pair{"task_path", std::string{"/t.py"}}, std::pair{"solution_dir", std::string{"/w"}},
                    std::pair{"module_path", std::string{"/m"}}, std::pair{"device", std::string{"cpu"}},
                    std::pair{"seed", uint64_t{9}}, std::pair{"judging", testing::sample<judging_parameters>()},
                    std::pair{extra, 0.05});
  };
  try {
    decode<verify_job>(current_with("atol"));
    FAIL() << "decoded a verify_job with both atol and judging";
  } catch (const decode_error& e) {
    EXPECT_NE(std::string{e.what()}.find("'atol' is retired"), std::string::npos) << e.what();
  }
  // A field that was never one of verify_job's is still an error.
  EXPECT_THROW(decode<verify_job>(current_with("tolerance")), decode_error);
}

// --- Registry ----------------------------------------------------------------------------------

TEST(messages_registry, names_follow_the_list) {
  const auto& names = message_type_names();
  EXPECT_EQ(names.size(), caf::detail::tl_size<all_message_types>::value);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  EXPECT_EQ(names.front(), "task_spec");
  EXPECT_EQ(std::string{type_name_of<policy_request>()}, "policy_request");
}

TEST(messages_registry, check_payload_decodes_by_the_named_type) {
  const auto bytes = encode(testing::sample<policy_request>());
  EXPECT_NO_THROW(check_payload("policy_request", bytes));
  const auto other = decode_error_of([&] { check_payload("tool_result", bytes); });
  EXPECT_EQ(other.rfind("tool_result: ", 0), 0u) << other;
  EXPECT_EQ(decode_error_of([&] { check_payload("no_such_type", bytes); }),
            "unknown message type 'no_such_type'");
}

TEST(messages_registry, enums_have_names_both_ways) {
  EXPECT_EQ(to_string(termination::infrastructure_failure), "infrastructure_failure");
  EXPECT_EQ(to_string(learner_phase::value_pretrain), "value_pretrain");
  EXPECT_EQ(to_string(static_cast<termination>(42)), "termination(42)");
  termination t{};
  EXPECT_TRUE(from_string("timeout", t));
  EXPECT_EQ(t, termination::timeout);
  EXPECT_FALSE(from_string("Timeout", t));
  EXPECT_EQ(t, termination::timeout);  // left alone on failure
  EXPECT_NE(caf::deep_to_string(testing::sample<episode_ended>()).find("token_budget"),
            std::string::npos);
}

// --- Decoding errors ---------------------------------------------------------------------------

// A tool_call map written by hand, with the given deviations.
struct tool_call_payload {
  bool drop_tool = false;
  bool tool_as_int = false;
  bool extra_field = false;
  bool duplicate_call_id = false;

  std::string bytes() const {
    msgpack::sbuffer buffer;
    msgpack::packer<msgpack::sbuffer> out{buffer};
    out.pack_map(4 - drop_tool + extra_field + duplicate_call_id);
    out.pack(std::string{"call_id"});
    out.pack(std::string{"c1"});
    if (!drop_tool) {
      out.pack(std::string{"tool"});
      if (tool_as_int)
        out.pack(7);
      else
        out.pack(std::string{"Bash"});
    }
    out.pack(std::string{"arguments_json"});
    out.pack(std::string{"{}"});
    out.pack(std::string{"parse_error"});
    out.pack(std::string{});
    if (extra_field) {
      out.pack(std::string{"surprise"});
      out.pack(1);
    }
    if (duplicate_call_id) {
      out.pack(std::string{"call_id"});
      out.pack(std::string{"c2"});
    }
    return {buffer.data(), buffer.size()};
  }
};

TEST(messages_decode_errors, name_the_type_and_the_field) {
  EXPECT_EQ(decode<tool_call>(tool_call_payload{}.bytes()), (tool_call{"c1", "Bash", "{}"}));
  EXPECT_EQ(decode_error_of([] { decode<tool_call>(tool_call_payload{true}.bytes()); }),
            "tool_call: field 'tool' is missing");
  EXPECT_EQ(decode_error_of([] { decode<tool_call>(tool_call_payload{false, true}.bytes()); }),
            "tool_call: field 'tool' has the wrong type or range (got the integer 7)");
  EXPECT_EQ(
      decode_error_of([] { decode<tool_call>(tool_call_payload{false, false, true}.bytes()); }),
      "tool_call: unknown field 'surprise'");
  EXPECT_EQ(decode_error_of(
                [] { decode<tool_call>(tool_call_payload{false, false, false, true}.bytes()); }),
            "tool_call: field 'call_id' appears 2 times");
}

TEST(messages_decode_errors, another_types_payload_is_rejected) {
  const auto bytes = encode(testing::sample<policy_request>());
  // Its episode_id matches; the rest of tool_result's fields are missing, which an older log could
  // explain, but the fields of policy_request it holds instead cannot be.
  EXPECT_EQ(decode_error_of([&] { decode<tool_result>(bytes); }),
            "tool_result: unknown field 'task_id'");
}

TEST(messages_decode_errors, integer_out_of_range) {
  auto json = msgpack_to_json(encode(testing::sample<node_join>()));
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> out{buffer};
  out.pack_map(6);
  for (const auto& name : field_names(static_cast<const node_join*>(nullptr))) {
    out.pack(name);
    if (name == "port")
      out.pack(70000);  // does not fit uint16_t
    else if (name == "devices")
      out.pack(json[name].get<std::vector<std::string>>());
    else if (json[name].is_string())
      out.pack(json[name].get<std::string>());
    else
      out.pack(json[name].get<int32_t>());
  }
  EXPECT_EQ(decode_error_of([&] { decode<node_join>({buffer.data(), buffer.size()}); }),
            "node_join: field 'port' has the wrong type or range (got the integer 70000)");
}

TEST(messages_decode_errors, nested_errors_say_where) {
  // profile_result.eager is a timing_stats; drop its "cv".
  msgpack::zone zone;
  msgpack::object object{testing::sample<profile_result>(), zone};
  for (uint32_t i = 0; i < object.via.map.size; ++i) {
    if (object.via.map.ptr[i].key.as<std::string>() != "eager") continue;
    auto& stats = object.via.map.ptr[i].val.via.map;
    ASSERT_EQ(stats.ptr[stats.size - 2].key.as<std::string>(), "cv");
    stats.ptr[stats.size - 2] = stats.ptr[stats.size - 1];
    --stats.size;
  }
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, object);
  EXPECT_EQ(decode_error_of([&] { decode<profile_result>({buffer.data(), buffer.size()}); }),
            "profile_result: field 'eager': timing_stats: field 'cv' is missing");
}

TEST(messages_decode_errors, unknown_enum_name) {
  auto bytes = encode(testing::sample<episode_ended>());
  EXPECT_EQ(msgpack_to_json(bytes)["reason"], "token_budget");  // enums travel by name
  const std::string from = "token_budget", to = "token_budgex";
  bytes.replace(bytes.find(from), from.size(), to);
  EXPECT_EQ(decode_error_of([&] { decode<episode_ended>(bytes); }),
            "episode_ended: field 'reason': unknown termination 'token_budgex'");
}

TEST(messages_decode_errors, enum_that_is_not_a_string) {
  msgpack::zone zone;
  msgpack::object object{testing::sample<learner_update>(), zone};
  for (uint32_t i = 0; i < object.via.map.size; ++i)
    if (object.via.map.ptr[i].key.as<std::string>() == "phase")
      object.via.map.ptr[i].val = msgpack::object{2};
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, object);
  EXPECT_EQ(decode_error_of([&] { decode<learner_update>({buffer.data(), buffer.size()}); }),
            "learner_update: field 'phase' has the wrong type or range (got the integer 2)");
}

TEST(messages_decode_errors, truncated_trailing_and_not_a_map) {
  const auto bytes = encode(testing::sample<node_leave>());
  EXPECT_EQ(decode_error_of([&] { decode<node_leave>(bytes.substr(0, 5)); }),
            "node_leave: payload is truncated (5 bytes)");
  EXPECT_EQ(decode_error_of([&] { decode<node_leave>(""); }),
            "node_leave: payload is truncated (0 bytes)");
  EXPECT_EQ(decode_error_of([&] { decode<node_leave>(bytes + "xy"); }),
            "node_leave: 2 trailing bytes after the payload");
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, std::vector<int>{1, 2});
  EXPECT_EQ(decode_error_of([&] { decode<node_leave>({buffer.data(), buffer.size()}); }),
            "node_leave: expected a map of fields, got an array of 2");
}

TEST(messages_decode_errors, corrupt_lengths_do_not_allocate) {
  // An array header claiming 2^32 - 1 elements in a 5-byte payload.
  const std::string bytes{"\xdd\xff\xff\xff\xff", 5};
  const auto error = decode_error_of([&] { decode<node_leave>(bytes); });
  EXPECT_EQ(error.rfind("node_leave: payload is not valid msgpack", 0), 0u) << error;
  EXPECT_THROW(msgpack_to_json(bytes), decode_error);
}

// --- JSON rendering ----------------------------------------------------------------------------

TEST(messages_json, field_names_nesting_and_nan_as_null) {
  reward_record r;  // times not measured: NaN
  r.episode_id = "ep-1";
  const auto json = msgpack_to_json(encode(r));
  EXPECT_EQ(json["episode_id"], "ep-1");
  EXPECT_TRUE(json["t_new_ms"].is_null());
  EXPECT_TRUE(json["speedup_compile"].is_null());
  EXPECT_EQ(json["reward"], -1);
  EXPECT_EQ(json["violations"], nlohmann::json::array());
  const auto nested = msgpack_to_json(encode(testing::sample<profile_result>()));
  EXPECT_DOUBLE_EQ(nested["candidate"]["median_ms"].get<double>(), 0.9);
  const auto turn = msgpack_to_json(encode(testing::sample<trajectory_turn>()));
  EXPECT_EQ(turn["loss_mask"], "010100");  // std::vector<uint8_t> is msgpack bin: hex
  EXPECT_FLOAT_EQ(turn["logprobs"][1].get<float>(), -0.25f);
  const auto task = msgpack_to_json(encode(testing::sample<task_spec>()));
  EXPECT_EQ(task["metadata"]["dtype"], "float32");
}

TEST(messages_json, any_msgpack_value) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> out{buffer};
  out.pack_array(7);
  out.pack_nil();
  out.pack(true);
  out.pack(-3);
  out.pack(std::numeric_limits<double>::infinity());
  out.pack(1.5f);
  out.pack_map(1);
  out.pack(7);
  out.pack(std::string{"seven"});
  out.pack(std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(msgpack_to_json({buffer.data(), buffer.size()}),
            nlohmann::json::parse(R"([null, true, -3, null, 1.5, {"7": "seven"},
                                      18446744073709551615])"));
}

TEST(messages_json, invalid_msgpack_is_an_error) {
  EXPECT_THROW(msgpack_to_json("\xc1"), decode_error);  // 0xc1 is never used
  EXPECT_THROW(msgpack_to_json(""), decode_error);
  EXPECT_THROW(msgpack_to_json("\x01\x02"), decode_error);  // two values
}

TEST(messages_json, check_json_matches_the_contract) {
  auto r = testing::sample<reward_record>();
  auto json = check_json(r);
  std::set<std::string> keys;
  for (const auto& item : json.items()) keys.insert(item.key());
  EXPECT_EQ(keys, (std::set<std::string>{"compiled", "correct", "violations", "reward",
                                         "t_eager_ms", "t_compile_ms", "t_new_ms",
                                         "speedup_eager", "speedup_compile", "error",
                                         "timing"}));
  EXPECT_EQ(json["timing"]["baseline"], "cached");
  EXPECT_EQ(json["timing"]["measurements"], 2);
  EXPECT_EQ(json["timing"]["reliable"], true);
  EXPECT_EQ(json["reward"], 3);
  EXPECT_EQ(json["error"], "late result");
  EXPECT_DOUBLE_EQ(json["t_new_ms"].get<double>(), 0.9);
  json = check_json(reward_record{});
  EXPECT_TRUE(json["error"].is_null());
  EXPECT_TRUE(json["t_eager_ms"].is_null());
  EXPECT_TRUE(json["speedup_eager"].is_null());
  EXPECT_TRUE(json["timing"]["cv_new"].is_null());
  EXPECT_EQ(json["compiled"], false);
  EXPECT_EQ(json["reward"], -1);
}

// --- Milestone reward --------------------------------------------------------------------------

TEST(messages_milestone_reward, follows_the_paper) {
  EXPECT_EQ(milestone_reward(false, 1.0, 10.0, 10.0), -1);  // incorrect, however fast
  EXPECT_EQ(milestone_reward(true, 1.0, 10.0, 10.0), 3);
  EXPECT_EQ(milestone_reward(true, 1.0, 10.0, 1.0), 2);    // beats eager only
  EXPECT_EQ(milestone_reward(true, 10.0, 10.0, 10.0), 1);  // correct, not faster
  EXPECT_EQ(milestone_reward(true, 1.0, 1.0, 10.0), 1);    // beating compile alone earns 1
  EXPECT_EQ(milestone_reward(true, 20.0, 10.0, 10.0), 1);  // slower still counts as correct
}

TEST(messages_milestone_reward, exactly_five_percent_is_not_faster) {
  // (100 - 95) / 100 = 0.05 exactly: not more than 5%.
  EXPECT_EQ(milestone_reward(true, 95.0, 100.0, 100.0), 1);
  EXPECT_EQ(milestone_reward(true, 94.99, 100.0, 100.0), 3);
  EXPECT_EQ(milestone_reward(true, 94.99, 100.0, 99.9), 2);  // (99.9 - 94.99) / 99.9 = 4.9%
  EXPECT_EQ(milestone_reward(true, 9.5, 10.0, 20.0), 1);  // 5% against eager, 52.5% against compile
}

TEST(messages_milestone_reward, unmeasured_times_are_never_faster) {
  EXPECT_EQ(milestone_reward(true, not_measured, 10.0, 10.0), 1);
  EXPECT_EQ(milestone_reward(true, 1.0, not_measured, 10.0), 1);
  EXPECT_EQ(milestone_reward(true, 1.0, 10.0, not_measured), 2);
  EXPECT_EQ(milestone_reward(true, 1.0, 0.0, 0.0), 1);  // no baseline to beat
  EXPECT_EQ(milestone_reward(false, not_measured, not_measured, not_measured), -1);
}

}  // namespace
}  // namespace cuda_agent
