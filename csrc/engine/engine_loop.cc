// EngineCore, the background thread's side: pacing, one negotiation round (gather + broadcast with the
// coordinator), executing the agreed list, completing handles, and stopping.
#include <algorithm>
#include <sstream>

#include "common/logging.h"
#include "engine/engine_core.h"
#include "engine/fusion.h"

namespace phv {

namespace {

// Extra time a round may block past the earliest pending deadline before the engine gives up on the
// peers (it then stops: a half-finished round leaves the byte streams unusable).
constexpr double kRoundGraceS = 1.0;

std::string unit_label(const std::vector<UnitEntry>& unit) {
  const Desc& d = *unit.front().agreed;
  std::ostringstream out;
  if (unit.size() == 1) {
    out << kind_name(d.kind) << " '" << d.name << "'";
  } else {
    out << kind_name(d.kind) << " of " << unit.size() << " fused tensors [";
    for (size_t i = 0; i < unit.size() && i < 5; ++i) out << (i ? ", '" : "'") << unit[i].agreed->name << "'";
    out << (unit.size() > 5 ? ", ...]" : "]");
  }
  return out.str();
}

}  // namespace

void EngineCore::loop() {
  std::string reason;
  try {
    while (wait_for_work()) {
      take_incoming();
      Deadline deadline;
      build_message(deadline);
      try {
        exchange(deadline);
      } catch (const HvdError& e) {
        std::string msg = "rank " + std::to_string(rank_) + ": negotiation round " + std::to_string(round_) +
                          " with the other ranks failed: " + e.what();
        for (auto& kv : pending_) {
          if (!kv.second->held) fail(kv.second, e.kind(), "rank " + std::to_string(rank_) + ": " + kv.second->label() + " failed: " + msg);
        }
        if (join_op_) fail(join_op_, e.kind(), msg);
        throw HvdError(e.kind(), msg);
      }
      ++round_;
      ++stats_.rounds;
      log(LogLevel::TRACE, "engine round ", round_, ": ", resp_.n, " items, flags ", resp_.flags, ", sent bits ",
          msg_.bits.size(), " news ", msg_.n_news);
      execute();
      if (stop_after_round_) break;
    }
  } catch (const std::exception& e) {
    reason = std::string("the engine on rank ") + std::to_string(rank_) + " stopped after an error: " + e.what();
  }
  if (reason.empty()) reason = "pyhorovod has been shut down (" + resp_.shutdown_reason + ")";
  // The requests that failed carry their own error kind; the rest were simply not run.
  log(LogLevel::INFO, "engine stats: ", stats_.rounds, " rounds, ", stats_.cached, " cached responses, ",
      stats_.full, " full responses, ", stats_.errors, " errors, ", stats_.units, " units run, ", stats_.fused,
      " tensors in fused units");
  stop_all(ErrorKind::SHUTDOWN, reason);
}

bool EngineCore::wait_for_work() {
  std::unique_lock<std::mutex> lock(mu_);
  bool urgent = !incoming_.empty() || stop_requested_ || (waiting_ && !all_waiting_);
  if (!urgent) {
    Clock::time_point t0 = Clock::now();
    work_cv_.wait_until(lock, next_cycle_, [&] { return !incoming_.empty() || stop_requested_; });
    log(LogLevel::TRACE, "engine round ", round_, ": slept ",
        std::chrono::duration<double, std::micro>(Clock::now() - t0).count(), " us, incoming ", incoming_.size());
  } else {
    log(LogLevel::TRACE, "engine round ", round_, ": no sleep, incoming ", incoming_.size(), " waiting ", waiting_);
  }
  stop_req_seen_ = stop_requested_;
  Clock::time_point now = Clock::now();
  next_cycle_ = now + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double, std::milli>(options_.cycle_time_ms));
  taken_.swap(incoming_);
  return true;
}

void EngineCore::take_incoming() {
  for (OpPtr& op : taken_) {
    if (op->desc.kind == static_cast<uint8_t>(OpType::JOIN)) {
      join_op_ = op;
      continue;
    }
    pending_[op->desc.key()] = op;
    if (op->req.group == 0) continue;
    // A group is reported only once all its members are here, so that it becomes ready as a unit.
    std::vector<OpPtr>& group = groups_[op->req.group];
    group.push_back(op);
    op->held = true;
    if (static_cast<int64_t>(group.size()) >= group.front()->req.group_size) {
      for (OpPtr& member : group) {
        member->held = false;
        member->desc.group_key = group.front()->desc.name;
        member->desc.group_size = static_cast<int32_t>(group.size());
      }
      groups_.erase(op->req.group);
    }
  }
  taken_.clear();
}

