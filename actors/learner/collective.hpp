// The collectives of the data-parallel learner: the ranks of one learner (rank 0 in the train
// process, the others in `cuda-agent learner-rank` processes that rank_group.hpp starts) sum
// their gradients and share rank 0's state and batches through these calls. Every rank makes
// the same calls in the same order.
//
//   tcp_collective  rank 0 listens on loopback, every other rank connects and proves the
//                   group's secret; bytes and tensors travel over those sockets. A sum is
//                   computed by rank 0 in rank order and sent back, so every rank holds the
//                   same bits and a run is deterministic on CPU (the CPU twin of NCCL).
//   nccl_collective tensors through NCCL (one GPU per rank), the unique id and the bytes
//                   through a tcp_collective; built where NCCL is (CUDA_AGENT_HAVE_NCCL).
//
// A call that cannot finish within the group's timeout, or whose peer went away (killed,
// stopped, cut off), throws rank_failure instead of hanging; the group is then unusable and
// rank_group starts a new one.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace cuda_agent::learner {

// A rank died, stopped answering or broke the protocol; `rank` is the one rank 0 lost (-1:
// not known, e.g. on a rank that lost rank 0).
struct rank_failure : std::runtime_error {
  rank_failure(int rank, const std::string& what) : std::runtime_error{what}, rank{rank} {}
  int rank;
};

enum class reduce_op { sum, max };

class collective {
 public:
  virtual ~collective() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Reduces each tensor over the ranks in place; every rank ends with the same values. The
  // tensors may differ in dtype and device; on CPU the sum is rank 0 + rank 1 + ... in order.
  virtual void all_reduce(std::vector<torch::Tensor>& tensors, reduce_op op) = 0;
  // Rank 0's bytes on every rank (the argument is ignored elsewhere).
  virtual std::string broadcast_bytes(const std::string& bytes) = 0;
};

class tcp_collective : public collective {
 public:
  // Rank 0: listens on 127.0.0.1 (an ephemeral port, see port()) for world - 1 ranks.
  static std::unique_ptr<tcp_collective> host(int world, std::string secret, std::chrono::milliseconds timeout);
  // Rank `rank` (1 .. world - 1): connects to rank 0 and proves `secret`.
  static std::unique_ptr<tcp_collective> join(const std::string& host, int port, int rank, int world,
                                              const std::string& secret, std::chrono::milliseconds timeout);
  ~tcp_collective() override;

  int port() const { return port_; }
  // Rank 0: waits until every rank has connected with the secret; a connection with a wrong
  // secret or rank is refused (closed, logged to stderr) and the wait goes on. Throws
  // rank_failure naming the first missing rank at the timeout, or at once when `failed`
  // (asked twice a second) describes a rank that cannot come any more.
  void accept_ranks(const std::function<std::string()>& failed = {});
  // Ranks 1 ..: the next broadcast_bytes of rank 0, however long it takes (rank 0 may roll out
  // for an hour between steps); throws rank_failure only when rank 0 is gone.
  std::string wait_broadcast();

  // A rank whose connection has closed (its process died), or -1: a check without waiting,
  // for the NCCL collective to poll while NCCL itself may not notice a dead peer.
  int lost_peer() const;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  int rank() const override { return rank_; }
  int world() const override { return world_; }
  void all_reduce(std::vector<torch::Tensor>& tensors, reduce_op op) override;
  std::string broadcast_bytes(const std::string& bytes) override;

 private:
  tcp_collective(int rank, int world, std::string secret, std::chrono::milliseconds timeout);

  int rank_;
  int world_;
  std::string secret_;
  std::chrono::milliseconds timeout_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::vector<int> peers_;  // rank 0: the socket of rank i at i (index 0 unused); else: {rank 0}
};

// The NCCL communicator of the ranks of `control`, on `device` (one CUDA device per rank).
// Throws std::runtime_error where cuda-agent was built without NCCL.
std::unique_ptr<collective> make_nccl_collective(std::shared_ptr<tcp_collective> control, torch::Device device,
                                                 std::chrono::milliseconds timeout);
bool nccl_available();

}  // namespace cuda_agent::learner
