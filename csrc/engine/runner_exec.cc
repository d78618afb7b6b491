// Runner, executing an agreed ResponseList on this rank: errors, inline results, units (through the
// Executor), process-set changes, cache updates, and completing or failing requests.
#include <algorithm>
#include <sstream>

#include "common/enforce.h"
#include "common/logging.h"
#include "engine/inline_reduce.h"
#include "engine/runner.h"

namespace phv {

namespace {

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

// The noise-scale hook's reduced side, right after the result was written, while it is still in cache.
void tap_output(const Op& op) {
  op.req.norm_tap.reduced(op.req.output, static_cast<size_t>(op.desc.count()), op.req.dtype);
}

}  // namespace

Runner::Outcome Runner::execute(const ResponseList& resp) {
  bool tl = rank_ == 0 && timeline_.active();
  Clock::time_point now = tl ? Clock::now() : Clock::time_point{};  // only the timeline needs it
  if (tl && resp.n > 0) timeline_.cycle(now);
  finished_.clear();
  try {
    for (size_t i = 0; i < resp.n;) {
      const ResponseItem& item = resp.items[i];
      if (item.type == ItemType::ERROR) {
        ++stats_.errors;
        if (OpPtr op = find_pending(item.desc)) {
          pending_.drop(key_of(op->desc));
          fail(op, item.error_kind, "rank " + std::to_string(rank_) + ": " + op->label() + " failed: " + item.message);
        } else {
          callers_.note_foreign_failure(item.desc.name);
        }
        ++i;
        continue;
      }
      if (item.type == ItemType::INLINE) {
        ++stats_.cached;
        ++stats_.inlined;
        OpPtr op = find_pending(*item.agreed);
        if (op) {
          if (tl) timeline_.begin(op->desc.key(), inline_span(op->desc), now);
          finish_inline(item, *op, sets_.size_of(item.agreed->set));
          tap_output(*op);
          if (tl) timeline_.end(op->desc.key(), inline_span(op->desc), Clock::now());
          pending_.drop(key_of(op->desc));
          finished_.push_back(op);
        }
        ++i;
        continue;
      }
      if (tl && sets_.is_member(item.agreed->set)) timeline_.begin(item.agreed->key(), "QUEUE", now);
      size_t j = i + 1;
      while (j < resp.n && resp.items[j].fused) {
        if (tl && sets_.is_member(resp.items[j].agreed->set)) {
          timeline_.begin(resp.items[j].agreed->key(), "QUEUE", now);
        }
        ++j;
      }
      for (size_t k = i; k < j; ++k) ++(resp.items[k].type == ItemType::CACHED ? stats_.cached : stats_.full);
      ++stats_.units;
      if (j - i > 1) stats_.fused += j - i;
      run_unit(resp, i, j);
      i = j;
    }
  } catch (...) {
    for (OpPtr& op : finished_) callers_.complete(op);
    finished_.clear();
    throw;
  }
  update_cache(resp);
  callers_.complete_all(finished_);
  finished_.clear();
  if ((resp.flags & kRespJoinDone) && join_op_) {
    join_op_->result.value = resp.join_value;
    callers_.complete(join_op_);
    join_op_.reset();
  }
  // Still waiting for the other ranks? (Recomputed after execution: a rank whose requests all ran must
  // sleep until the next enqueue, not start an empty round that the next enqueue then just misses.)
  Outcome outcome;
  outcome.waiting = static_cast<bool>(join_op_);
  for (auto it = pending_.begin(); it != pending_.end() && !outcome.waiting; ++it) outcome.waiting = !it->second->held;
  outcome.all_waiting = (resp.flags & kRespAllWaiting) != 0;
  outcome.shutdown = (resp.flags & kRespShutdown) != 0;
  return outcome;
}

void Runner::update_cache(const ResponseList& resp) {
  // After the whole list ran: CACHED items point into the cache until then.
  if (!cache_.enabled()) return;
  for (size_t i = 0; i < resp.n; ++i) {
    const ResponseItem& item = resp.items[i];
    if (item.type == ItemType::CACHED || item.type == ItemType::INLINE) {
      cache_.touch(item.pos);
    } else if (item.type == ItemType::FULL && ResponseCache::cacheable(item.desc)) {
      cache_.put(item.desc, item.dim0s);
    }
  }
}

void Runner::run_unit(const ResponseList& resp, size_t begin, size_t end) {
  unit_.clear();
  unit_ops_.clear();
  for (size_t k = begin; k < end; ++k) {
    const ResponseItem& item = resp.items[k];
    OpPtr op = find_pending(*item.agreed);
    unit_.push_back(UnitEntry{item.agreed, item.agreed_dim0s, op.get()});
    unit_ops_.push_back(op);
  }
  const Desc& first = *unit_.front().agreed;
  if (is_set_change(first.kind)) {
    apply_set_change(resp.items[begin], unit_ops_.front().get());
    if (unit_ops_.front()) {
      pending_.drop(key_of(unit_ops_.front()->desc));
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
      PHV_ENFORCE_FAIL("rank ", rank_, ": the ranks agreed to run ", unit_label(unit_),
                       ", which this rank never submitted");
    }
  }
  if (timeout <= 0) timeout = options_.timeout_s;
  if (refuse_without_gpu(first)) return;
  uint64_t seq = ++ps->ops_run;
  unit_seq_ = seq;
  if (rank_ == 0 && timeline_.active()) {
    Clock::time_point now = Clock::now();
    for (const UnitEntry& e : unit_) timeline_.end(e.agreed->key(), "QUEUE", now);
  }
  try {
    TransferWatchScope watch(&unit_watch_);
    executor_.run(ps->comm, unit_, deadline_after(timeout));
  } catch (const HvdError& e) {
    std::string msg = "rank " + std::to_string(rank_) + ": " + describe_unit(this) + " failed: " + e.what();
    ErrorKind kind = stop_kind(e.kind());
    for (OpPtr& op : unit_ops_) {
      if (!op) continue;
      pending_.drop(key_of(op->desc));
      fail(op, kind, msg);
    }
    throw HvdError(kind, msg);
  }
  for (OpPtr& op : unit_ops_) {
    if (!op) continue;
    tap_output(*op);
    pending_.drop(key_of(op->desc));
    finished_.push_back(op);
  }
}

bool Runner::refuse_without_gpu(const Desc& first) {
  if (first.device < 0 || first.kind == static_cast<uint8_t>(OpType::BARRIER)) return false;
  std::string why = gpu_.missing();
  if (why.empty()) return false;
  // Every rank of a job without a usable GPU backend fails it here alike.
  for (OpPtr& op : unit_ops_) {
    if (!op) continue;
    pending_.drop(key_of(op->desc));
    fail(op, ErrorKind::INVALID_ARGUMENT, "rank " + std::to_string(rank_) + ": " + op->label() + ": " + why);
  }
  return true;
}

std::string Runner::describe_unit(const void* runner) {
  const Runner& r = *static_cast<const Runner*>(runner);
  return unit_label(r.unit_) + " (op #" + std::to_string(r.unit_seq_) + " in process set " +
         std::to_string(r.unit_.front().agreed->set) + ")";
}

void Runner::apply_set_change(const ResponseItem& item, Op* op) {
  const Desc& d = *item.agreed;
  try {
    if (d.kind == kDescAddProcessSet) {
      int id = sets_.add(d.set_ranks);
      if (op) op->result.value = id;
      return;
    }
    int id = d.removed_set;
    sets_.remove(id);
    cache_.erase_set(id);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->first.set == id) {
        fail(it->second, ErrorKind::INVALID_ARGUMENT,
             "rank " + std::to_string(rank_) + ": " + it->second->label() + " failed: its process set was removed");
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

}  // namespace phv
