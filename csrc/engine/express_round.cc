#include "engine/express_round.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"
#include "common/reduce.h"

namespace phv {

ExpressRound::ExpressRound(Transport& transport, const ResponseCache& cache)
    : transport_(transport),
      cache_(cache),
      schedule_(transport.rank(), transport.size()),
      mine_(kPacketBytes),
      theirs_(kPacketBytes) {
  static_assert(sizeof(Header) == kHeaderBytes, "the packet header is four 32-bit words");
}

namespace {

// The position of the only bit set in msg (ready() checked there is exactly one).
int only_bit(const RankMessage& msg) {
  for (size_t w = 0; w < msg.bits.size(); ++w) {
    if (msg.bits[w]) return static_cast<int>(w * 64 + static_cast<size_t>(__builtin_ctzll(msg.bits[w])));
  }
  return -1;
}

// Payload bytes past a head of `head` bytes that a packet with this header carries in its tail.
size_t tail_bytes(uint32_t ready, uint32_t len, size_t head) {
  const size_t in_head = head - ExpressRound::kHeaderBytes;
  return ready && len > in_head ? len - in_head : 0;
}

}  // namespace

void ExpressRound::set_head_payload(size_t bytes) {
  head_bytes_ = kHeaderBytes + std::min(kInlineBytes, std::max(kHeadBytes - kHeaderBytes, bytes));
}

bool ExpressRound::ready(const RankMessage& msg) {
  if ((msg.flags & ~kRankWaiting) != 0 || msg.n_news != 0 || msg.n_expiries != 0 || msg.n_inlines > 1) return false;
  int set_bits = 0;
  for (uint64_t w : msg.bits) set_bits += __builtin_popcountll(w);
  if (set_bits != 1) return false;
  if (msg.n_inlines == 0) return true;  // the negotiation alone
  const InlineData& rec = msg.inlines[0];
  return rec.pos >= 0 && !rec.data.empty() && rec.data.size() <= kInlineBytes && msg.bit(rec.pos);
}

bool ExpressRound::decides(const CacheEntry& e) {
  return e.valid && e.desc.set == 0 && e.desc.device < 0 && e.desc.group_size == 0;
}

bool ExpressRound::run(const RankMessage& msg, Deadline deadline) {
  begin(msg);
  try {
    while (!step(Step::BLOCK, deadline)) {
    }
  } catch (const HvdError& e) {
    const RdStep& st = schedule_.steps[at_];
    throw HvdError(e.kind(), "express round (recursive doubling step " + std::to_string(at_ + 1) + " of " +
                                 std::to_string(schedule_.n) + ", with rank " + std::to_string(st.peer) +
                                 "): " + e.what());
  }
  return hit_;
}

void ExpressRound::begin(const RankMessage& msg) {
  Header& h = header(mine_);
  h = Header{0, -1, 0, 0};
  std::memset(mine_.data() + kHeaderBytes, 0, head_bytes_ - kHeaderBytes);  // no stale bytes on the wire
  const int pos = msg.n_inlines == 0 ? only_bit(msg) : msg.inlines[0].pos;
  const bool go = ready(msg) && cache_.valid(pos) && decides(cache_.entry(pos));
  if (go && msg.n_inlines == 0) {
    h = Header{1, pos, 0, 0};  // no bytes: a hit is one CACHED item
  } else if (go) {
    const InlineData& rec = msg.inlines[0];
    h.ready = 1;
    h.pos = rec.pos;
    h.len = static_cast<uint32_t>(rec.data.size());
    const CacheEntry& e = cache_.entry(rec.pos);
    size_t at = 0;  // where my bytes go in the packet
    if (e.desc.kind == kDescBroadcast) {
      h.holds = e.desc.root == transport_.rank();  // inline only in the global set: set rank = rank
    } else if (concatenates_inputs(e.desc.kind)) {
      // Inline only in the global set, of at most 32 ranks (inline_reduce.h): block r is rank r's.
      const size_t row_bytes = static_cast<size_t>(e.desc.row_elements()) * dtype_size(e.desc.dtype);
      size_t total = 0;
      for (size_t r = 0; r < e.dim0s.size(); ++r) {
        if (static_cast<int>(r) == transport_.rank()) at = total;
        total += static_cast<size_t>(e.dim0s[r]) * row_bytes;
      }
      h.len = static_cast<uint32_t>(total);
      h.holds = 1u << transport_.rank();
    }
    if (at + rec.data.size() <= kInlineBytes && h.len <= kInlineBytes) {
      if (h.len > head_bytes_ - kHeaderBytes)  // zero the tail too: a concatenation sends blocks it lacks yet
        std::memset(mine_.data() + head_bytes_, 0, h.len - (head_bytes_ - kHeaderBytes));
      std::memcpy(mine_.data() + kHeaderBytes + at, rec.data.data(), rec.data.size());
    } else {
      h = Header{0, -1, 0, 0};  // cannot happen (inline_eligible); every rank would then just miss
    }
  }
  at_ = 0;
  hit_ = false;
  done_ = false;
  resp_.clear();
  if (schedule_.n == 0) {
    finish();
  } else {
    post_step();
  }
}

bool ExpressRound::step(Step how, Deadline deadline) {
  while (!done_) {
    while (transport_.pending() > 0) {
      if (how == Step::POLL) return false;
      completed_.clear();
      transport_.progress(completed_, deadline);
    }
    if (post_tails()) continue;
    combine_step();
    if (++at_ < schedule_.n) {
      post_step();
    } else {
      finish();
    }
  }
  return true;
}

void ExpressRound::post_step() {
  const RdStep& st = schedule_.steps[at_];
  tails_posted_ = false;
  switch (st.kind) {
    case RdStep::SEND: transport_.post_send(st.peer, mine_.data(), head_bytes_); break;
    case RdStep::RECV_RESULT: transport_.post_recv(st.peer, mine_.data(), head_bytes_); break;
    case RdStep::RECV_COMBINE: transport_.post_recv(st.peer, theirs_.data(), head_bytes_); break;
    case RdStep::EXCHANGE:
      transport_.post_recv(st.peer, theirs_.data(), head_bytes_);
      transport_.post_send(st.peer, mine_.data(), head_bytes_);
      break;
  }
}

bool ExpressRound::post_tails() {
  const RdStep& st = schedule_.steps[at_];
  if (tails_posted_) return false;
  tails_posted_ = true;
  bool any = false;
  if (st.kind == RdStep::SEND || st.kind == RdStep::EXCHANGE) {
    const Header& h = header(mine_);
    if (const size_t tail = tail_bytes(h.ready, h.len, head_bytes_)) {
      transport_.post_send(st.peer, mine_.data() + head_bytes_, tail);
      any = true;
    }
  }
  if (st.kind != RdStep::SEND) {
    std::vector<uint8_t>& into = st.kind == RdStep::RECV_RESULT ? mine_ : theirs_;
    const Header& h = header(into);
    if (h.ready && h.len > kInlineBytes)
      throw_peer_error(ErrorKind::INTERNAL, st.peer, "rank ", st.peer, " announced ", h.len,
                       " inline bytes, more than an express packet holds (", kInlineBytes, ")");
    if (const size_t tail = tail_bytes(h.ready, h.len, head_bytes_)) {
      transport_.post_recv(st.peer, into.data() + head_bytes_, tail);
      any = true;
    }
  }
  return any;
}

void ExpressRound::combine_step() {
  const RdStep& st = schedule_.steps[at_];
  if (st.kind != RdStep::RECV_COMBINE && st.kind != RdStep::EXCHANGE) return;
  Header& me = header(mine_);
  const Header& peer = header(theirs_);
  if (!me.ready) return;
  // A different request (or none) on the peer's side: the round is a miss everywhere, bytes untouched.
  if (!peer.ready || peer.pos != me.pos || peer.len != me.len) {
    me.ready = 0;
    return;
  }
  if (me.len == 0) return;  // the negotiation alone: nothing to combine
  const CacheEntry& e = cache_.entry(me.pos);
  const Desc& d = e.desc;
  if (d.kind == kDescBroadcast) {
    if (peer.holds && !me.holds) {
      std::memcpy(mine_.data() + kHeaderBytes, theirs_.data() + kHeaderBytes, me.len);
      me.holds = 1;
    }
    return;
  }
  if (concatenates_inputs(d.kind)) {  // copy the blocks the peer holds and I do not
    const size_t row_bytes = static_cast<size_t>(d.row_elements()) * dtype_size(d.dtype);
    size_t at = 0;
    for (size_t r = 0; r < e.dim0s.size(); ++r) {
      const size_t len = static_cast<size_t>(e.dim0s[r]) * row_bytes;
      const uint32_t bit = 1u << r;
      if ((peer.holds & bit) && !(me.holds & bit)) {
        std::memcpy(mine_.data() + kHeaderBytes + at, theirs_.data() + kHeaderBytes + at, len);
      }
      at += len;
    }
    me.holds |= peer.holds;
    return;
  }
  const ReduceOp op = d.op == ReduceOp::AVERAGE ? ReduceOp::SUM : d.op;  // the postscale divides (finish_inline)
  const size_t count = me.len / dtype_size(d.dtype);
  uint8_t* mine = mine_.data() + kHeaderBytes;
  const uint8_t* theirs = theirs_.data() + kHeaderBytes;
  if (st.peer_first) {
    reduce_to(mine, theirs, mine, count, d.dtype, op);
  } else {
    reduce_to(mine, mine, theirs, count, d.dtype, op);
  }
}

void ExpressRound::finish() {
  done_ = true;
  const Header& h = header(mine_);
  hit_ = h.ready != 0;
  if (hit_ && h.len > 0 && concatenates_inputs(cache_.entry(h.pos).desc.kind)) {
    // Every rank's block arrived (always so after the whole schedule; the same packet on every rank).
    const size_t n = cache_.entry(h.pos).dim0s.size();
    hit_ = h.holds == (n >= 32 ? 0xffffffffu : (1u << n) - 1);
  }
  if (!hit_) return;
  ResponseItem& item = resp_.add();
  item.type = h.len > 0 ? ItemType::INLINE : ItemType::CACHED;
  item.fused = false;
  item.pos = h.pos;
  item.data.assign(mine_.data() + kHeaderBytes, mine_.data() + kHeaderBytes + h.len);
  const CacheEntry& e = cache_.entry(h.pos);
  item.agreed = &e.desc;
  item.agreed_dim0s = &e.dim0s;
}

}  // namespace phv
