// The cluster's building blocks on their own: HMAC-SHA256 against RFC 4231, the proofs each side
// gives, the token file's refusals, and shipped files (paths that would leave their directory,
// content that does not match its digest, a bundle over its limit, modes kept).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "actors/cluster/file_bundle.hpp"
#include "actors/cluster/node_auth.hpp"
#include "tests/actors/cluster/test_files.hpp"

namespace cuda_agent::cluster {
namespace {
namespace fs = std::filesystem;

struct scratch_dir {
  fs::path path = fs::temp_directory_path() / ("cluster_test_" + std::to_string(::getpid()) + "_" +
                                                ::testing::UnitTest::GetInstance()->current_test_info()->name());
  scratch_dir() { fs::create_directories(path); }
  ~scratch_dir() { fs::remove_all(path); }
};

using test_files::read;
using test_files::write;

TEST(NodeAuth, HmacSha256MatchesRfc4231) {
  // RFC 4231 test cases 2 (a short key) and 6 (a key longer than the block).
  EXPECT_EQ(hmac_sha256_hex("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hmac_sha256_hex(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

TEST(NodeAuth, EveryProofDependsOnTokenNonceAndName) {
  const std::string token = "0123456789abcdef-token";
  const auto proof = node_proof(token, "nonce-1", "node-a");
  EXPECT_NE(proof, node_proof(token + "x", "nonce-1", "node-a"));
  EXPECT_NE(proof, node_proof(token, "nonce-2", "node-a"));
  EXPECT_NE(proof, node_proof(token, "nonce-1", "node-b"));
  EXPECT_NE(coordinator_proof(token, "nonce-1"), node_proof(token, "nonce-1", ""))
      << "a node's proof must never serve as the coordinator's";
  EXPECT_TRUE(same_secret(proof, node_proof(token, "nonce-1", "node-a")));
  EXPECT_FALSE(same_secret(proof, proof.substr(1)));
  EXPECT_NE(random_nonce(), random_nonce());
  EXPECT_EQ(random_nonce().size(), 64u);
}

TEST(NodeAuth, TokenFilesThatCannotServeAreRefusedInOneLine) {
  scratch_dir dir;
  auto message = [](const fs::path& file) {
    try {
      read_token_file(file);
    } catch (const std::exception& e) {
      return std::string{e.what()};
    }
    return std::string{};
  };
  const auto missing = message(dir.path / "absent");
  EXPECT_NE(missing.find("cannot be read"), std::string::npos) << missing;
  write(dir.path / "short", "abc\n");
  const auto short_token = message(dir.path / "short");
  EXPECT_NE(short_token.find("at least 16"), std::string::npos) << short_token;
  EXPECT_EQ(short_token.find('\n'), std::string::npos);
  write(dir.path / "good", "  0123456789abcdefXYZ \n");
  EXPECT_EQ(read_token_file(dir.path / "good"), "0123456789abcdefXYZ");
}

TEST(FileBundle, AJobsFilesArriveWhereItsPathsNowPoint) {
  scratch_dir dir;
  const auto origin = dir.path / "origin";
  write(origin / "tasks/L1-19.py", "class Model: pass\n");
  write(origin / "work/model_new.py", "import cuda_agent_kernels\n");
  write(origin / "work/kernels/add.cu", "__global__ void add() {}\n");
  write(origin / "cache/modules/ab12/cuda_agent_kernels.so", std::string{"\x7f" "ELF\0\1\2", 7});
  fs::permissions(origin / "cache/modules/ab12/cuda_agent_kernels.so", fs::perms{0755});
  fs::create_symlink("/etc/passwd", origin / "work/leak");  // never shipped
  const auto bundle = bundle_job_files((origin / "tasks/L1-19.py").string(), (origin / "work").string(),
                                       (origin / "cache/modules/ab12/cuda_agent_kernels.so").string(), 1 << 20);
  EXPECT_EQ(bundle.files.size(), 4u);
  std::string task = (origin / "tasks/L1-19.py").string(), solution = (origin / "work").string(),
              module = (origin / "cache/modules/ab12/cuda_agent_kernels.so").string();
  const auto job = dir.path / "job";
  unpack_bundle(bundle, job, 1 << 20);
  relocate_job_files(task, solution, module, job);
  EXPECT_EQ(read(task), "class Model: pass\n");
  EXPECT_EQ(read(fs::path{solution} / "kernels/add.cu"), "__global__ void add() {}\n");
  EXPECT_FALSE(fs::exists(fs::path{solution} / "leak"));
  EXPECT_EQ(read(module), std::string("\x7f" "ELF\0\1\2", 7));
  EXPECT_NE(fs::status(module).permissions() & fs::perms::owner_exec, fs::perms::none);
  EXPECT_EQ(bundle_digest(bundle), bundle_digest(bundle_job_files(
                                       (origin / "tasks/L1-19.py").string(), (origin / "work").string(),
                                       (origin / "cache/modules/ab12/cuda_agent_kernels.so").string(), 1 << 20)));
}

TEST(FileBundle, ABundleThatWouldLeaveItsDirectoryOrLiesAboutItsContentWritesNothing) {
  scratch_dir dir;
  write(dir.path / "origin/a.txt", "hello");
  auto good = bundle_job_files({}, (dir.path / "origin").string(), {}, 1 << 20);
  for (const std::string bad_path : {"../escape.txt", "/etc/cron.d/x", "solution/../../x", "a//b", "./a"}) {
    auto bad = good;
    bad.files.push_back(good.files.front());
    bad.files.back().path = bad_path;
    const auto root = dir.path / "unpacked";
    EXPECT_THROW(unpack_bundle(bad, root, 1 << 20), bundle_error) << bad_path;
    EXPECT_FALSE(fs::exists(root)) << "nothing may be written for " << bad_path;
  }
  auto lying = good;
  lying.files.front().content = "HELLO";
  EXPECT_THROW(unpack_bundle(lying, dir.path / "lying", 1 << 20), bundle_error);
  EXPECT_FALSE(fs::exists(dir.path / "lying"));
  EXPECT_THROW(unpack_bundle(good, dir.path / "small", 4), candidate_files_error);
  bundle_writer tiny{3};
  EXPECT_THROW(tiny.add_file(dir.path / "origin/a.txt", "a.txt"), candidate_files_error);
  // Over the limit is the candidate's doing in its solution directory, never in our task file.
  EXPECT_THROW(bundle_job_files({}, (dir.path / "origin").string(), {}, 3), candidate_files_error);
  try {
    bundle_job_files((dir.path / "origin/a.txt").string(), {}, {}, 3);
    ADD_FAILURE() << "a task over the limit must not ship";
  } catch (const candidate_files_error&) {
    ADD_FAILURE() << "a task file is never the candidate's doing";
  } catch (const bundle_error&) {
  }
}

}  // namespace
}  // namespace cuda_agent::cluster
