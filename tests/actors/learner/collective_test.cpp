// The tcp collective of the data-parallel learner, with threads as ranks: sums and maxima over
// the ranks (rank 0 first, then 1, 2, ... so that every rank holds the same bits), broadcasts,
// refused connections, and ranks that go silent or away (rank_failure within the timeout,
// never a hang). Also the sharding of a batch over the ranks.
#include "actors/learner/collective.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "actors/learner/learner.hpp"

namespace cuda_agent::learner {
namespace {

using namespace std::chrono_literals;
constexpr const char* secret = "0123456789abcdef";

// Rank 0 here, ranks 1 .. world - 1 in threads, each running `body` on its own collective.
template <typename Body>
void run_group(int world, Body body, std::chrono::milliseconds timeout = 10s) {
  auto host = tcp_collective::host(world, secret, timeout);
  std::vector<std::future<void>> others;
  for (int r = 1; r < world; ++r)
    others.push_back(std::async(std::launch::async, [&, r] {
      auto mine = tcp_collective::join("127.0.0.1", host->port(), r, world, secret, timeout);
      body(*mine);
    }));
  host->accept_ranks();
  body(*host);
  for (auto& f : others) f.get();
}

TEST(TcpCollective, SumsAndMaximaReachEveryRank) {
  run_group(3, [](tcp_collective& c) {
    const double r = c.rank();
    std::vector<torch::Tensor> ts{torch::tensor({r + 1, 2 * (r + 1)}, torch::kFloat32),
                                  torch::tensor({static_cast<int64_t>(10 * r)}, torch::kInt64),
                                  torch::full({2, 3}, r, torch::kFloat64)};
    c.all_reduce(ts, reduce_op::sum);
    EXPECT_TRUE(torch::equal(ts[0], torch::tensor({6.0, 12.0}, torch::kFloat32)));
    EXPECT_EQ(ts[1].item<int64_t>(), 30);
    EXPECT_TRUE(torch::equal(ts[2], torch::full({2, 3}, 3.0, torch::kFloat64)));
    std::vector<torch::Tensor> m{torch::tensor({r, -r}, torch::kFloat64)};
    c.all_reduce(m, reduce_op::max);
    EXPECT_TRUE(torch::equal(m[0], torch::tensor({2.0, 0.0}, torch::kFloat64)));
  });
}

TEST(TcpCollective, SumsInRankOrderSoEveryRankHoldsTheSameBits) {
  // In float32, (1e8 + 1) - 1e8 is 0 while 1e8 + (1 - 1e8) is 8: the order shows.
  const float values[] = {1e8f, 1.0f, -1e8f};
  std::vector<float> seen(3);
  run_group(3, [&](tcp_collective& c) {
    std::vector<torch::Tensor> ts{torch::tensor({values[c.rank()]}, torch::kFloat32)};
    c.all_reduce(ts, reduce_op::sum);
    seen[static_cast<std::size_t>(c.rank())] = ts[0].item<float>();
  });
  EXPECT_EQ(seen, (std::vector<float>{0.0f, 0.0f, 0.0f}));
}

TEST(TcpCollective, BroadcastsRankZerosBytes) {
  std::string big(3 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 % 251);
  run_group(3, [&](tcp_collective& c) {
    EXPECT_EQ(c.broadcast_bytes(c.rank() == 0 ? big : std::string{"ignored"}), big);
    if (c.rank() == 0)
      c.broadcast_bytes("next");
    else
      EXPECT_EQ(c.wait_broadcast(), "next");
  });
}

TEST(TcpCollective, RefusesAWrongSecretAndKeepsWaitingForTheRank) {
  auto host = tcp_collective::host(2, secret, 10s);
  auto impostor = std::async(std::launch::async, [&] {
    EXPECT_THROW(tcp_collective::join("127.0.0.1", host->port(), 1, 2, "0123456789abcdeX", 5s), rank_failure);
  });
  auto wrong_world = std::async(std::launch::async, [&] {
    EXPECT_THROW(tcp_collective::join("127.0.0.1", host->port(), 1, 3, secret, 5s), rank_failure);
  });
  std::thread accept{[&] { host->accept_ranks(); }};
  impostor.get();
  wrong_world.get();
  auto real = tcp_collective::join("127.0.0.1", host->port(), 1, 2, secret, 5s);
  accept.join();
  auto echo = std::async(std::launch::async, [&] { return real->broadcast_bytes({}); });
  host->broadcast_bytes("hello");
  EXPECT_EQ(echo.get(), "hello");
}

TEST(TcpCollective, ASilentRankIsLostAtTheTimeout) {
  auto host = tcp_collective::host(2, secret, 400ms);
  auto silent = std::async(std::launch::async, [&] { return tcp_collective::join("127.0.0.1", host->port(), 1, 2, secret, 5s); });
  host->accept_ranks();
  auto keep = silent.get();  // joined, then says nothing
  std::vector<torch::Tensor> ts{torch::ones({4})};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    host->all_reduce(ts, reduce_op::sum);
    FAIL() << "a silent rank must be lost";
  } catch (const rank_failure& e) {
    EXPECT_EQ(e.rank, 1);
    EXPECT_NE(std::string{e.what()}.find("timed out"), std::string::npos) << e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(waited, 350ms);
  EXPECT_LT(waited, 5s);
}

TEST(TcpCollective, ARankThatGoesAwayIsLostAtOnce) {
  auto host = tcp_collective::host(3, secret, 60s);
  std::vector<std::future<std::unique_ptr<tcp_collective>>> joins;
  for (int r = 1; r < 3; ++r)
    joins.push_back(std::async(std::launch::async, [&, r] {
      return tcp_collective::join("127.0.0.1", host->port(), r, 3, secret, 5s);
    }));
  host->accept_ranks();
  auto one = joins[0].get();
  joins[1].get().reset();  // rank 2 closes its connection, as a killed process's kernel does
  const auto seen_by = std::chrono::steady_clock::now() + 5s;
  while (host->lost_peer() != 2 && std::chrono::steady_clock::now() < seen_by) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(host->lost_peer(), 2);  // the check NCCL waits poll, without a collective
  EXPECT_EQ(one->lost_peer(), -1);
  auto peer = std::async(std::launch::async, [&] {
    std::vector<torch::Tensor> ts{torch::ones({4})};
    EXPECT_THROW(one->all_reduce(ts, reduce_op::sum), rank_failure);  // rank 0 gives up and closes
  });
  std::vector<torch::Tensor> ts{torch::ones({4})};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    host->all_reduce(ts, reduce_op::sum);
    FAIL() << "a closed rank must be lost";
  } catch (const rank_failure& e) {
    EXPECT_EQ(e.rank, 2);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  host.reset();
  peer.get();
  // And a rank whose rank 0 went away learns it while waiting.
  auto host2 = tcp_collective::host(2, secret, 5s);
  auto waiter = std::async(std::launch::async, [&] {
    auto c = tcp_collective::join("127.0.0.1", host2->port(), 1, 2, secret, 5s);
    EXPECT_THROW(c->wait_broadcast(), rank_failure);
  });
  host2->accept_ranks();
  host2.reset();
  waiter.get();
}

TEST(TcpCollective, JoiningTimesOutOrStopsWhenARankCannotCome) {
  auto host = tcp_collective::host(3, secret, 300ms);
  try {
    host->accept_ranks();
    FAIL() << "nobody joined";
  } catch (const rank_failure& e) {
    EXPECT_EQ(e.rank, 1);
  }
  auto again = tcp_collective::host(2, secret, 60s);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(again->accept_ranks([] { return std::string{"rank 1 ended before joining"}; }), rank_failure);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_THROW(tcp_collective::join("127.0.0.1", 1, 1, 2, secret, 1s), rank_failure);  // nothing listens there
}

TEST(TcpCollective, RefusesTensorsOfAnotherShape) {
  EXPECT_THROW(run_group(2,
                         [](tcp_collective& c) {
                           std::vector<torch::Tensor> ts{torch::ones({c.rank() == 0 ? 4 : 5})};
                           c.all_reduce(ts, reduce_op::sum);
                         },
                         1s),
               rank_failure);
}

TEST(ShardOf, EveryEpisodeGoesToOneRankAndTheTokensBalance) {
  const std::vector<int64_t> lengths{10, 1, 9, 2, 5, 5};
  std::vector<int> owner(lengths.size(), -1);
  std::vector<int64_t> load(3, 0);
  for (int r = 0; r < 3; ++r)
    for (const auto i : shard_of(lengths, r, 3)) {
      EXPECT_EQ(owner[i], -1) << "episode " << i << " went to two ranks";
      owner[i] = r;
      load[static_cast<std::size_t>(r)] += lengths[i];
    }
  for (const auto o : owner) EXPECT_GE(o, 0);
  EXPECT_EQ(load, (std::vector<int64_t>{11, 11, 10}));  // longest first, to the least loaded
  EXPECT_EQ(shard_of(lengths, 0, 1).size(), lengths.size());
  EXPECT_TRUE(shard_of({7}, 1, 2).empty());  // more ranks than episodes: some train on nothing
}

}  // namespace
}  // namespace cuda_agent::learner
