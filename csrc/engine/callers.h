// The engine's front desk: what the callers' threads touch. It hands out handles and request numbers,
// names unnamed requests, refuses a name already in flight, queues accepted requests for the next round,
// answers poll(), and completes requests when the round-token holder reports them done.
//
// One mutex guards it (mutex()); the engine's pacing state (engine_pacing.h) lives under the same lock,
// so that an enqueue and the decision whether to run a round never miss each other. Methods marked
// "locked" take the lock themselves; the others expect the caller to hold it.
#pragma once
#include <array>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>
#include "engine/op.h"
#include "engine/recycling_map.h"

namespace phv {

using OpPtr = std::shared_ptr<Op>;

class Callers {
 public:
  explicit Callers(int rank) : rank_(rank) {}

  std::mutex& mutex() const { return mu_; }
  std::condition_variable& done_cv() { return done_cv_; }

  // Locked. Like Horovod's "allreduce.noname.N", counted per op type, so ranks that make the same
  // unnamed calls of each type in the same order agree on the names.
  std::string auto_name(OpType type);
  std::string set_change_name(const std::string& what);  // locked; "add_process_set.3"

  // Checks the name (or the one join) is free, numbers the request and gives it a handle. The handle
  // goes in the handle table only when `listed`: a caller that waits right away holds the Op itself, and
  // nobody can poll or wait for a handle they were never given.
  void admit(const OpPtr& op, bool listed = true);
  // Queues an admitted request for the next round; true when it starts a burst (the queue was empty).
  bool queue(const OpPtr& op);
  bool queue_empty() const { return incoming_.empty(); }
  Clock::time_point queue_since() const { return incoming_since_; }  // when the queue last filled
  const std::vector<OpPtr>& queued() const { return incoming_; }
  void take_queue(std::vector<OpPtr>& into) { into.swap(incoming_); }  // into must be empty
  void drain_queue(std::vector<OpPtr>& into);                         // appends, leaves the queue empty

  OpPtr find(Handle handle) const;  // nullptr when unknown (never issued, or already waited for)
  void forget(Handle handle) { handles_.erase(handle); }
  bool poll(Handle handle) const;   // locked; throws for an unknown handle

  // Locked: marks requests done, frees their names and wakes the waiting callers.
  void complete(const OpPtr& op);
  void complete_all(const std::vector<OpPtr>& ops);

  // Locked. A request another rank made and this rank never did failed: remember the highest number of
  // its automatic name (engine/auto_name.h), 0 when none was seen for the prefix.
  void note_foreign_failure(const std::string& name);
  int64_t auto_name_floor(const std::string& prefix) const;

 private:
  void release_name(const Op& op);
  const Key& key_of(const Op& op);  // as Runner::key_of, in scratch_key_ (under the mutex)

  int rank_;
  mutable std::mutex mu_;
  std::condition_variable done_cv_;  // callers wait for completions (and for the round token)
  std::vector<OpPtr> incoming_;
  Clock::time_point incoming_since_;
  std::unordered_map<Handle, OpPtr> handles_;
  RecyclingMap<Key, Handle, KeyHash> in_flight_;  // the duplicate-name check (the handle is not read)
  Key scratch_key_;
  Handle next_handle_ = 1;
  int64_t next_seq_ = 1;
  std::array<int64_t, 8> next_auto_name_{};                   // per OpType
  std::unordered_map<std::string, int64_t> auto_name_floor_;  // by prefix
  int64_t next_set_change_ = 0;
  bool join_in_flight_ = false;
};

}  // namespace phv
