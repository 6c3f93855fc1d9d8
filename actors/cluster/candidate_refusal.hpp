// The answer a job gets when the candidate's own files cannot travel to or from a node
// (candidate_files_error): the candidate's failure, as a compiler or the harness answers a broken
// candidate. An infrastructure error instead would retry the episode and keep it out of training,
// so a candidate that cannot pass would escape its -1 by writing a file too large to ship.
#pragma once

#include <string>

#include "messages/messages.hpp"

namespace cuda_agent::cluster {

inline compile_result candidate_refusal(const compile_job& job, const std::string& why) {
  compile_result result;
  result.job_id = job.job_id;
  result.ok = false;
  result.diagnostics = "error: " + why;
  return result;
}

inline verify_result candidate_refusal(const verify_job& job, const std::string& why) {
  verify_result result;
  result.job_id = job.job_id;
  result.correct = false;
  result.error = why;
  return result;
}

inline profile_result candidate_refusal(const profile_job& job, const std::string& why) {
  profile_result result;
  result.job_id = job.job_id;
  result.error = why;
  return result;
}

// Built, but never judged: reward -1 (the milestone rule's answer for a candidate not correct).
inline reward_record candidate_refusal(const evaluate_job& job, const std::string& why) {
  reward_record record;
  record.job_id = job.job_id;
  record.episode_id = job.episode_id;
  record.compiled = true;
  record.correct = false;
  record.reward = -1;
  record.error = why;
  return record;
}

}  // namespace cuda_agent::cluster