void EngineCore::build_message(Deadline& round_deadline) {
  msg_.clear();
  Clock::time_point now = Clock::now();
  Deadline earliest = Deadline::max();
  bool waiting = false;
  if (stop_req_seen_) msg_.flags |= kRankShutdown;
  if (join_op_) {
    if (now >= join_op_->deadline) {
      fail(join_op_, ErrorKind::TIMEOUT, "rank " + std::to_string(rank_) + ": " + join_op_->label() +
                                             " timed out after " + std::to_string(join_op_->timeout_s) +
                                             " s: not every rank joined");
      join_op_.reset();
    } else {
      msg_.flags |= kRankJoined;
      waiting = true;
      earliest = std::min(earliest, join_op_->deadline);
    }
  }
  for (auto it = pending_.begin(); it != pending_.end();) {
    Op* op = it->second.get();
    if (op->expired_sent) {
      ++it;
      continue;
    }
    if (now >= op->deadline) {
      if (op->held) {  // never reported: the other ranks know nothing of it, so fail it here alone
        fail(it->second, ErrorKind::TIMEOUT, "rank " + std::to_string(rank_) + ": " + op->label() +
                                                 " timed out: its group was never completely enqueued");
        it = pending_.erase(it);
        continue;
      }
      Expiry& x = msg_.add_expiry();
      x.key = it->first;
      x.kind = op->desc.kind;
      x.waited_s = op->timeout_s;
      x.request_seq = op->seq;
      op->expired_sent = true;
      ++it;
      continue;
    }
    if (op->held) {
      ++it;
      continue;
    }
    waiting = true;
    earliest = std::min(earliest, op->deadline);
    if (!op->reported) {
      int pos = -1;
      if (cache_.enabled() && ResponseCache::cacheable(op->desc)) {
        pos = cache_.lookup(it->first);
        if (pos >= 0 && !cache_.hit(pos, op->desc, op->set_index)) pos = -1;
      }
      if (pos >= 0) {
        msg_.set_bit(pos);  // re-sent every round while pending: the coordinator keeps no state for it
      } else {
        msg_.add_new() = op->desc;
        op->reported = true;
      }
    }
    ++it;
  }
  if (waiting) msg_.flags |= kRankWaiting;
  waiting_ = waiting;
  round_deadline = deadline_after(options_.timeout_s);
  if (earliest != Deadline::max()) {
    Deadline soft = std::max(earliest, now) + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kRoundGraceS));
    round_deadline = std::min(round_deadline, soft);
  }
  if (stop_req_seen_) round_deadline = std::min(round_deadline, deadline_after(std::min(options_.timeout_s, 30.0)));
}

void EngineCore::drive(Deadline deadline) {
  while (transport_.pending() > 0) {
    completed_.clear();
    transport_.progress(completed_, deadline);
  }
}

void EngineCore::exchange(Deadline deadline) {
  encode_rank_message(msg_, send_buf_);
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) transport_.post_recv(r, slots_[static_cast<size_t>(r)].data(), kSlotBytes);
    drive(deadline);
    bool more = false;
    for (int r = 1; r < size_; ++r) {
      std::vector<uint8_t>& slot = slots_[static_cast<size_t>(r)];
      size_t len = announced_length(slot.data());
      if (len > kSlotBytes) {
        slot.resize(len);
        transport_.post_recv(r, slot.data() + kSlotBytes, len - kSlotBytes);
        more = true;
      }
    }
    if (more) drive(deadline);
    decode_rank_message(send_buf_.data(), announced_length(send_buf_.data()), msgs_[0]);
    for (int r = 1; r < size_; ++r) {
      const std::vector<uint8_t>& slot = slots_[static_cast<size_t>(r)];
      decode_rank_message(slot.data(), announced_length(slot.data()), msgs_[static_cast<size_t>(r)]);
    }
    coordinator_->decide(msgs_, resp_);
    encode_response_list(resp_, resp_buf_);
    for (int r = 1; r < size_; ++r) {
      transport_.post_send(r, resp_buf_.data(), kSlotBytes);
      if (resp_buf_.size() > kSlotBytes) transport_.post_send(r, resp_buf_.data() + kSlotBytes, resp_buf_.size() - kSlotBytes);
    }
    drive(deadline);
    return;
  }
  transport_.post_send(0, send_buf_.data(), kSlotBytes);
  if (send_buf_.size() > kSlotBytes) transport_.post_send(0, send_buf_.data() + kSlotBytes, send_buf_.size() - kSlotBytes);
  if (resp_buf_.size() < kSlotBytes) resp_buf_.resize(kSlotBytes);
  transport_.post_recv(0, resp_buf_.data(), kSlotBytes);
  drive(deadline);
  size_t len = announced_length(resp_buf_.data());
  if (len > kSlotBytes) {
    resp_buf_.resize(len);
    transport_.post_recv(0, resp_buf_.data() + kSlotBytes, len - kSlotBytes);
    drive(deadline);
  }
  decode_response_list(resp_buf_.data(), len, resp_);
  resolve_items(resp_, cache_);
}

