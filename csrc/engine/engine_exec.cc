// EngineCore, executing an agreed ResponseList on this rank: errors, inline results, units (through the
// Executor), process-set changes, cache updates, and completing or failing requests.
#include <algorithm>
#include <sstream>

#include "common/logging.h"
#include "common/sum_of_squares.h"
#include "engine/auto_name.h"
#include "engine/engine_core.h"
#include "engine/inline_reduce.h"

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

// The reduced side of a request's squared-norm tap (Request::sumsq_out): |output|^2, added right after
// the result was written, while it is still in cache.
void add_output_norm(const Op& op) {
  if (op.req.sumsq_out == nullptr) return;
  *op.req.sumsq_out += sum_of_squares(op.req.output, static_cast<size_t>(op.desc.count()), op.req.dtype);
}

}  // namespace

EngineCore::OpPtr EngineCore::find_pending(const Desc& d) {
  tmp_key_.set = d.set;
  tmp_key_.name.assign(d.name);  // reuses the key's capacity: no allocation per round
  auto it = pending_.find(tmp_key_);
  return it == pending_.end() ? nullptr : it->second;
}

void EngineCore::note_foreign_failure(const std::string& name) {
  std::string prefix;
  int64_t n = 0;
  if (!split_auto_name(name, prefix, n)) return;
  std::lock_guard<std::mutex> lock(mu_);
  int64_t& floor = auto_name_floor_[prefix];
  floor = std::max(floor, n);
}

int64_t EngineCore::auto_name_floor(const std::string& prefix) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = auto_name_floor_.find(prefix);
  return it == auto_name_floor_.end() ? 0 : it->second;
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
        } else {
          note_foreign_failure(item.desc.name);
        }
        ++i;
        continue;
      }
      if (item.type == ItemType::INLINE) {
        ++stats_.cached;
        ++stats_.inlined;
        OpPtr op = find_pending(*item.agreed);
        if (op) {
          if (tl) timeline_.begin(op->desc.key(), "ALLREDUCE", now);
          finish_inline(item, *op, sets_.size_of(item.agreed->set));
          add_output_norm(*op);
          if (tl) timeline_.end(op->desc.key(), "ALLREDUCE", Clock::now());
          pending_.erase(op->desc.key());
          finished_.push_back(op);
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
      if (item.type == ItemType::CACHED || item.type == ItemType::INLINE) {
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
  // Still waiting for the other ranks? (Recomputed after execution: a rank whose requests all ran must
  // sleep until the next enqueue, not start an empty round that the next enqueue then just misses.)
  bool waiting = static_cast<bool>(join_op_);
  for (auto it = pending_.begin(); it != pending_.end() && !waiting; ++it) waiting = !it->second->held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all_waiting_ = (resp_.flags & kRespAllWaiting) != 0;
    waiting_ = waiting;
  }
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
  if (is_set_change(first.kind)) {
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
  if (first.device >= 0 && first.kind != static_cast<uint8_t>(OpType::BARRIER)) {
    std::string why;
    {
      std::lock_guard<std::mutex> lock(gpu_mu_);
      if (!gpu_) why = gpu_error_.empty() ? "no GPU backend" : gpu_error_;
    }
    if (!why.empty()) {  // every rank of a job without a usable GPU backend fails it here alike
      for (OpPtr& op : unit_ops_) {
        if (!op) continue;
        pending_.erase(op->desc.key());
        fail(op, ErrorKind::INVALID_ARGUMENT, "rank " + std::to_string(rank_) + ": " + op->label() + ": " + why);
      }
      return;
    }
  }
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
      pending_.erase(op->desc.key());
      fail(op, kind, msg);
    }
    throw HvdError(kind, msg);
  }
  for (OpPtr& op : unit_ops_) {
    if (!op) continue;
    add_output_norm(*op);
    pending_.erase(op->desc.key());
    finished_.push_back(op);
  }
}

std::string EngineCore::describe_unit(const void* core) {
  const EngineCore& e = *static_cast<const EngineCore*>(core);
  return unit_label(e.unit_) + " (op #" + std::to_string(e.unit_seq_) + " in process set " +
         std::to_string(e.unit_.front().agreed->set) + ")";
}

void EngineCore::apply_set_change(const ResponseItem& item, Op* op) {
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
  work_cv_.notify_all();  // the background thread exits once it sees stopped_
}

}  // namespace phv
