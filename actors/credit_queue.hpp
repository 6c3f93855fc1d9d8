// The credit queue: the one mechanism by which work waits for a turn. The compiler and GPU pools
// (a credit is a worker slot), the policy actor (a credit is a request in flight to the backend)
// and the rollout manager (a credit is a running episode) all admit work through it.
//
// Credits numbered 0, 1, ... (more may be added, and a credit may be retired for good: a node's
// workers come and go), and a bounded queue of waiting items in
// arrival order (a retry may go to the front: it stands in for work already admitted). Each
// waiting item has an id, for its expiry timer, and the address of the actor waiting for it, so
// that a waiter that dies loses its place instead of holding credit it will never use.
//
// The queue itself is plain data, so its rules are tested without actors; watch_waiter() is the
// actor side: it monitors the waiter and schedules (expire_atom, id) after the longest wait. The
// owner answers the down message with drop_waiter() and the expiry with expire().
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include <caf/actor_addr.hpp>

#include "messages/atoms.hpp"

namespace cuda_agent {

template <class Item>
class credit_queue {
 public:
  // A credit handed to the oldest waiting item.
  struct grant {
    std::size_t credit = 0;
    Item item;
  };

  static constexpr std::size_t unbounded = std::numeric_limits<std::size_t>::max();

  credit_queue(std::size_t credits = 0, std::size_t max_waiting = unbounded)
      : state_(credits, credit_state::free), max_waiting_(max_waiting) {}

  // Queues an item at the back (front = false) or the front; returns its id, or 0 when the
  // queue already holds max_waiting items (the caller rejects the item, saying so).
  uint64_t push(Item item, caf::actor_addr waiter = {}, bool front = false) {
    if (waiting_.size() >= max_waiting_) return 0;
    const uint64_t id = next_id_++;
    waiting_entry entry{id, std::move(waiter), std::move(item)};
    if (front)
      waiting_.push_front(std::move(entry));
    else
      waiting_.push_back(std::move(entry));
    peak_waiting_ = std::max(peak_waiting_, waiting_.size());
    return id;
  }

  // A free credit for work that need not wait, if one is free and nothing waits before it.
  std::optional<std::size_t> acquire() {
    if (!waiting_.empty()) return std::nullopt;
    const auto free = std::find(state_.begin(), state_.end(), credit_state::free);
    if (free == state_.end()) return std::nullopt;
    *free = credit_state::busy;
    return static_cast<std::size_t>(free - state_.begin());
  }

  // The oldest waiting item and a free credit, if there are both and may_start(item) holds for
  // that item (the rollout's staleness bound); the credit is in use until release().
  template <class MayStart>
  std::optional<grant> next(MayStart may_start) {
    if (waiting_.empty() || !may_start(waiting_.front().item)) return std::nullopt;
    const auto free = std::find(state_.begin(), state_.end(), credit_state::free);
    if (free == state_.end()) return std::nullopt;
    *free = credit_state::busy;
    grant g{static_cast<std::size_t>(free - state_.begin()), std::move(waiting_.front().item)};
    waiting_.pop_front();
    return g;
  }
  std::optional<grant> next() {
    return next([](const Item&) { return true; });
  }

  // Gives a credit back; a retired one stays retired.
  void release(std::size_t credit) {
    if (state_.at(credit) == credit_state::busy) state_[credit] = credit_state::free;
  }

  // A new credit; returns its number.
  std::size_t add_credit() {
    state_.push_back(credit_state::free);
    return state_.size() - 1;
  }

  // Takes a credit out of use for good, whether free or in use (its holder's answer, if any,
  // comes to nothing). Its number is never handed out again.
  void retire(std::size_t credit) { state_.at(credit) = credit_state::retired; }
  bool retired(std::size_t credit) const { return state_.at(credit) == credit_state::retired; }

  // Removes the waiting item `id` (its time is up); nothing when it already has a credit.
  std::optional<Item> expire(uint64_t id) {
    const auto it = std::find_if(waiting_.begin(), waiting_.end(),
                                 [id](const waiting_entry& e) { return e.id == id; });
    if (it == waiting_.end()) return std::nullopt;
    Item item = std::move(it->item);
    waiting_.erase(it);
    return item;
  }

  // Removes every item `waiter` waits for (it died); returns them.
  std::vector<Item> drop_waiter(const caf::actor_addr& waiter) {
    std::vector<Item> dropped;
    if (!waiter) return dropped;
    auto keep = std::stable_partition(waiting_.begin(), waiting_.end(),
                                      [&](const waiting_entry& e) { return e.waiter != waiter; });
    for (auto it = keep; it != waiting_.end(); ++it) dropped.push_back(std::move(it->item));
    waiting_.erase(keep, waiting_.end());
    return dropped;
  }

  void clear_waiting() { waiting_.clear(); }

  std::size_t credits() const {  // not retired
    return state_.size() - static_cast<std::size_t>(std::count(state_.begin(), state_.end(), credit_state::retired));
  }
  std::size_t in_use() const {
    return static_cast<std::size_t>(std::count(state_.begin(), state_.end(), credit_state::busy));
  }
  std::size_t waiting() const { return waiting_.size(); }
  std::size_t peak_waiting() const { return peak_waiting_; }  // how hard backpressure pushed
  std::size_t max_waiting() const { return max_waiting_; }

 private:
  struct waiting_entry {
    uint64_t id;
    caf::actor_addr waiter;
    Item item;
  };

  enum class credit_state : uint8_t { free, busy, retired };

  std::vector<credit_state> state_;
  std::deque<waiting_entry> waiting_;
  std::size_t max_waiting_;
  std::size_t peak_waiting_ = 0;
  uint64_t next_id_ = 1;
};

// The actor side of a waiting item: `self` monitors its waiter (a down message follows its
// death) and gets (expire_atom, id) once max_wait has passed.
template <class Self>
void watch_waiter(Self* self, uint64_t id, const caf::actor_addr& waiter,
                  std::chrono::milliseconds max_wait) {
  if (waiter) self->monitor(waiter);
  self->delayed_send(self, max_wait, expire_atom::value, id);
}

}  // namespace cuda_agent