EngineCore::OpPtr EngineCore::find_pending(const Desc& d) {
  tmp_key_.set = d.set;
  tmp_key_.name.assign(d.name);  // reuses the key's capacity: no allocation per round
  auto it = pending_.find(tmp_key_);
  return it == pending_.end() ? nullptr : it->second;
}

void EngineCore::execute() {
  Clock::time_point now = Clock::now();
  bool tl = rank_ == 0 && timeline_.active();
  if (tl && resp_.n > 0) timeline_.cycle(now);
  finished_.clear();
  try {
    for (size_t i = 0; i < resp_.n;) {
      ResponseItem& item = resp_.items[i];
      if (item.type == ItemType::ERROR) {
        ++stats_.errors;
        if (OpPtr op = find_pending(item.desc)) {
          pending_.erase(op->desc.key());
          fail(op, item.error_kind, "rank " + std::to_string(rank_) + ": " + op->label() + " failed: " + item.message);
        }
        ++i;
        continue;
      }
      if (tl && sets_.is_member(item.agreed->set)) timeline_.begin(item.agreed->key(), "QUEUE", now);
      size_t j = i + 1;
      while (j < resp_.n && resp_.items[j].fused) {
        if (tl && sets_.is_member(resp_.items[j].agreed->set)) timeline_.begin(resp_.items[j].agreed->key(), "QUEUE", now);
        ++j;
      }
      for (size_t k = i; k < j; ++k) ++(resp_.items[k].type == ItemType::CACHED ? stats_.cached : stats_.full);
      ++stats_.units;
      if (j - i > 1) stats_.fused += j - i;
      run_unit(i, j);
      i = j;
    }
  } catch (...) {
    for (OpPtr& op : finished_) complete(op);
    finished_.clear();
    throw;
  }
  // Cache updates after the whole list ran: CACHED items point into the cache until then.
  if (cache_.enabled()) {
    for (size_t i = 0; i < resp_.n; ++i) {
      const ResponseItem& item = resp_.items[i];
      if (item.type == ItemType::CACHED) {
        cache_.touch(item.pos);
      } else if (item.type == ItemType::FULL && ResponseCache::cacheable(item.desc)) {
        cache_.put(item.desc, item.dim0s);
      }
    }
  }
  if (!finished_.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (OpPtr& op : finished_) {
      op->done = true;
      in_flight_.erase(op->desc.key());
    }
    done_cv_.notify_all();
  }
  finished_.clear();
  if ((resp_.flags & kRespJoinDone) && join_op_) {
    join_op_->result.value = resp_.join_value;
    complete(join_op_);
    join_op_.reset();
  }
  all_waiting_ = (resp_.flags & kRespAllWaiting) != 0;
  // Still waiting for the other ranks? (Recomputed after execution: a rank whose requests all ran must
  // sleep until the next enqueue, not start an empty round that the next enqueue then just misses.)
  waiting_ = static_cast<bool>(join_op_);
  for (auto it = pending_.begin(); it != pending_.end() && !waiting_; ++it) waiting_ = !it->second->held;
  if (resp_.flags & kRespShutdown) stop_after_round_ = true;
  if (rank_ == 0) timeline_.flush();
}

