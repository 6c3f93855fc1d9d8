// Files that travel with a job between the coordinator and a node: the task, the candidate's
// solution directory and the built module go to the node; a module built on a node comes back.
// Nothing is assumed present on the other side. Each file carries the SHA-256 of its content,
// checked on arrival. Every job gets copies of its own (never links to shared files): a candidate
// may write in its solution directory, and nothing it writes may reach another job.
//
// Paths in a bundle are relative ('/'-separated, no "..", not absolute): a bundle cannot write
// outside the directory it is unpacked into, whoever sent it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "messages/messages.hpp"

namespace cuda_agent::cluster {

struct bundle_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The candidate's own files cannot travel: its solution directory or the module built from it is
// over the size limit or cannot be read. The candidate decides what is in them, so a job answers
// this as the candidate's failure (candidate_refusal.hpp), never as the infrastructure's.
struct candidate_files_error : bundle_error {
  using bundle_error::bundle_error;
};

class bundle_writer {
 public:
  explicit bundle_writer(uint64_t max_bytes) : left_(max_bytes), max_bytes_(max_bytes) {}

  // Adds `file` as `name` (e.g. "task/L1-19.py"). Throws bundle_error when it cannot be read or
  // the bundle would pass max_bytes.
  void add_file(const std::filesystem::path& file, const std::string& name);
  // Adds every regular file under `dir` as `prefix`/<relative path>; symbolic links and other
  // special files are left out.
  void add_directory(const std::filesystem::path& dir, const std::string& prefix);

  file_bundle take() { return std::move(bundle_); }

 private:
  file_bundle bundle_;
  uint64_t left_;
  uint64_t max_bytes_;
};

// Writes `bundle` under `root` (created). Throws bundle_error on a path that leaves root or a
// digest that does not match the content, and candidate_files_error on a bundle over max_bytes,
// before writing anything.
void unpack_bundle(const file_bundle& bundle, const std::filesystem::path& root, uint64_t max_bytes);

// The digest of a whole bundle (its paths, digests and modes): a module's name in the store.
std::string bundle_digest(const file_bundle& bundle);

// The files a job names (any of them may be empty): the task file as "task/<its name>", the
// solution directory as "solution/...", the module's directory as "module/...". Throws
// candidate_files_error where the solution directory or the module cannot be shipped, and
// bundle_error where the task file cannot.
file_bundle bundle_job_files(const std::string& task_path, const std::string& solution_dir,
                             const std::string& module_path, uint64_t max_bytes);

// Points a job's paths at its files as unpacked under `dir` (the other side of bundle_job_files).
void relocate_job_files(std::string& task_path, std::string& solution_dir, std::string& module_path,
                        const std::filesystem::path& dir);

// A name safe as one path component ("job-3/ep 7" -> "job-3_ep_7").
std::string path_component(const std::string& text);

}  // namespace cuda_agent::cluster
