// Supervision with a real, threaded actor system: children really crash (an exception escapes a
// handler), and the tests watch what the supervisor does about it.
#include <gtest/gtest.h>

#include <thread>

#include <caf/all.hpp>

#include "actors/supervisor.hpp"

namespace cuda_agent {
namespace {

using namespace std::chrono_literals;

caf::behavior crashable(caf::event_based_actor* self) {
  return {
      [](ping_atom) { return std::string{"pong"}; },
      [](crash_atom) -> std::string { throw std::runtime_error{"injected crash"}; },
      [self](finish_atom) { self->quit(); },
  };
}

child_spec crashable_child(std::string name) {
  return make_child(std::move(name), [](caf::actor_system& sys) { return sys.spawn(crashable); });
}

caf::actor child_of(caf::scoped_actor& self, const supervisor_actor& sup, const std::string& name) {
  caf::actor found;
  self->request(sup, 5s, child_atom::value, name)
      .receive([&](caf::strong_actor_ptr& child) { found = caf::actor_cast<caf::actor>(child); },
               [](caf::error&) {});
  return found;
}

// Polls until the supervisor hands out a different actor than `old` for `name`.
caf::actor wait_for_new_child(caf::scoped_actor& self, const supervisor_actor& sup,
                              const std::string& name, const caf::actor& old) {
  for (int i = 0; i < 500; ++i) {
    auto now = child_of(self, sup, name);
    if (now && now != old) return now;
    std::this_thread::sleep_for(10ms);
  }
  return {};
}

std::string ping(caf::scoped_actor& self, const caf::actor& who) {
  std::string answer;
  self->request(who, 5s, ping_atom::value)
      .receive([&](std::string& s) { answer = s; }, [&](caf::error& e) { answer = "error"; });
  return answer;
}

int restarts(caf::scoped_actor& self, const supervisor_actor& sup) {
  int n = -1;
  self->request(sup, 5s, restarts_atom::value).receive([&](int32_t r) { n = r; }, [](caf::error&) {});
  return n;
}

TEST(supervisor, one_for_one_restarts_only_the_child_that_crashed) {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  caf::scoped_actor self{system};
  auto sup = spawn_supervisor(system, {"test", restart_strategy::one_for_one, {}, {
      crashable_child("a"), crashable_child("b")}});
  auto a = child_of(self, sup, "a");
  auto b = child_of(self, sup, "b");
  ASSERT_TRUE(a && b);
  self->send(a, crash_atom::value);
  auto a2 = wait_for_new_child(self, sup, "a", a);
  ASSERT_TRUE(a2) << "the crashed child was not restarted";
  EXPECT_EQ(ping(self, a2), "pong");
  EXPECT_EQ(child_of(self, sup, "b"), b) << "a sibling was restarted under one_for_one";
  EXPECT_EQ(restarts(self, sup), 1);
  self->send_exit(sup, caf::exit_reason::user_shutdown);
}

TEST(supervisor, one_for_all_restarts_every_child) {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  caf::scoped_actor self{system};
  auto sup = spawn_supervisor(system, {"test", restart_strategy::one_for_all, {}, {
      crashable_child("a"), crashable_child("b")}});
  auto a = child_of(self, sup, "a");
  auto b = child_of(self, sup, "b");
  self->monitor(b);
  self->send(a, crash_atom::value);
  ASSERT_TRUE(wait_for_new_child(self, sup, "a", a));
  auto b2 = wait_for_new_child(self, sup, "b", b);
  ASSERT_TRUE(b2) << "the sibling was not restarted under one_for_all";
  EXPECT_EQ(ping(self, b2), "pong");
  bool old_sibling_stopped = false;
  self->receive([&](caf::down_msg& down) { old_sibling_stopped = down.source == b; },
                caf::after(5s) >> [] {});
  EXPECT_TRUE(old_sibling_stopped);
  self->send_exit(sup, caf::exit_reason::user_shutdown);
}

TEST(supervisor, escalates_when_the_restart_budget_is_spent_and_stops_its_children) {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  caf::scoped_actor self{system};
  auto sup = spawn_supervisor(system, {"gpu pool", restart_strategy::one_for_one, {2, 60s}, {
      crashable_child("slot-0"), crashable_child("slot-1")}});
  self->monitor(sup);
  auto sibling = child_of(self, sup, "slot-1");
  self->monitor(sibling);
  auto victim = child_of(self, sup, "slot-0");
  for (int crash = 0; crash < 2; ++crash) {
    self->send(victim, crash_atom::value);
    victim = wait_for_new_child(self, sup, "slot-0", victim);
    ASSERT_TRUE(victim) << "restart " << crash + 1 << " is within the budget";
  }
  self->send(victim, crash_atom::value);  // the third crash within the window escalates
  std::string supervisor_reason;
  bool sibling_down = false;
  for (int i = 0; i < 2; ++i)
    self->receive(
        [&](caf::down_msg& down) {
          if (down.source == sup) supervisor_reason = system.render(down.reason);
          if (down.source == sibling) sibling_down = true;
        },
        caf::after(10s) >> [] {});
  EXPECT_NE(supervisor_reason.find("restart budget exhausted"), std::string::npos)
      << supervisor_reason;
  EXPECT_NE(supervisor_reason.find("slot-0"), std::string::npos) << supervisor_reason;
  EXPECT_TRUE(sibling_down) << "children must not outlive their supervisor";
}

TEST(supervisor, restarts_outside_the_window_do_not_count) {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  caf::scoped_actor self{system};
  auto sup = spawn_supervisor(system, {"test", restart_strategy::one_for_one, {1, 200ms}, {
      crashable_child("a")}});
  auto a = child_of(self, sup, "a");
  for (int crash = 0; crash < 3; ++crash) {
    self->send(a, crash_atom::value);
    a = wait_for_new_child(self, sup, "a", a);
    ASSERT_TRUE(a) << "crash " << crash + 1 << " came after the window and must be restarted";
    std::this_thread::sleep_for(300ms);
  }
  EXPECT_EQ(restarts(self, sup), 3);
  self->send_exit(sup, caf::exit_reason::user_shutdown);
}

TEST(supervisor, a_child_that_finishes_normally_is_not_restarted) {
  caf::actor_system_config cfg;
  caf::actor_system system{cfg};
  caf::scoped_actor self{system};
  auto sup = spawn_supervisor(system, {"test", restart_strategy::one_for_one, {}, {
      crashable_child("a")}});
  auto a = child_of(self, sup, "a");
  self->monitor(a);
  self->send(a, finish_atom::value);
  self->receive([](caf::down_msg&) {}, caf::after(5s) >> [] { FAIL() << "child did not finish"; });
  bool lookup_failed = false;
  for (int i = 0; i < 100 && !lookup_failed; ++i) {
    lookup_failed = !child_of(self, sup, "a");
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(lookup_failed);
  EXPECT_EQ(restarts(self, sup), 0);
  self->send_exit(sup, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace cuda_agent
