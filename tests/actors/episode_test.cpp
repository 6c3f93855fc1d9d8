// The episode actor's loop logic: budgets, routing of build/verify/profile to the pools, the
// final evaluation, the trajectory and the order of what it records.
//
// The policy, tools and pools here are scripted actors (tests/actors/scripted_peers.hpp): they
// isolate the episode's own decisions. The recorder and the log are real.
#include "tests/actors/scripted_peers.hpp"

#include "actors/replay.hpp"

namespace cuda_agent {
namespace {

using namespace scripted;

TEST_F(peers_fixture, runs_tools_routes_build_to_the_compiler_and_ends_with_the_final_reward) {
  auto policy = system->spawn(scripted_policy,
                              std::vector<policy_response>{
                                  with_calls({{"c1", "Write", R"({"file_path": "model_new.py", "content": "x"})"}}),
                                  with_calls({bash("c2", "  build "), bash("c3", "profile")}),
                                  done()},
                              0, 0ms);
  auto [ended, verdict, traj] = run(config(), policy);
  EXPECT_EQ(ended.reason, termination::agent_done);
  EXPECT_EQ(ended.turns, 3);
  EXPECT_EQ(ended.reward, 3);
  EXPECT_EQ(verdict.reward, 3);
  EXPECT_EQ(tool_calls.load(), 1) << "build and profile must not reach the sandboxed tools";
  EXPECT_EQ(compiles.load(), 3) << "build, profile's build, and the final build";
  EXPECT_EQ(evaluations.load(), 1);
  ASSERT_EQ(traj.turns.size(), 3u);
  EXPECT_EQ(traj.turns[1].token_ids, (std::vector<int32_t>{2, 7}));
  EXPECT_EQ(traj.turns[1].loss_mask, (std::vector<uint8_t>{1, 1}));
  EXPECT_NE(traj.turns[1].observation.find("build succeeded"), std::string::npos);
  EXPECT_NE(traj.turns[1].observation.find("speed-up: 2.000x over eager, 1.500x over torch.compile"),
            std::string::npos)
      << traj.turns[1].observation;
  const std::vector<std::string> expected{
      "rollout>task_spec",       "rollout>episode_started", "episode>policy_request",
      "policy>policy_response",  "episode>tool_request",    "tools>tool_result",
      "episode>policy_request",  "policy>policy_response",  "episode>tool_request",
      "episode>compile_job",     "compiler>compile_result", "router>tool_result",
      "episode>tool_request",    "episode>compile_job",     "compiler>compile_result",
      "episode>profile_job",     "gpu>profile_result",      "router>tool_result",
      "episode>policy_request",  "policy>policy_response",  "episode>compile_job",
      "compiler>compile_result", "episode>evaluate_job",    "gpu>reward_record",
      "episode>reward_record",   "episode>trajectory",      "episode>episode_ended"};
  EXPECT_EQ(recorded_types(), expected);
}

TEST_F(peers_fixture, a_turns_new_prompt_tokens_join_its_trajectory_with_loss_mask_zero) {
  auto first = with_calls({{"c1", "Read", R"({"file_path": "model.py"})"}});
  first.prompt_token_ids = {900, 901, 902};  // system prompt, tools, task
  auto last = done();
  last.prompt_token_ids = {903, 904};  // the Read's result in the chat format's markup
  auto policy = system->spawn(scripted_policy, std::vector<policy_response>{first, last}, 0, 0ms);
  auto [ended, verdict, traj] = run(config(), policy);
  ASSERT_EQ(traj.turns.size(), 2u);
  EXPECT_EQ(traj.turns[0].token_ids, (std::vector<int32_t>{900, 901, 902, 1, 7}));
  EXPECT_EQ(traj.turns[0].loss_mask, (std::vector<uint8_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(traj.turns[0].logprobs, (std::vector<float>{0, 0, 0, -0.5f, -0.25f}));
  EXPECT_EQ(traj.turns[1].token_ids, (std::vector<int32_t>{903, 904, 2, 7}));
  EXPECT_EQ(traj.turns[1].loss_mask, (std::vector<uint8_t>{0, 0, 1, 1}));
  EXPECT_EQ(traj.turns[0].tool_calls, first.tool_calls);  // the calls the turn made
  EXPECT_TRUE(traj.turns[1].tool_calls.empty());
}

TEST_F(peers_fixture, stops_at_the_turn_budget_and_still_evaluates) {
  auto policy = system->spawn(scripted_policy, std::vector<policy_response>{}, 0, 0ms);
  auto c = config();
  c.max_turns = 4;
  auto [ended, verdict, traj] = run(c, policy);
  EXPECT_EQ(ended.reason, termination::turn_budget);
  EXPECT_EQ(ended.turns, 4);
  EXPECT_EQ(tool_calls.load(), 4);
  EXPECT_EQ(evaluations.load(), 1);
  EXPECT_EQ(traj.reason, termination::turn_budget);
}

TEST_F(peers_fixture, stops_at_the_context_budget) {
  auto policy = system->spawn(scripted_policy, std::vector<policy_response>{}, 5000, 0ms);
  auto c = config();
  c.context_tokens = 12000;  // 5000 more prompt tokens each turn: over after turn 3
  c.max_turns = 50;
  auto [ended, verdict, traj] = run(c, policy);
  EXPECT_EQ(ended.reason, termination::token_budget);
  EXPECT_EQ(ended.turns, 3);
}

TEST_F(peers_fixture, stops_at_the_wall_clock_and_ignores_late_answers) {
  auto policy = system->spawn(scripted_policy, std::vector<policy_response>{}, 0, 150ms);
  auto c = config();
  c.wall_clock = 400ms;
  c.max_turns = 1000;
  auto [ended, verdict, traj] = run(c, policy);
  EXPECT_EQ(ended.reason, termination::timeout);
  EXPECT_LE(ended.turns, 3);
  EXPECT_NE(ended.error.find("wall-clock"), std::string::npos);
  EXPECT_EQ(evaluations.load(), 1);
}

TEST_F(peers_fixture, a_dead_policy_is_an_infrastructure_failure_and_nothing_is_evaluated) {
  auto policy = system->spawn([](policy_actor::pointer) {
    return policy_behavior([](const policy_request&) -> policy_response {
      throw std::runtime_error{"policy server gone"};
    });
  });
  auto [ended, verdict, traj] = run(config(), policy);
  EXPECT_EQ(ended.reason, termination::infrastructure_failure);
  EXPECT_NE(ended.error.find("the policy did not answer"), std::string::npos) << ended.error;
  EXPECT_EQ(evaluations.load(), 0);
  EXPECT_EQ(ended.reward, -1);
}

TEST_F(peers_fixture, a_final_build_failure_scores_minus_one_with_the_diagnostics) {
  build_ok = false;
  auto policy = system->spawn(scripted_policy, std::vector<policy_response>{done()}, 0, 0ms);
  auto [ended, verdict, traj] = run(config(), policy);
  EXPECT_EQ(ended.reason, termination::agent_done);
  EXPECT_EQ(verdict.reward, -1);
  EXPECT_FALSE(verdict.compiled);
  EXPECT_NE(verdict.error.find("expected ';'"), std::string::npos);
  EXPECT_EQ(evaluations.load(), 0);
}

// An episode of two turns that each run `ls`, then done, recorded; its records.
std::vector<message_log::record> record_two_ls_turns(peers_fixture& f) {
  auto policy = f.system->spawn(scripted_policy,
                              std::vector<policy_response>{
                                  with_calls({bash("c1", "ls")}), with_calls({bash("c2", "ls")}),
                                  done()},
                              0, 0ms);
  f.run(f.config(), policy);
  return episode_records(message_log::read_all(f.dir.log()).records, "ep-1");
}

// Replay lives here because it needs a recorded episode, which this fixture makes.
TEST_F(peers_fixture, hermetic_replay_reproduces_the_recorded_episode_message_for_message) {
  auto policy = system->spawn(scripted_policy,
                              std::vector<policy_response>{
                                  with_calls({{"c1", "Write", R"({"file_path": "a", "content": "x"})"}}),
                                  with_calls({bash("c2", "verify"), bash("c3", "profile")}),
                                  done()},
                              100, 0ms);
  run(config(), policy);
  const auto log = message_log::read_all(dir.log()).records;
  ASSERT_EQ(recorded_episodes(log), std::vector<std::string>{"ep-1"});
  const auto records = episode_records(log, "ep-1");
  auto report = replay_hermetic(*system, records);
  EXPECT_TRUE(report.identical) << report.error << "\nat " << report.first_divergence
                                << "\nexpected " << report.expected << "\nactual   "
                                << report.actual;
  EXPECT_EQ(report.replayed, records.size());
  EXPECT_EQ(tool_calls.load(), 1) << "replay must not run tools again";
}

TEST_F(peers_fixture, hermetic_replay_reports_the_first_divergence) {
  auto records = record_two_ls_turns(*this);
  // Change what the policy said at turn 2: it now stops instead of calling a tool, so the
  // replayed episode moves on to its final build where the log says it ran `ls`.
  std::size_t changed = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (records[i].type != "policy_response") continue;
    auto response = decode<policy_response>(records[i].payload);
    if (response.turn != 2) continue;
    response.tool_calls.clear();
    records[i].payload = encode(response);
    changed = i;
  }
  ASSERT_GT(changed, 0u);
  auto report = replay_hermetic(*system, records);
  EXPECT_FALSE(report.identical);
  EXPECT_EQ(report.first_divergence, changed + 1);
  EXPECT_NE(report.expected.find("tool_request"), std::string::npos) << report.expected;
  EXPECT_NE(report.actual.find("compile_job"), std::string::npos) << report.actual;
}

// A rollout stopped mid-run leaves episodes without an end in the log: their recorded prefix is
// compared, and a change inside it is still a divergence.
TEST_F(peers_fixture, hermetic_replay_of_an_episode_cut_short_compares_what_was_recorded) {
  auto records = record_two_ls_turns(*this);
  std::size_t second_turn = 0;
  for (std::size_t i = 0; i < records.size(); ++i)
    if (records[i].type == "policy_response" && decode<policy_response>(records[i].payload).turn == 2)
      second_turn = i;
  ASSERT_GT(second_turn, 0u);
  ASSERT_GT(records.size(), second_turn + 2);
  records.resize(second_turn + 2);  // the log ends after the tool call of the policy's second answer

  auto report = replay_hermetic(*system, records);
  EXPECT_TRUE(report.incomplete);
  EXPECT_TRUE(report.identical) << report.error << "\nat " << report.first_divergence
                                << "\nexpected " << report.expected << "\nactual   "
                                << report.actual;

  auto changed = decode<policy_response>(records[second_turn].payload);
  changed.tool_calls.clear();
  records[second_turn].payload = encode(changed);
  report = replay_hermetic(*system, records);
  EXPECT_TRUE(report.incomplete);
  EXPECT_FALSE(report.identical);
  EXPECT_EQ(report.first_divergence, second_turn + 1);
  EXPECT_NE(report.expected.find("tool_request"), std::string::npos) << report.expected;
}

TEST_F(peers_fixture, hermetic_replay_of_a_timed_out_episode_feeds_the_recorded_deadline) {
  auto policy = system->spawn(scripted_policy, std::vector<policy_response>{}, 0, 150ms);
  auto c = config();
  c.wall_clock = 400ms;
  c.max_turns = 1000;
  auto [ended, verdict, traj] = run(c, policy);
  ASSERT_EQ(ended.reason, termination::timeout);
  auto records = episode_records(message_log::read_all(dir.log()).records, "ep-1");
  auto report = replay_hermetic(*system, records);
  EXPECT_TRUE(report.identical) << report.error << "\nat " << report.first_divergence
                                << "\nexpected " << report.expected << "\nactual   "
                                << report.actual;
}

TEST(routed_command, recognises_exactly_the_three_words) {
  EXPECT_EQ(routed_command(bash("a", "build")), "build");
  EXPECT_EQ(routed_command(bash("a", " verify\\n")), "verify");
  EXPECT_EQ(routed_command(bash("a", "profile")), "profile");
  EXPECT_EQ(routed_command(bash("a", "build && rm -rf /")), "");
  EXPECT_EQ(routed_command(bash("a", "make build")), "");
  EXPECT_EQ(routed_command({"a", "Read", R"({"command": "build"})", ""}), "");
  EXPECT_EQ(routed_command({"a", "Bash", "not json", ""}), "");
}

}  // namespace
}  // namespace cuda_agent