void EngineCore::run_unit(size_t begin, size_t end) {
  unit_.clear();
  unit_ops_.clear();
  for (size_t k = begin; k < end; ++k) {
    const ResponseItem& item = resp_.items[k];
    OpPtr op = find_pending(*item.agreed);
    unit_.push_back(UnitEntry{item.agreed, item.agreed_dim0s, op.get()});
    unit_ops_.push_back(op);
  }
  const Desc& first = *unit_.front().agreed;
  if (first.kind == kKindAddSet || first.kind == kKindRemoveSet) {
    apply_set_change(resp_.items[begin], unit_ops_.front().get());
    if (unit_ops_.front()) {
      pending_.erase(unit_ops_.front()->desc.key());
      finished_.push_back(unit_ops_.front());
    }
    return;
  }
  ProcessSet* ps = sets_.get(first.set);
  if (ps == nullptr || !ps->member) return;  // another set's collective: nothing to do here
  double timeout = 0;
  for (size_t k = 0; k < unit_.size(); ++k) {
    if (unit_ops_[k]) {
      timeout = std::max(timeout, unit_ops_[k]->timeout_s);
    } else if (!join_op_ || first.kind != static_cast<uint8_t>(OpType::ALLREDUCE)) {
      throw HvdError(ErrorKind::INTERNAL, "rank " + std::to_string(rank_) + ": the ranks agreed to run " +
                                              unit_label(unit_) + ", which this rank never submitted");
    }
  }
  if (timeout <= 0) timeout = options_.timeout_s;
  uint64_t seq = ++ps->ops_run;
  if (rank_ == 0 && timeline_.active()) {
    Clock::time_point now = Clock::now();
    for (const UnitEntry& e : unit_) timeline_.end(e.agreed->key(), "QUEUE", now);
  }
  try {
    executor_.run(ps->comm, unit_, deadline_after(timeout));
  } catch (const HvdError& e) {
    std::string msg = "rank " + std::to_string(rank_) + ": " + unit_label(unit_) + " (op #" + std::to_string(seq) +
                      " in process set " + std::to_string(first.set) + ") failed: " + e.what();
    for (OpPtr& op : unit_ops_) {
      if (!op) continue;
      pending_.erase(op->desc.key());
      fail(op, e.kind(), msg);
    }
    throw HvdError(e.kind(), msg);
  }
  for (OpPtr& op : unit_ops_) {
    if (!op) continue;
    pending_.erase(op->desc.key());
    finished_.push_back(op);
  }
}

void EngineCore::apply_set_change(const ResponseItem& item, Op* op) {
  const Desc& d = *item.agreed;
  try {
    if (d.kind == kKindAddSet) {
      std::vector<int> ranks(d.shape.begin(), d.shape.end());
      int id = sets_.add(ranks);
      if (op) op->result.value = id;
      return;
    }
    int id = static_cast<int>(d.shape.at(0));
    sets_.remove(id);
    cache_.erase_set(id);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->first.set == id) {
        fail(it->second, ErrorKind::INVALID_ARGUMENT, "rank " + std::to_string(rank_) + ": " +
                                                          it->second->label() + " failed: its process set was removed");
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  } catch (const HvdError& e) {
    if (op) {
      op->failed = true;  // completed by the caller (run_unit) through finished_
      op->error_kind = e.kind();
      op->error = "rank " + std::to_string(rank_) + ": " + op->label() + " failed: " + e.what();
    }
  }
}

void EngineCore::complete(const OpPtr& op) {
  std::lock_guard<std::mutex> lock(mu_);
  op->done = true;
  if (op->desc.kind == static_cast<uint8_t>(OpType::JOIN)) {
    join_in_flight_ = false;
  } else {
    in_flight_.erase(op->desc.key());
  }
  done_cv_.notify_all();
}

void EngineCore::fail(const OpPtr& op, ErrorKind kind, const std::string& message) {
  op->failed = true;
  op->error_kind = kind;
  op->error = message;
  complete(op);
}

void EngineCore::stop_all(ErrorKind kind, const std::string& reason) {
  std::vector<OpPtr> victims;
  for (auto& kv : pending_) victims.push_back(kv.second);
  pending_.clear();
  groups_.clear();
  if (join_op_) victims.push_back(join_op_);
  join_op_.reset();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    stop_reason_ = reason;
    for (OpPtr& op : incoming_) victims.push_back(op);
    incoming_.clear();
  }
  for (OpPtr& op : victims) {
    if (op->done) continue;
    fail(op, kind, "rank " + std::to_string(rank_) + ": " + op->label() + " was not run: " + reason);
  }
  if (rank_ == 0) timeline_.flush();
  std::lock_guard<std::mutex> lock(mu_);
  thread_exited_ = true;
  exit_cv_.notify_all();
}

}  // namespace phv
