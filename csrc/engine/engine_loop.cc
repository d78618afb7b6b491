// EngineCore, the background thread's side: pacing, one negotiation round (gather + broadcast with the
// coordinator), executing the agreed list, completing handles, and stopping.
#include <algorithm>
#include <sstream>

#include "common/interrupt.h"
#include "common/logging.h"
#include "engine/engine_core.h"
#include "engine/fusion.h"
#include "engine/inline_reduce.h"

namespace phv {

namespace {

// Extra time a round may block past the earliest pending deadline before the engine gives up on the
// peers (it then stops: a half-finished round leaves the byte streams unusable).
constexpr double kRoundGraceS = 1.0;

// How long the background thread leaves a fresh enqueue to its caller: a synchronous caller reaches
// wait() within microseconds and then runs the round itself (no hand-off); an asynchronous burst gets
// its requests into one round (better fusion). Far below a cycle, so no request waits for one.
constexpr auto kCoalesce = std::chrono::microseconds(50);

}  // namespace

void EngineCore::loop() {
  InterruptScope abort_scope(&EngineCore::abort_requested, this);  // the only check of this thread
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        if (stopped_) break;
        if (background_due()) break;
        Clock::time_point until = next_cycle_;
        if (!incoming_.empty() && callers_waiting_ == 0) until = std::min(until, incoming_since_ + kCoalesce);
        work_cv_.wait_until(lock, until);
      }
      if (stopped_) break;
    }
    round_mu_.lock();
    bool run;
    {
      std::lock_guard<std::mutex> lock(mu_);
      run = !stopped_ && background_due();  // else a caller drove the rounds meanwhile
    }
    if (run) run_round();
    release_token();
  }
  std::lock_guard<std::mutex> lock(mu_);
  thread_exited_ = true;
  exit_cv_.notify_all();
}

void EngineCore::release_token() {
  round_mu_.unlock();
  std::lock_guard<std::mutex> lock(mu_);
  if (callers_waiting_ > 0) done_cv_.notify_all();  // the token is free: a waiting caller may drive now
}

bool EngineCore::background_due() const {
  if (stop_requested_) return true;
  // Callers blocked in wait() drive the rounds themselves; the background thread then only keeps the
  // cycle (idle rounds, stall checks, timeouts).
  Clock::time_point now = Clock::now();
  if (callers_waiting_ == 0) {
    if (waiting_ && !all_waiting_) return true;
    if (!incoming_.empty() && now >= incoming_since_ + kCoalesce) return true;
  }
  return now >= next_cycle_;
}

void EngineCore::run_round() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_req_seen_ = stop_requested_;
    next_cycle_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double, std::milli>(options_.cycle_time_ms));
    taken_.swap(incoming_);
  }
  std::string reason;
  int64_t fusion = pending_fusion_threshold_.exchange(-1);
  if (fusion >= 0 && coordinator_) coordinator_->set_fusion_threshold(fusion);
  try {
    take_incoming();
    Deadline deadline;
    build_message(deadline);
    try {
      exchange(deadline);
    } catch (const HvdError& e) {
      // e.what() comes from the transport: it names our rank and the peer (rank and address).
      std::string msg = "negotiation round " + std::to_string(round_) + " failed: " + e.what();
      std::string me = "rank " + std::to_string(rank_) + ": ";
      ErrorKind kind = stop_kind(e.kind());
      for (auto& kv : pending_) {
        if (!kv.second->held) fail(kv.second, kind, me + kv.second->label() + " failed: " + msg);
      }
      if (join_op_) fail(join_op_, kind, me + join_op_->label() + " failed: " + msg);
      throw HvdError(e.kind(), msg);
    }
    ++round_;
    ++stats_.rounds;
    log(LogLevel::TRACE, "engine round ", round_, ": ", resp_.n, " items, flags ", resp_.flags, ", sent bits ",
        msg_.bits.size(), " news ", msg_.n_news);
    execute();
    if (!stop_after_round_) return;
    reason = "pyhorovod has been shut down (" + resp_.shutdown_reason + ")";
  } catch (const std::exception& e) {
    reason = std::string("the engine on rank ") + std::to_string(rank_) + " stopped after an error: " + e.what();
  }
  // The requests that failed carry their own error kind; the rest were simply not run.
  log(LogLevel::INFO, "engine stats: ", stats_.rounds, " rounds, ", stats_.cached, " cached responses, ",
      stats_.full, " full responses, ", stats_.errors, " errors, ", stats_.units, " units run, ", stats_.fused,
      " tensors in fused units, ", stats_.inlined, " reduced inline");
  stop_all(ErrorKind::SHUTDOWN, reason);
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
        if (inline_eligible(op->desc)) append_inline(msg_, pos, *op);
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

ErrorKind EngineCore::stop_kind(ErrorKind transport_kind) {
  if (transport_kind == ErrorKind::INTERRUPTED) abort_ = true;
  return transport_kind == ErrorKind::TIMEOUT ? ErrorKind::PEER_LOST : transport_kind;
}

bool EngineCore::abort_requested(void* core) { return static_cast<EngineCore*>(core)->abort_.load(); }

std::string EngineCore::describe_round(const void* core) {
  // Names the requests this rank waits to run: those of the round, then those enqueued since it began.
  const EngineCore& e = *static_cast<const EngineCore*>(core);
  std::string out = "negotiation round " + std::to_string(e.round_) + " (the exchange with the coordinator, rank 0";
  int shown = 0;
  auto add = [&](const OpPtr& op) {
    if (op->held || shown > 3) return;
    out += shown == 3 ? ", ..." : (shown ? ", " : ", for ") + op->label();
    ++shown;
  };
  for (const auto& kv : e.pending_) add(kv.second);
  std::lock_guard<std::mutex> lock(e.mu_);  // (the caller, the round-token holder, holds no lock)
  for (const OpPtr& op : e.incoming_) add(op);
  return out + ")";
}

void EngineCore::exchange(Deadline deadline) {
  TransferWatchScope watch(&round_watch_);
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

}  // namespace phv
