#include "actors/learner/collective.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

namespace cuda_agent::learner {
namespace {

using clock = std::chrono::steady_clock;
constexpr const char* hello_prefix = "cuda-agent-learner/1";

// Waits until `fd` is ready for `events` or `deadline` passes; false at the deadline.
bool wait_ready(int fd, short events, clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

// Both throw rank_failure{peer, ...} on a closed socket, an error or the deadline.
void send_all(int fd, const char* data, std::size_t size, clock::time_point deadline, int peer) {
  while (size > 0) {
    if (!wait_ready(fd, POLLOUT, deadline)) throw rank_failure{peer, "rank " + std::to_string(peer) + " timed out"};
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0)
      throw rank_failure{peer, "rank " + std::to_string(peer) + " is gone (" + std::strerror(errno) + ")"};
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

void receive_all(int fd, char* data, std::size_t size, clock::time_point deadline, int peer) {
  while (size > 0) {
    if (!wait_ready(fd, POLLIN, deadline)) throw rank_failure{peer, "rank " + std::to_string(peer) + " timed out"};
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n == 0) throw rank_failure{peer, "rank " + std::to_string(peer) + " closed its connection"};
    if (n < 0) throw rank_failure{peer, "rank " + std::to_string(peer) + " is gone (" + std::strerror(errno) + ")"};
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

// A frame: the payload's length as 8 little-endian bytes, then the payload.
void send_frame(int fd, const std::string& payload, clock::time_point deadline, int peer) {
  char header[8];
  uint64_t size = payload.size();
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  send_all(fd, header, sizeof header, deadline, peer);
  send_all(fd, payload.data(), payload.size(), deadline, peer);
}

std::string receive_frame(int fd, clock::time_point deadline, int peer, uint64_t max_size = UINT64_MAX) {
  unsigned char header[8];
  receive_all(fd, reinterpret_cast<char*>(header), sizeof header, deadline, peer);
  uint64_t size = 0;
  for (int i = 0; i < 8; ++i) size |= static_cast<uint64_t>(header[i]) << (8 * i);
  if (size > max_size) throw rank_failure{peer, "rank " + std::to_string(peer) + " sent an oversized frame"};
  std::string payload(size, '\0');
  receive_all(fd, payload.data(), payload.size(), deadline, peer);
  return payload;
}

// Equal strings without an early exit, so that the time of a refusal says nothing of the secret.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0;
}

// The tensors' bytes, CPU and contiguous, one after the other.
std::string pack(const std::vector<torch::Tensor>& tensors) {
  std::size_t total = 0;
  for (const auto& t : tensors) total += t.numel() * t.element_size();
  std::string out;
  out.reserve(total);
  for (const auto& t : tensors) {
    const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
    out.append(static_cast<const char*>(c.data_ptr()), c.numel() * c.element_size());
  }
  return out;
}

std::vector<torch::Tensor> unpack(const std::string& bytes, const std::vector<torch::Tensor>& like, int peer) {
  std::vector<torch::Tensor> out;
  std::size_t offset = 0;
  for (const auto& t : like) {
    const std::size_t size = t.numel() * t.element_size();
    if (offset + size > bytes.size()) break;
    torch::Tensor c = torch::empty(t.sizes(), t.options().device(torch::kCPU));
    std::memcpy(c.data_ptr(), bytes.data() + offset, size);
    out.push_back(std::move(c));
    offset += size;
  }
  if (offset != bytes.size() || out.size() != like.size())
    throw rank_failure{peer, "rank " + std::to_string(peer) + " sent tensors of another shape (" +
                                 std::to_string(bytes.size()) + " bytes)"};
  return out;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

tcp_collective::tcp_collective(int rank, int world, std::string secret, std::chrono::milliseconds timeout)
    : rank_{rank}, world_{world}, secret_{std::move(secret)}, timeout_{timeout} {
  if (world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument{"a learner rank must lie in [0, world), got rank " + std::to_string(rank) +
                                " of " + std::to_string(world)};
  if (secret_.empty()) throw std::invalid_argument{"a learner group needs a secret"};
}

tcp_collective::~tcp_collective() {
  for (auto& fd : peers_) close_fd(fd);
  close_fd(listen_fd_);
}

std::unique_ptr<tcp_collective> tcp_collective::host(int world, std::string secret,
                                                     std::chrono::milliseconds timeout) {
  std::unique_ptr<tcp_collective> c{new tcp_collective{0, world, std::move(secret), timeout}};
  c->peers_.assign(static_cast<std::size_t>(world), -1);
  c->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->listen_fd_ < 0) throw std::runtime_error{std::string{"learner group: socket: "} + std::strerror(errno)};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(c->listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(c->listen_fd_, world) != 0 ||
      ::getsockname(c->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    throw std::runtime_error{std::string{"learner group: cannot listen on 127.0.0.1: "} + std::strerror(errno)};
  c->port_ = ntohs(addr.sin_port);
  return c;
}

void tcp_collective::accept_ranks(const std::function<std::string()>& failed) {
  const auto deadline = clock::now() + timeout_;
  int missing = world_ - 1;
  while (missing > 0) {
    if (failed) {
      const std::string why = failed();
      if (!why.empty()) throw rank_failure{-1, why};
    }
    if (!wait_ready(listen_fd_, POLLIN, std::min(deadline, clock::now() + std::chrono::milliseconds{500}))) {
      if (clock::now() < deadline) continue;
      int first = 1;
      while (first < world_ && peers_[static_cast<std::size_t>(first)] >= 0) ++first;
      throw rank_failure{first, "rank " + std::to_string(first) + " did not join the learner group within " +
                                    std::to_string(timeout_.count()) + " ms"};
    }
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::string why;
    int rank = -1;
    try {
      // A short deadline of its own: a connection that says nothing must not hold the others up.
      const auto hello = receive_frame(fd, std::min(deadline, clock::now() + std::chrono::seconds{10}), -1, 4096);
      char prefix[32] = {};
      int world = 0, offset = 0;
      if (std::sscanf(hello.c_str(), "%31s %d %d %n", prefix, &rank, &world, &offset) < 3 ||
          std::string{prefix} != hello_prefix)
        why = "not a learner rank";
      else if (!same_secret(hello.substr(static_cast<std::size_t>(offset)), secret_))
        why = "wrong secret";
      else if (world != world_ || rank < 1 || rank >= world_ || peers_[static_cast<std::size_t>(rank)] >= 0)
        why = "rank " + std::to_string(rank) + " of " + std::to_string(world) + " is not open";
    } catch (const rank_failure& e) {
      why = e.what();
    }
    if (!why.empty()) {
      std::cerr << "learner group: refused a connection: " << why << "\n";
      close_fd(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    send_frame(fd, "ok", deadline, rank);
    peers_[static_cast<std::size_t>(rank)] = fd;
    --missing;
  }
  close_fd(listen_fd_);
}

std::unique_ptr<tcp_collective> tcp_collective::join(const std::string& host, int port, int rank, int world,
                                                     const std::string& secret, std::chrono::milliseconds timeout) {
  std::unique_ptr<tcp_collective> c{new tcp_collective{rank, world, secret, timeout}};
  if (rank == 0) throw std::invalid_argument{"rank 0 hosts the learner group; it does not join it"};
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (fd < 0 || ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    const std::string why = std::strerror(errno);
    close_fd(fd);
    throw rank_failure{0, "cannot reach learner rank 0 at " + host + ":" + std::to_string(port) + " (" + why + ")"};
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  c->peers_.push_back(fd);
  const auto deadline = clock::now() + timeout;
  send_frame(fd, std::string{hello_prefix} + " " + std::to_string(rank) + " " + std::to_string(world) + " " + secret,
             deadline, 0);
  if (receive_frame(fd, deadline, 0, 16) != "ok") throw rank_failure{0, "learner rank 0 refused this rank"};
  return c;
}

int tcp_collective::lost_peer() const {
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    if (peers_[i] < 0) continue;
    pollfd p{peers_[i], POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    char byte;
    // Between collectives nothing is in flight: readable means closed (or a protocol error).
    if ((p.revents & (POLLHUP | POLLERR)) || ::recv(peers_[i], &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
      return rank_ == 0 ? static_cast<int>(i) : 0;
  }
  return -1;
}

std::string tcp_collective::wait_broadcast() {
  if (rank_ == 0) throw std::logic_error{"rank 0 sends broadcasts; it does not wait for them"};
  // Polled in long slices: only a closed connection (or an error) ends the wait.
  const int fd = peers_[0];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, 60'000);
    if (n > 0) break;
    if (n < 0 && errno != EINTR) throw rank_failure{0, std::string{"waiting for rank 0: "} + std::strerror(errno)};
  }
  return receive_frame(fd, clock::now() + timeout_, 0);
}

std::string tcp_collective::broadcast_bytes(const std::string& bytes) {
  const auto deadline = clock::now() + timeout_;
  if (rank_ != 0) return receive_frame(peers_[0], deadline, 0);
  for (int r = 1; r < world_; ++r) send_frame(peers_[static_cast<std::size_t>(r)], bytes, deadline, r);
  return bytes;
}

void tcp_collective::all_reduce(std::vector<torch::Tensor>& tensors, reduce_op op) {
  if (world_ == 1 || tensors.empty()) return;
  const auto deadline = clock::now() + timeout_;
  std::string result;
  if (rank_ != 0) {
    send_frame(peers_[0], pack(tensors), deadline, 0);
    result = receive_frame(peers_[0], deadline, 0);
  } else {
    std::vector<torch::Tensor> acc;
    uint64_t expected = 0;
    for (const auto& t : tensors) {
      acc.push_back(t.detach().to(torch::kCPU, /*non_blocking=*/false, /*copy=*/true));
      expected += t.numel() * t.element_size();
    }
    for (int r = 1; r < world_; ++r) {
      const auto theirs = unpack(receive_frame(peers_[static_cast<std::size_t>(r)], deadline, r, expected), acc, r);
      for (std::size_t i = 0; i < acc.size(); ++i) {
        if (op == reduce_op::sum)
          acc[i].add_(theirs[i]);
        else
          acc[i] = torch::maximum(acc[i], theirs[i]);
      }
    }
    result = pack(acc);
    for (int r = 1; r < world_; ++r) send_frame(peers_[static_cast<std::size_t>(r)], result, deadline, r);
  }
  const auto reduced = unpack(result, tensors, 0);
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < tensors.size(); ++i) tensors[i].copy_(reduced[i]);
}

}  // namespace cuda_agent::learner
