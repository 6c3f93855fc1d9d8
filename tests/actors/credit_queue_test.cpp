// The credit queue's rules, without actors: credits bound the work that runs, waiting items are
// granted oldest first (a retry at the front), the bound on waiting holds, and expired or
// orphaned items leave without a credit.
#include <gtest/gtest.h>

#include <string>

#include <caf/all.hpp>

#include "actors/credit_queue.hpp"

namespace cuda_agent {
namespace {

TEST(credit_queue, grants_free_credits_oldest_first_and_no_more) {
  credit_queue<std::string> q{2, 8};
  EXPECT_NE(q.push("a"), 0u);
  EXPECT_NE(q.push("b"), 0u);
  EXPECT_NE(q.push("c"), 0u);
  auto first = q.next();
  auto second = q.next();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->item, "a");
  EXPECT_EQ(second->item, "b");
  EXPECT_NE(first->credit, second->credit);
  EXPECT_FALSE(q.next());  // both credits in use; "c" waits
  EXPECT_EQ(q.in_use(), 2u);
  EXPECT_EQ(q.waiting(), 1u);
  q.release(second->credit);
  auto third = q.next();
  ASSERT_TRUE(third);
  EXPECT_EQ(third->item, "c");
  EXPECT_EQ(third->credit, second->credit);  // the credit that was given back
  EXPECT_EQ(q.peak_waiting(), 3u);
}

TEST(credit_queue, refuses_past_max_waiting_and_a_retry_goes_first) {
  credit_queue<int> q{1, 2};
  EXPECT_NE(q.push(1), 0u);
  EXPECT_NE(q.push(2), 0u);
  EXPECT_EQ(q.push(3), 0u);  // full: the caller rejects it
  EXPECT_EQ(q.waiting(), 2u);
  auto g = q.next();
  ASSERT_TRUE(g);
  EXPECT_EQ(g->item, 1);
  EXPECT_NE(q.push(9, {}, /*front=*/true), 0u);
  q.release(g->credit);
  EXPECT_EQ(q.next()->item, 9);
}

TEST(credit_queue, acquire_never_overtakes_a_waiting_item) {
  credit_queue<int> q{1, 0};
  auto credit = q.acquire();
  ASSERT_TRUE(credit);
  EXPECT_FALSE(q.acquire());  // no credit left
  q.release(*credit);
  credit_queue<int> busy{2, 4};
  busy.push(1);
  EXPECT_FALSE(busy.acquire());  // a credit is free, but item 1 came first
  EXPECT_EQ(busy.next()->item, 1);
  EXPECT_TRUE(busy.acquire());
}

TEST(credit_queue, may_start_holds_back_the_front_without_reordering) {
  credit_queue<int> q{4};
  q.push(1);
  q.push(2);
  EXPECT_FALSE(q.next([](int item) { return item != 1; }));  // 2 never jumps ahead of 1
  EXPECT_EQ(q.waiting(), 2u);
  EXPECT_EQ(q.next([](int) { return true; })->item, 1);
}

TEST(credit_queue, expired_and_orphaned_items_leave_without_a_credit) {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  auto alive = system.spawn([] { return caf::behavior{[](int) {}}; });
  auto doomed = system.spawn([] { return caf::behavior{[](int) {}}; });
  credit_queue<std::string> q{1, 8};
  const auto running = q.push("running", alive.address());
  const auto expires = q.push("expires", alive.address());
  q.push("orphan-1", doomed.address());
  q.push("kept", alive.address());
  q.push("orphan-2", doomed.address());
  auto g = q.next();
  ASSERT_TRUE(g);
  EXPECT_FALSE(q.expire(running));  // it holds a credit: its timer comes too late to matter
  EXPECT_EQ(q.expire(expires).value_or(""), "expires");
  EXPECT_FALSE(q.expire(expires));  // once only
  const auto dropped = q.drop_waiter(doomed.address());
  EXPECT_EQ(dropped, (std::vector<std::string>{"orphan-1", "orphan-2"}));
  EXPECT_TRUE(q.drop_waiter(caf::actor_addr{}).empty());
  q.release(g->credit);
  EXPECT_EQ(q.next()->item, "kept");
  EXPECT_EQ(q.waiting(), 0u);
  caf::anon_send_exit(alive, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(doomed, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace cuda_agent
