// Runner: taking requests from the queue, building this rank's RankMessage, failing and releasing
// requests. Executing the agreed list is in runner_exec.cc.
#include "engine/runner.h"

#include <algorithm>

#include "common/logging.h"
#include "engine/inline_reduce.h"

namespace phv {

namespace {

// Extra time a round may block past the earliest pending deadline before the engine gives up on the
// peers (it then stops: a half-finished round leaves the byte streams unusable).
constexpr double kRoundGraceS = 1.0;

}  // namespace

Runner::Runner(int rank, int size, const Tuning& tuning, const EngineOptions& options, ProcessSetRegistry& sets,
               ResponseCache& cache, Timeline& timeline, Callers& callers, std::atomic<bool>& abort)
    : rank_(rank),
      options_(options),
      sets_(sets),
      cache_(cache),
      timeline_(timeline),
      callers_(callers),
      abort_(abort),
      executor_(tuning, timeline, CopyPathVote::parse(options.copy_path_adapt),
                CopyPathVote::parse(options.allreduce_path_adapt, kAllreduceKnob)),
      gpu_(rank, size, options, executor_) {
  // The stall inspector's limits, applied to bytes in flight too (transfer_watch.h).
  double warn_s = options.stall_check_disable ? 0 : std::max(0.0, options.stall_check_s);
  double fail_s = options.stall_check_disable ? 0 : std::max(0.0, options.stall_shutdown_s);
  unit_watch_ = TransferWatch{warn_s, fail_s, &Runner::describe_unit, this};
  executor_.set_hierarchy(options.hierarchy);
}

void Runner::take(std::vector<OpPtr>& taken) {
  for (OpPtr& op : taken) {
    if (op->desc.kind == static_cast<uint8_t>(OpType::JOIN)) {
      join_op_ = op;
      continue;
    }
    pending_.put(key_of(op->desc), op);
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
  taken.clear();
}

bool Runner::build_message(const RoundStop& stop, Deadline& round_deadline) {
  msg_.clear();
  Clock::time_point now = Clock::now();
  Deadline earliest = Deadline::max();
  bool waiting = false;
  size_t inline_bytes = 0;  // carried by msg_ so far (at most kInlineMessageBytes)
  if (stop.asked) msg_.flags |= kRankShutdown;
  if (join_op_) {
    if (now >= join_op_->deadline) {
      fail(join_op_, ErrorKind::TIMEOUT,
           "rank " + std::to_string(rank_) + ": " + join_op_->label() + " timed out after " +
               std::to_string(join_op_->timeout_s) + " s: not every rank joined");
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
        fail(it->second, ErrorKind::TIMEOUT,
             "rank " + std::to_string(rank_) + ": " + op->label() +
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
        if (inline_eligible(cache_.entry(pos)) && sends_inline(op->req) &&
            inline_bytes + op->desc.bytes() <= kInlineMessageBytes) {
          append_inline(msg_, pos, *op);
          inline_bytes += op->desc.bytes();
        }
      } else {
        msg_.add_new() = op->desc;
        op->reported = true;
      }
    }
    ++it;
  }
  if (waiting) msg_.flags |= kRankWaiting;
  // A vote makes the express round miss, so the coordinator hears it in this round.
  const CopyPathVote::Vote vote = executor_.copy_path().poll();
  if (vote != CopyPathVote::Vote::NONE) {
    msg_.flags |= vote == CopyPathVote::Vote::WIDE ? kRankVoteWide : kRankVoteNarrow;
    log(LogLevel::DEBUG, "rank ", rank_, " votes for ", executor_.copy_path().reason());
  }
  const CopyPathVote::Vote allreduce_vote = executor_.allreduce_path().poll();
  if (allreduce_vote != CopyPathVote::Vote::NONE) {
    msg_.flags |= allreduce_vote == CopyPathVote::Vote::WIDE ? kRankVoteSingleAllreduce : kRankVoteRingAllreduce;
    log(LogLevel::DEBUG, "rank ", rank_, " votes for the allreduce of ", executor_.allreduce_path().reason());
  }
  round_deadline = now + seconds_to_duration(options_.timeout_s);
  if (earliest != Deadline::max()) {
    Deadline soft = std::max(earliest, now) + seconds_to_duration(kRoundGraceS);
    round_deadline = std::min(round_deadline, soft);
  }
  if (stop.asked)
    round_deadline = std::min(round_deadline, now + seconds_to_duration(std::min(options_.timeout_s, 30.0)));
  return waiting;
}

const Key& Runner::key_of(const Desc& d) {
  tmp_key_.set = d.set;
  tmp_key_.name.assign(d.name);  // reuses the key's capacity: no allocation per round
  return tmp_key_;
}

OpPtr Runner::find_pending(const Desc& d) {
  auto it = pending_.find(key_of(d));
  return it == pending_.end() ? nullptr : it->second;
}

void Runner::fail(const OpPtr& op, ErrorKind kind, const std::string& message) {
  op->failed = true;
  op->error_kind = kind;
  op->error = message;
  callers_.complete(op);
}

void Runner::fail_reported(ErrorKind kind, const std::string& message) {
  std::string me = "rank " + std::to_string(rank_) + ": ";
  for (auto& kv : pending_) {
    if (!kv.second->held) fail(kv.second, kind, me + kv.second->label() + " failed: " + message);
  }
  if (join_op_) fail(join_op_, kind, me + join_op_->label() + " failed: " + message);
}

void Runner::release_all(std::vector<OpPtr>& victims) {
  for (auto& kv : pending_) victims.push_back(kv.second);
  pending_.clear();
  groups_.clear();
  if (join_op_) victims.push_back(join_op_);
  join_op_.reset();
}

ErrorKind Runner::stop_kind(ErrorKind transport_kind) {
  if (transport_kind == ErrorKind::INTERRUPTED) abort_ = true;
  return transport_kind == ErrorKind::TIMEOUT ? ErrorKind::PEER_LOST : transport_kind;
}

void Runner::log_stats() const {
  log(LogLevel::INFO, "engine stats: ", stats_.rounds, " rounds, ", stats_.cached, " cached responses, ", stats_.full,
      " full responses, ", stats_.errors, " errors, ", stats_.units, " units run, ", stats_.fused,
      " tensors in fused units, ", stats_.inlined, " reduced inline, ", stats_.express, " express rounds, ",
      stats_.express_missed, " express misses, ", executor_.copy_path().calls(true), " of ",
      executor_.copy_path().calls(true) + executor_.copy_path().calls(false),
      " calls below the single-copy threshold run as single copies, ", executor_.copy_path().votes(),
      " copy-path votes, ", executor_.allreduce_path().calls(true), " of ",
      executor_.allreduce_path().calls(true) + executor_.allreduce_path().calls(false),
      " large allreduces run as single copies, ", executor_.allreduce_path().votes(), " allreduce votes");
}

}  // namespace phv
