#include <gtest/gtest.h>

#include "messages/episode_id.hpp"

namespace cuda_agent {
namespace {

TEST(EpisodeId, FormatsIndexResumeAndRetry) {
  EXPECT_EQ(format_episode_id({"ci", 7}), "ci-0007");
  EXPECT_EQ(format_episode_id({"ci", 12345, 2}), "ci-12345-resume2");
  EXPECT_EQ(format_episode_id({"run-a", 0, 0, 3}), "run-a-0000-retry3");
  EXPECT_EQ(format_episode_id({"r", 1, 4, 1}), "r-0001-resume4-retry1");
}

TEST(EpisodeId, ParsesWhatItFormats) {
  for (const episode_id_parts& p : {episode_id_parts{"ci", 7}, episode_id_parts{"run-a", 0, 0, 3},
                                    episode_id_parts{"r", 1, 4, 1}, episode_id_parts{"x-0001", 99, 12, 0}}) {
    const auto parsed = parse_episode_id(format_episode_id(p), p.run_id);
    ASSERT_TRUE(parsed) << format_episode_id(p);
    EXPECT_EQ(parsed->run_id, p.run_id);
    EXPECT_EQ(parsed->index, p.index);
    EXPECT_EQ(parsed->resume, p.resume);
    EXPECT_EQ(parsed->retry, p.retry);
  }
}

TEST(EpisodeId, RefusesOtherRunsAndOtherShapes) {
  // Another run, even one whose name starts like this one's.
  EXPECT_FALSE(parse_episode_id("cib-0001", "ci"));
  EXPECT_FALSE(parse_episode_id("ci-a-0001", "ci"));
  for (const char* id : {"ci", "ci-", "ci-x", "ci-0001-", "ci-0001-resume", "ci-0001-resume0", "ci-0001-retry-1",
                         "ci-0001-retry1-resume2", "ci--1", "ci-0001x", "ci-0001-resume2x"})
    EXPECT_FALSE(parse_episode_id(id, "ci")) << id;
}

TEST(EpisodeId, FindsTheRunOfAnIdOfAnyRun) {
  for (const episode_id_parts& p : {episode_id_parts{"ci", 7}, episode_id_parts{"run-a", 0, 0, 3},
                                    episode_id_parts{"r", 1, 4, 1}, episode_id_parts{"x-0001", 99, 12, 0}}) {
    const auto parsed = parse_episode_id(format_episode_id(p));
    ASSERT_TRUE(parsed) << format_episode_id(p);
    EXPECT_EQ(parsed->run_id, p.run_id);
    EXPECT_EQ(parsed->index, p.index);
    EXPECT_EQ(parsed->resume, p.resume);
    EXPECT_EQ(parsed->retry, p.retry);
  }
  for (const char* id : {"ci", "-0001", "ci-", "ci-x", "ci-0001-resume", "ci-0001-retry1-resume2"})
    EXPECT_FALSE(parse_episode_id(std::string_view{id})) << id;
}

}  // namespace
}  // namespace cuda_agent
