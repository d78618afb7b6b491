#include "engine/negotiation.h"

#include <algorithm>
#include <sstream>

#include "common/logging.h"

namespace phv {

namespace {

std::string ranks_str(const std::vector<int>& ranks) {
  std::vector<int64_t> wide(ranks.begin(), ranks.end());
  return shape_str(wide);
}

std::string label(DescKind kind, const Key& key) {
  std::string s = std::string(kind_name(kind)) + " '" + key.name + "'";
  if (key.set != 0) s += " in process set " + std::to_string(key.set);
  return s;
}

const uint8_t kAllreduce = static_cast<uint8_t>(OpType::ALLREDUCE);

}  // namespace

Coordinator::Coordinator(int world, ProcessSetRegistry& sets, ResponseCache& cache, Timeline& timeline,
                         const EngineOptions& options, bool gpu_built)
    : world_(world),
      sets_(sets),
      cache_(cache),
      timeline_(timeline),
      fusion_threshold_(options.fusion_threshold_bytes),
      fusion_max_tensor_(options.fusion_max_tensor_bytes),
      gpu_built_(gpu_built),
      stall_(options.stall_check_s, options.stall_shutdown_s, options.stall_check_disable),
      joined_(static_cast<size_t>(world), 0),
      join_order_(static_cast<size_t>(world), 0),
      votes_wide_(static_cast<size_t>(world), 0),
      votes_single_allreduce_(static_cast<size_t>(world), 0) {}

void Coordinator::decide(const std::vector<RankMessage>& msgs, ResponseList& out) {
  Clock::time_point now = Clock::now();
  out.clear();
  bool any_new = false;
  bool all_waiting = true;
  int shutdown_rank = -1;
  for (int r = 0; r < world_; ++r) {
    const RankMessage& m = msgs[static_cast<size_t>(r)];
    joined_[static_cast<size_t>(r)] = (m.flags & kRankJoined) != 0;
    if (joined_[static_cast<size_t>(r)] && join_order_[static_cast<size_t>(r)] == 0) {
      join_order_[static_cast<size_t>(r)] = ++join_counter_;
    }
    if (!(m.flags & kRankWaiting)) all_waiting = false;
    if ((m.flags & kRankShutdown) && shutdown_rank < 0) shutdown_rank = r;
    if (m.flags & (kRankVoteWide | kRankVoteNarrow))
      votes_wide_[static_cast<size_t>(r)] = (m.flags & kRankVoteWide) != 0;
    if (m.flags & (kRankVoteSingleAllreduce | kRankVoteRingAllreduce))
      votes_single_allreduce_[static_cast<size_t>(r)] = (m.flags & kRankVoteSingleAllreduce) != 0;
    if (m.n_news > 0 || m.n_expiries > 0) any_new = true;
  }

  take_new(msgs, now);
  expiries_.clear();
  expiry_rank_.clear();
  for (int r = 0; r < world_; ++r) {
    const RankMessage& m = msgs[static_cast<size_t>(r)];
    for (size_t i = 0; i < m.n_expiries; ++i) {
      expiries_.push_back(&m.expiries[i]);
      expiry_rank_.push_back(r);
    }
  }
  take_bits(msgs, now, out);
  take_expiries(msgs, now, out);
  take_table(now, out);
  planner_.plan(out, cache_, fusion_threshold_, fusion_max_tensor_);
  resolve_items(out, cache_);
  check_stalls(msgs, now, out);

  bool all_joined = world_ > 0;
  for (int r = 0; r < world_; ++r) all_joined = all_joined && joined_[static_cast<size_t>(r)];
  if (all_joined) {
    // The last to join is the one that joined in the latest round (ties: the highest rank).
    int last = 0;
    for (int r = 1; r < world_; ++r) {
      if (join_order_[static_cast<size_t>(r)] >= join_order_[static_cast<size_t>(last)]) last = r;
    }
    out.flags |= kRespJoinDone;
    out.join_value = last;
    std::fill(join_order_.begin(), join_order_.end(), 0);
    join_counter_ = 0;
  }
  if (shutdown_rank >= 0 && !(out.flags & kRespShutdown)) {
    out.flags |= kRespShutdown;
    out.shutdown_rank = shutdown_rank;
    out.shutdown_reason = "rank " + std::to_string(shutdown_rank) + " shut down";
  }
  if (out.n == 0 && all_waiting && !any_new && !(out.flags & (kRespJoinDone | kRespShutdown))) {
    out.flags |= kRespAllWaiting;
  }
  const auto wide = std::count(votes_wide_.begin(), votes_wide_.end(), uint8_t{1});
  if (2 * wide > world_) out.flags |= kRespWideCopies;
  const auto single = std::count(votes_single_allreduce_.begin(), votes_single_allreduce_.end(), uint8_t{1});
  if (2 * single > world_) out.flags |= kRespSingleCopyAllreduce;
}

void Coordinator::take_new(const std::vector<RankMessage>& msgs, Clock::time_point now) {
  for (int r = 0; r < world_; ++r) {
    const RankMessage& m = msgs[static_cast<size_t>(r)];
    for (size_t i = 0; i < m.n_news; ++i) {
      const Desc& d = m.news[i];
      Key key = d.key();
      TableEntry& e = table_[key];
      if (e.have.empty()) {
        e.descs.resize(static_cast<size_t>(world_));
        e.have.assign(static_cast<size_t>(world_), 0);
        e.first_seen = now;
        e.order = next_order_++;
        timeline_.begin(key, span_name("NEGOTIATE_", d.kind), now);
      }
      e.descs[static_cast<size_t>(r)] = d;
      e.have[static_cast<size_t>(r)] = 1;
      timeline_.mark(key, "rank " + std::to_string(r) + " ready", now);
    }
  }
}

void Coordinator::take_expiries(const std::vector<RankMessage>& msgs, Clock::time_point now, ResponseList& out) {
  for (size_t i = 0; i < expiries_.size(); ++i) {
    const Expiry& x = *expiries_[i];
    bool dup = false;
    for (size_t j = 0; j < i; ++j) dup = dup || expiries_[j]->key == x.key;
    if (dup) continue;
    ProcessSet* ps = sets_.get(x.key.set);
    int pos = cache_.lookup(x.key);
    auto it = table_.find(x.key);
    std::vector<int> missing;
    if (ps != nullptr) {
      for (int m : ps->comm.members) {
        bool submitted = joined_[static_cast<size_t>(m)] ||
                         (it != table_.end() && it->second.have[static_cast<size_t>(m)]) ||
                         (pos >= 0 && msgs[static_cast<size_t>(m)].bit(pos));
        for (size_t j = 0; j < expiries_.size() && !submitted; ++j) {
          submitted = expiry_rank_[j] == m && expiries_[j]->key == x.key;
        }
        if (!submitted) missing.push_back(m);
      }
    }
    std::ostringstream msg;
    msg << label(x.kind, x.key) << " timed out after " << x.waited_s << " s (request #" << x.request_seq << " on rank "
        << expiry_rank_[i] << "): ";
    if (missing.empty()) {
      msg << "every rank had submitted it, but it did not run before the deadline";
    } else {
      msg << "ranks " << ranks_str(missing) << " never submitted it" << explain_missing(x.key, missing, msgs);
    }
    add_error(out, x.key, x.kind, ErrorKind::TIMEOUT, msg.str());
    if (it != table_.end()) table_.erase(it);
    if (pos >= 0) partial_.erase(pos);
  }
}

void Coordinator::take_table(Clock::time_point now, ResponseList& out) {
  if (table_.empty()) return;
  ready_.clear();
  for (auto it = table_.begin(); it != table_.end();) {
    ProcessSet* ps = sets_.get(it->first.set);
    if (ps == nullptr) {
      DescKind kind = kDescAllreduce;
      for (int r = 0; r < world_; ++r) {
        if (it->second.have[static_cast<size_t>(r)]) kind = it->second.descs[static_cast<size_t>(r)].kind;
      }
      add_error(out, it->first, kind, ErrorKind::INVALID_ARGUMENT,
                "process set " + std::to_string(it->first.set) + " was removed before the request could run");
      it = table_.erase(it);
      continue;
    }
    bool all = true;
    for (int m : ps->comm.members) {
      if (!it->second.have[static_cast<size_t>(m)] && !joined_[static_cast<size_t>(m)]) {
        all = false;
        break;
      }
    }
    if (all) ready_.emplace_back(it->second.order, it->first);
    ++it;
  }
  if (ready_.empty()) return;
  std::sort(ready_.begin(), ready_.end(),
            [](const std::pair<uint64_t, Key>& a, const std::pair<uint64_t, Key>& b) { return a.first < b.first; });
  // A grouped request waits until every member of its group is ready (groups run as one unit).
  std::unordered_map<std::string, int> group_ready;
  for (auto& rk : ready_) {
    const TableEntry& e = table_[rk.second];
    for (int r = 0; r < world_; ++r) {
      if (!e.have[static_cast<size_t>(r)]) continue;
      const Desc& d = e.descs[static_cast<size_t>(r)];
      if (d.group_size > 0) group_ready[std::to_string(d.set) + "/" + d.group_key]++;
      break;
    }
  }
  for (auto& rk : ready_) {
    auto it = table_.find(rk.second);
    const TableEntry& e = it->second;
    const Desc* ref = nullptr;
    for (int r = 0; r < world_ && ref == nullptr; ++r) {
      if (e.have[static_cast<size_t>(r)]) ref = &e.descs[static_cast<size_t>(r)];
    }
    if (ref->group_size > 0 && group_ready[std::to_string(ref->set) + "/" + ref->group_key] < ref->group_size) {
      continue;
    }
    verdict(it->first, it->second, sets_.get(it->first.set)->comm.members, out);
    if (out.items[out.n - 1].type == ItemType::FULL) {
      timeline_.end(it->first, span_name("NEGOTIATE_", ref->kind), now);
    }
    table_.erase(it);
  }
}

void Coordinator::verdict(const Key& key, TableEntry& e, const std::vector<int>& members, ResponseList& out) {
  int ref = -1;
  for (int m : members) {
    if (e.have[static_cast<size_t>(m)]) {
      ref = m;
      break;
    }
  }
  if (ref < 0) {  // only ranks outside the set reported it: enqueue() rejects that, so never expected
    add_error(out, key, kDescAllreduce, ErrorKind::INTERNAL,
              "'" + key.name + "' was submitted only by non-members of its set");
    return;
  }
  const Desc& a = e.descs[static_cast<size_t>(ref)];
  std::string msg;
  for (int m : members) {
    if (m == ref || !e.have[static_cast<size_t>(m)]) continue;
    msg = compare_descs(a, ref, e.descs[static_cast<size_t>(m)], m);
    if (!msg.empty()) break;
  }
  ErrorKind kind = ErrorKind::INTERNAL;
  if (msg.empty()) {
    std::vector<int> absent;  // ready, so these members have joined
    for (int m : members) {
      if (!e.have[static_cast<size_t>(m)]) absent.push_back(m);
    }
    msg = refusal(a, key, absent, kind);
  }
  if (!msg.empty()) {
    add_error(out, key, a.kind, kind, msg);
    return;
  }
  ResponseItem& item = out.add();
  item.type = ItemType::FULL;
  item.desc = a;
  if (dim0_may_differ(a.kind)) {
    for (int m : members) item.dim0s.push_back(e.descs[static_cast<size_t>(m)].shape[0]);
  }
  for (int m : members) {
    if (e.have[static_cast<size_t>(m)] && e.descs[static_cast<size_t>(m)].uneven_splits) item.desc.uneven_splits = true;
  }
}

std::string Coordinator::refusal(const Desc& d, const Key& key, const std::vector<int>& joined, ErrorKind& kind) const {
  if (!joined.empty() && d.kind != kAllreduce) {
    kind = ErrorKind::INTERNAL;
    return label(d.kind, key) + " cannot run while ranks " + ranks_str(joined) +
           " have joined: only allreduce supports join";
  }
  if (d.device < 0) return std::string();
  // Refused per request (the engine keeps working). enqueue() already refuses CUDA tensors in builds
  // without NCCL (the stub's error); this is the same answer should one get here anyway. Joined ranks
  // would have to contribute a reduction identity in device memory, which the GPU path does not do.
  kind = ErrorKind::INVALID_ARGUMENT;
  if (!gpu_built_) return "pyhorovod was built without the GPU backend (NCCL), so CUDA tensors are not supported";
  if (!joined.empty()) return label(d.kind, key) + ": CUDA tensors cannot be reduced while ranks have joined";
  return std::string();
}

void Coordinator::add_error(ResponseList& out, const Key& key, DescKind kind, ErrorKind err, const std::string& msg) {
  ResponseItem& item = out.add();
  item.type = ItemType::ERROR;
  item.desc.kind = kind;
  item.desc.set = key.set;
  item.desc.name = key.name;
  item.error_kind = err;
  item.message = msg;
  timeline_.end(key, span_name("NEGOTIATE_", kind), Clock::now(), msg);
}

void Coordinator::check_stalls(const std::vector<RankMessage>& msgs, Clock::time_point now, ResponseList& out) {
  if (!stall_.due(now)) return;
  std::vector<int> missing;
  for (const auto& kv : table_) {
    ProcessSet* ps = sets_.get(kv.first.set);
    if (ps == nullptr) continue;
    missing.clear();
    DescKind kind = kDescAllreduce;
    for (int m : ps->comm.members) {
      if (kv.second.have[static_cast<size_t>(m)]) {
        kind = kv.second.descs[static_cast<size_t>(m)].kind;
      } else if (!joined_[static_cast<size_t>(m)]) {
        missing.push_back(m);
      }
    }
    stall_.consider(kv.first, kind, std::chrono::duration<double>(now - kv.second.first_seen).count(), missing);
  }
  for (const auto& kv : partial_) {
    if (!cache_.valid(kv.first)) continue;
    const CacheEntry& ce = cache_.entry(kv.first);
    ProcessSet* ps = sets_.get(ce.desc.set);
    if (ps == nullptr || ce.generation != kv.second.generation) continue;
    missing.clear();
    for (int m : ps->comm.members) {
      if (!msgs[static_cast<size_t>(m)].bit(kv.first) && !joined_[static_cast<size_t>(m)]) missing.push_back(m);
    }
    stall_.consider(ce.desc.key(), ce.desc.kind, std::chrono::duration<double>(now - kv.second.first_seen).count(),
                    missing);
  }
  std::string reason = stall_.conclude(now);
  if (!reason.empty()) {
    out.flags |= kRespShutdown;
    out.shutdown_rank = 0;
    out.shutdown_reason = reason;
  }
}

}  // namespace phv
