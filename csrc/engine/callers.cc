#include "engine/callers.h"

#include <algorithm>

#include "engine/auto_name.h"

namespace phv {

namespace {

bool is_join(const Op& op) { return op.desc.kind == static_cast<uint8_t>(OpType::JOIN); }

}  // namespace

std::string Callers::auto_name(OpType type) {
  size_t index = static_cast<size_t>(type);
  PHV_CHECK_ARG(index < next_auto_name_.size(), "unknown op type ", index);
  std::lock_guard<std::mutex> lock(mu_);
  return std::string(op_type_name(type)) + ".noname." + std::to_string(++next_auto_name_[index]);
}

std::string Callers::set_change_name(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  return what + "." + std::to_string(++next_set_change_);
}

void Callers::admit(const OpPtr& op, bool listed) {
  if (is_join(*op)) {
    PHV_CHECK_ARG(!join_in_flight_, "join: this rank already has a join() in flight");
    join_in_flight_ = true;
  } else {
    // One look-up that checks and inserts (the handle is the one assigned just below).
    const bool fresh = in_flight_.put(key_of(*op), next_handle_);
    PHV_CHECK_ARG(fresh, kind_name(op->desc.kind), ": a request named '", op->desc.name, "'",
                  op->desc.set != 0 ? " in process set " + std::to_string(op->desc.set) : std::string(),
                  " is already in flight on rank ", rank_, "; names must be unique among pending requests");
  }
  op->handle = next_handle_++;
  op->seq = next_seq_++;
  if (listed) handles_.emplace(op->handle, op);
}

bool Callers::queue(const OpPtr& op) {
  bool first = incoming_.empty();
  incoming_.push_back(op);
  if (first) incoming_since_ = op->enqueued;
  return first;
}

void Callers::drain_queue(std::vector<OpPtr>& into) {
  for (OpPtr& op : incoming_) into.push_back(op);
  incoming_.clear();
}

OpPtr Callers::find(Handle handle) const {
  auto it = handles_.find(handle);
  return it == handles_.end() ? nullptr : it->second;
}

bool Callers::poll(Handle handle) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = handles_.find(handle);
  PHV_CHECK_ARG(it != handles_.end(), "unknown handle ", handle, " (already waited for?)");
  return it->second->done;
}

const Key& Callers::key_of(const Op& op) {
  scratch_key_.set = op.desc.set;
  scratch_key_.name.assign(op.desc.name);  // reuses the scratch key's capacity: no allocation
  return scratch_key_;
}

void Callers::release_name(const Op& op) {
  if (is_join(op)) {
    join_in_flight_ = false;
  } else {
    in_flight_.drop(key_of(op));
  }
}

void Callers::complete(const OpPtr& op) {
  std::lock_guard<std::mutex> lock(mu_);
  op->done = true;
  release_name(*op);
  done_cv_.notify_all();
}

void Callers::complete_all(const std::vector<OpPtr>& ops) {
  if (ops.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const OpPtr& op : ops) {
    op->done = true;
    release_name(*op);
  }
  done_cv_.notify_all();
}

void Callers::note_foreign_failure(const std::string& name) {
  std::string prefix;
  int64_t n = 0;
  if (!split_auto_name(name, prefix, n)) return;
  std::lock_guard<std::mutex> lock(mu_);
  int64_t& floor = auto_name_floor_[prefix];
  floor = std::max(floor, n);
}

int64_t Callers::auto_name_floor(const std::string& prefix) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = auto_name_floor_.find(prefix);
  return it == auto_name_floor_.end() ? 0 : it->second;
}

}  // namespace phv
