// nccl_collective: one CUDA device per rank; the unique id and every byte broadcast travel over
// the control collective. The communicator is non-blocking, and every operation is polled
// against the group's timeout: a peer that dies mid-collective makes this rank abort the
// communicator and throw rank_failure rather than wait forever.
#include "actors/learner/collective.hpp"

#ifdef CUDA_AGENT_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <map>
#include <thread>

#include <torch/cuda.h>

namespace cuda_agent::learner {
namespace {

using clock = std::chrono::steady_clock;

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error{std::string{"learner NCCL: "} + what + ": " + cudaGetErrorString(status)};
}

ncclDataType_t nccl_type(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32: return ncclFloat32;
    case torch::kFloat64: return ncclFloat64;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kFloat16: return ncclFloat16;
    case torch::kInt64: return ncclInt64;
    case torch::kInt32: return ncclInt32;
    default: throw std::invalid_argument{"learner NCCL: no reduction for this tensor type"};
  }
}

class nccl_collective final : public collective {
 public:
  nccl_collective(std::shared_ptr<tcp_collective> control, torch::Device device, std::chrono::milliseconds timeout)
      : control_{std::move(control)}, device_{device}, timeout_{timeout} {
    if (!device.is_cuda() || !device.has_index())
      throw std::invalid_argument{"learner NCCL: each rank needs a CUDA device with an index (cuda:N)"};
    check_cuda(cudaSetDevice(device.index()), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    ncclUniqueId id{};
    if (control_->rank() == 0 && ncclGetUniqueId(&id) != ncclSuccess)
      throw std::runtime_error{"learner NCCL: ncclGetUniqueId failed"};
    const std::string shared = control_->broadcast_bytes(std::string{id.internal, sizeof id.internal});
    std::memcpy(id.internal, shared.data(), sizeof id.internal);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t started = ncclCommInitRankConfig(&comm_, control_->world(), id, control_->rank(), &config);
    if (started != ncclSuccess && started != ncclInProgress) {
      release();
      throw rank_failure{-1, std::string{"learner NCCL: ncclCommInitRankConfig: "} + ncclGetErrorString(started)};
    }
    try {
      wait_for("joining the communicator", [] { return true; });
    } catch (...) {
      release();  // a constructor that throws runs no destructor
      throw;
    }
  }

  ~nccl_collective() override { release(); }

  int rank() const override { return control_->rank(); }
  int world() const override { return control_->world(); }
  std::string broadcast_bytes(const std::string& bytes) override { return control_->broadcast_bytes(bytes); }

  void all_reduce(std::vector<torch::Tensor>& tensors, reduce_op op) override {
    if (tensors.empty()) return;
    torch::NoGradGuard no_grad;
    // One flat buffer per dtype, on this rank's device: one NCCL call for all the gradients.
    std::map<torch::ScalarType, std::vector<std::size_t>> by_type;
    for (std::size_t i = 0; i < tensors.size(); ++i) by_type[tensors[i].scalar_type()].push_back(i);
    for (const auto& [type, indices] : by_type) {
      std::vector<torch::Tensor> flat;
      for (const auto i : indices) flat.push_back(tensors[i].detach().to(device_).reshape({-1}));
      torch::Tensor buffer = torch::cat(flat);
      torch::cuda::synchronize(device_.index());  // the buffer is written on torch's stream
      const ncclResult_t issued = ncclAllReduce(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(), nccl_type(type),
                                                op == reduce_op::sum ? ncclSum : ncclMax, comm_, stream_);
      if (issued != ncclSuccess && issued != ncclInProgress) {
        broken_ = true;
        throw rank_failure{-1, std::string{"learner NCCL: ncclAllReduce: "} + ncclGetErrorString(issued)};
      }
      wait_for("an all-reduce", [this] { return cudaStreamQuery(stream_) == cudaSuccess; });
      int64_t offset = 0;
      for (const auto i : indices) {
        const int64_t n = tensors[i].numel();
        tensors[i].copy_(buffer.narrow(0, offset, n).view(tensors[i].sizes()));
        offset += n;
      }
    }
  }

 private:
  // Polls the communicator (and `done`) until both are finished; aborts it at the timeout or on
  // an asynchronous error, so that no rank waits for a dead peer past the timeout.
  template <class Done>
  void wait_for(const char* what, Done done) {
    const auto deadline = clock::now() + timeout_;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      ncclCommGetAsyncError(comm_, &state);
      if (state == ncclSuccess && done()) return;
      if (state != ncclSuccess && state != ncclInProgress) {
        broken_ = true;
        throw rank_failure{-1, std::string{"learner NCCL: "} + what + " failed: " + ncclGetErrorString(state)};
      }
      if (const int lost = control_->lost_peer(); lost >= 0) {
        broken_ = true;
        throw rank_failure{lost, std::string{"learner NCCL: rank "} + std::to_string(lost) + " went away during " +
                                     what};
      }
      if (clock::now() > deadline) {
        broken_ = true;
        throw rank_failure{-1, std::string{"learner NCCL: "} + what + " did not finish within " +
                                   std::to_string(timeout_.count()) + " ms (a rank is gone or stopped)"};
      }
      std::this_thread::sleep_for(std::chrono::microseconds{200});
    }
  }

  void release() {
    if (comm_) {
      if (broken_ || started_broken())
        ncclCommAbort(comm_);
      else
        ncclCommDestroy(comm_);
      comm_ = nullptr;
    }
    if (stream_) cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
  // A communicator still joining cannot be destroyed cleanly, only aborted.
  bool started_broken() {
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    return state != ncclSuccess;
  }

  std::shared_ptr<tcp_collective> control_;
  torch::Device device_;
  std::chrono::milliseconds timeout_;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  bool broken_ = false;
};

}  // namespace

std::unique_ptr<collective> make_nccl_collective(std::shared_ptr<tcp_collective> control, torch::Device device,
                                                 std::chrono::milliseconds timeout) {
  return std::make_unique<nccl_collective>(std::move(control), device, timeout);
}

bool nccl_available() { return true; }

}  // namespace cuda_agent::learner

#else

namespace cuda_agent::learner {

std::unique_ptr<collective> make_nccl_collective(std::shared_ptr<tcp_collective>, torch::Device,
                                                 std::chrono::milliseconds) {
  throw std::runtime_error{"learner.collective = \"nccl\" needs a build with NCCL (found with the CUDA toolkit); "
                           "use learner.collective = \"tcp\""};
}

bool nccl_available() { return false; }

}  // namespace cuda_agent::learner

#endif
