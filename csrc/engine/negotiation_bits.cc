// The coordinator's cached requests: those the ranks name by response-cache bit. Readiness is a
// stateless AND of the members' bits (a joined member counts as ready for an allreduce); a key some rank
// reported by descriptor goes to the table instead; the partial state of a request only some members
// named serves the stall inspector and the timeline's per-rank marks; a ready small allreduce is reduced
// right here from the bytes riding with the bits (inline_reduce.h).
#include <algorithm>

#include "engine/inline_reduce.h"
#include "engine/negotiation.h"

namespace phv {

bool Coordinator::expiring(const Key& key) const {
  for (const Expiry* x : expiries_) {
    if (x->key == key) return true;
  }
  return false;
}

void Coordinator::take_bits(const std::vector<RankMessage>& msgs, Clock::time_point now, ResponseList& out) {
  size_t words = 0;
  for (const RankMessage& m : msgs) words = std::max(words, m.bits.size());
  or_bits_.assign(words, 0);
  for (const RankMessage& m : msgs) {
    for (size_t w = 0; w < m.bits.size(); ++w) or_bits_[w] |= m.bits[w];
  }
  for (size_t w = 0; w < words; ++w) {
    for (uint64_t word = or_bits_[w]; word != 0; word &= word - 1) {
      int pos = static_cast<int>(w * 64 + static_cast<size_t>(__builtin_ctzll(word)));
      if (!cache_.valid(pos)) continue;
      const CacheEntry& ce = cache_.entry(pos);
      if (!expiries_.empty() && expiring(ce.desc.key())) continue;
      ProcessSet* ps = sets_.get(ce.desc.set);
      if (ps == nullptr) continue;
      const std::vector<int>& members = ps->comm.members;
      if (fold_into_table(pos, ce, members, msgs)) continue;
      bool joined_missing = false;
      if (!bits_ready(pos, members, msgs, joined_missing)) {
        track_partial(pos, ce, members, msgs, now);
        continue;
      }
      close_partial(pos, ce, members, msgs, now);
      answer_cached(pos, ce.desc, members, msgs, joined_missing, out);
    }
  }
  // Positions nobody reports any more (resolved through the table, expired, evicted) stop being partial.
  for (auto it = partial_.begin(); it != partial_.end();) {
    size_t w = static_cast<size_t>(it->first) / 64;
    bool set = w < or_bits_.size() && ((or_bits_[w] >> (it->first % 64)) & 1u);
    it = set ? std::next(it) : partial_.erase(it);
  }
}

bool Coordinator::fold_into_table(int pos, const CacheEntry& ce, const std::vector<int>& members,
                                  const std::vector<RankMessage>& msgs) {
  if (table_.empty()) return false;
  auto it = table_.find(ce.desc.key());
  if (it == table_.end()) return false;
  // Some rank reported this key by descriptor: the bit holders count as having sent the cached one, and
  // the table compares them all (a changed shape is then a mismatch, not a silent hit).
  for (size_t i = 0; i < members.size(); ++i) {
    int m = members[i];
    if (!msgs[static_cast<size_t>(m)].bit(pos)) continue;
    Desc& mine = it->second.descs[static_cast<size_t>(m)];
    mine = ce.desc;
    if (dim0_may_differ(ce.desc.kind)) mine.shape[0] = ce.dim0s[i];
    it->second.have[static_cast<size_t>(m)] = 1;
  }
  return true;
}

bool Coordinator::bits_ready(int pos, const std::vector<int>& members, const std::vector<RankMessage>& msgs,
                             bool& joined_missing) const {
  for (int m : members) {
    if (msgs[static_cast<size_t>(m)].bit(pos)) continue;
    if (!joined_[static_cast<size_t>(m)]) return false;
    joined_missing = true;
  }
  return true;
}

void Coordinator::track_partial(int pos, const CacheEntry& ce, const std::vector<int>& members,
                                const std::vector<RankMessage>& msgs, Clock::time_point now) {
  bool tl = timeline_.active();
  auto found = partial_.find(pos);
  bool fresh = found == partial_.end() || found->second.generation != ce.generation;
  Partial& part = partial_[pos];
  if (fresh) {
    part.generation = ce.generation;
    part.first_seen = now;
    part.marked.assign(static_cast<size_t>(world_), 0);
    if (tl) timeline_.begin(ce.desc.key(), span_name("NEGOTIATE_", ce.desc.kind), now);
  }
  for (int m : members) {
    if (msgs[static_cast<size_t>(m)].bit(pos) && !part.marked[static_cast<size_t>(m)]) {
      part.marked[static_cast<size_t>(m)] = 1;
      if (tl) timeline_.mark(ce.desc.key(), "rank " + std::to_string(m) + " ready", now);
    }
  }
}

void Coordinator::close_partial(int pos, const CacheEntry& ce, const std::vector<int>& members,
                                const std::vector<RankMessage>& msgs, Clock::time_point now) {
  auto p = partial_.find(pos);
  bool fresh = p == partial_.end() || p->second.generation != ce.generation;
  if (timeline_.active()) {
    // The whole negotiation span: the marks of the ranks not marked while the request was partial.
    Key key = ce.desc.key();
    std::string span = span_name("NEGOTIATE_", ce.desc.kind);
    if (fresh) timeline_.begin(key, span, now);
    for (int m : members) {
      bool marked = !fresh && p->second.marked[static_cast<size_t>(m)];
      if (msgs[static_cast<size_t>(m)].bit(pos) && !marked) {
        timeline_.mark(key, "rank " + std::to_string(m) + " ready", now);
      }
    }
    timeline_.end(key, span, now);
  }
  if (p != partial_.end()) partial_.erase(p);
}

void Coordinator::answer_cached(int pos, const Desc& d, const std::vector<int>& members,
                                const std::vector<RankMessage>& msgs, bool joined_missing, ResponseList& out) {
  ErrorKind kind = ErrorKind::INTERNAL;
  std::string why = joined_missing ? refusal(d, d.key(), joined_members(members), kind) : std::string();
  if (!why.empty()) {
    add_error(out, d.key(), d.kind, kind, why);
    return;
  }
  ResponseItem& item = out.add();
  item.type = ItemType::CACHED;
  item.pos = pos;
  if (inline_eligible(cache_.entry(pos)) && reduce_inline(msgs, pos, d, members, joined_, item.data)) {
    item.type = ItemType::INLINE;
  }
}

std::vector<int> Coordinator::joined_members(const std::vector<int>& members) const {
  std::vector<int> out;
  for (int m : members) {
    if (joined_[static_cast<size_t>(m)]) out.push_back(m);
  }
  return out;
}

}  // namespace phv
