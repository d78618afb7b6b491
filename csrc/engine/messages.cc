#include "engine/messages.h"

#include <algorithm>

#include "common/enforce.h"
#include "engine/wire.h"

namespace phv {

namespace {
constexpr uint32_t kRankMagic = 0x52564850;  // "PHVR"
constexpr uint32_t kRespMagic = 0x53564850;  // "PHVS"
constexpr size_t kMaxMessage = size_t(1) << 30;

void check_magic(uint32_t got, uint32_t want) {
  PHV_ENFORCE(got == want, "corrupt engine negotiation message: bad magic ", got);
}

// Header layout shared by both messages: magic, total length, flags, then message-specific words.
// The length is patched in once the body is written, and the buffer is padded to a whole slot.
void finish(WireWriter& w, std::vector<uint8_t>& out) {
  w.patch<uint32_t>(4, static_cast<uint32_t>(out.size()));
  if (out.size() < kSlotBytes) out.resize(kSlotBytes, 0);
}
}  // namespace

Desc& RankMessage::add_new() {
  if (n_news == news.size()) news.emplace_back();
  return news[n_news++];
}

Expiry& RankMessage::add_expiry() {
  if (n_expiries == expiries.size()) expiries.emplace_back();
  return expiries[n_expiries++];
}

void RankMessage::set_bit(int pos) {
  size_t w = static_cast<size_t>(pos) / 64;
  if (bits.size() <= w) bits.resize(w + 1, 0);
  bits[w] |= uint64_t(1) << (pos % 64);
}

InlineData& RankMessage::add_inline() {
  if (n_inlines == inlines.size()) inlines.emplace_back();
  return inlines[n_inlines++];
}

ResponseItem& ResponseList::add() {
  if (n == items.size()) items.emplace_back();
  ResponseItem& item = items[n++];
  item.fused = false;
  item.pos = -1;
  item.dim0s.clear();
  item.message.clear();
  item.agreed = nullptr;
  item.agreed_dim0s = nullptr;
  return item;
}

size_t announced_length(const uint8_t* slot) {
  uint32_t len;
  std::memcpy(&len, slot + 4, sizeof(len));
  PHV_ENFORCE(len <= kMaxMessage, "engine negotiation message announces ", len, " bytes");
  return len;
}

void encode_rank_message(const RankMessage& m, std::vector<uint8_t>& out) {
  WireWriter w(out);
  w.put<uint32_t>(kRankMagic);
  w.put<uint32_t>(0);
  w.put<uint32_t>(m.flags);
  w.put<uint32_t>(static_cast<uint32_t>(m.bits.size()));
  w.put<uint32_t>(static_cast<uint32_t>(m.n_news));
  w.put<uint32_t>(static_cast<uint32_t>(m.n_expiries));
  w.put<uint32_t>(static_cast<uint32_t>(m.n_inlines));
  w.put_bytes(m.bits.data(), m.bits.size() * sizeof(uint64_t));
  for (size_t i = 0; i < m.n_news; ++i) encode_desc(w, m.news[i]);
  for (size_t i = 0; i < m.n_expiries; ++i) {
    const Expiry& e = m.expiries[i];
    w.put<int32_t>(e.key.set);
    w.put_string(e.key.name);
    w.put<uint8_t>(e.kind);
    w.put<double>(e.waited_s);
    w.put<int64_t>(e.request_seq);
  }
  for (size_t i = 0; i < m.n_inlines; ++i) {
    w.put<int32_t>(m.inlines[i].pos);
    w.put<uint32_t>(static_cast<uint32_t>(m.inlines[i].data.size()));
    w.put_bytes(m.inlines[i].data.data(), m.inlines[i].data.size());
  }
  finish(w, out);
}

void decode_rank_message(const uint8_t* data, size_t len, RankMessage& m) {
  WireReader r(data, len);
  check_magic(r.get<uint32_t>(), kRankMagic);
  r.get<uint32_t>();
  m.clear();
  m.flags = r.get<uint32_t>();
  uint32_t nwords = r.get<uint32_t>();
  uint32_t nnew = r.get<uint32_t>();
  uint32_t nexp = r.get<uint32_t>();
  uint32_t ninl = r.get<uint32_t>();
  const uint8_t* words = r.take(static_cast<size_t>(nwords) * sizeof(uint64_t));
  m.bits.resize(nwords);
  if (nwords > 0) std::memcpy(m.bits.data(), words, nwords * sizeof(uint64_t));
  for (uint32_t i = 0; i < nnew; ++i) decode_desc(r, m.add_new());
  for (uint32_t i = 0; i < nexp; ++i) {
    Expiry& e = m.add_expiry();
    e.key.set = r.get<int32_t>();
    r.get_string(e.key.name);
    e.kind = static_cast<DescKind>(r.get<uint8_t>());
    e.waited_s = r.get<double>();
    e.request_seq = r.get<int64_t>();
  }
  for (uint32_t i = 0; i < ninl; ++i) {
    InlineData& d = m.add_inline();
    d.pos = r.get<int32_t>();
    uint32_t len = r.get<uint32_t>();
    const uint8_t* p = r.take(len);
    d.data.assign(p, p + len);
  }
}

void encode_response_list(const ResponseList& l, std::vector<uint8_t>& out) {
  WireWriter w(out);
  w.put<uint32_t>(kRespMagic);
  w.put<uint32_t>(0);
  w.put<uint32_t>(l.flags);
  w.put<int32_t>(l.join_value);
  w.put<int32_t>(l.shutdown_rank);
  w.put<uint32_t>(static_cast<uint32_t>(l.n));
  for (size_t i = 0; i < l.n; ++i) {
    const ResponseItem& it = l.items[i];
    w.put<uint8_t>(static_cast<uint8_t>(it.type));
    w.put<uint8_t>(it.fused ? 1 : 0);
    if (it.type == ItemType::CACHED) {
      w.put<int32_t>(it.pos);
    } else if (it.type == ItemType::INLINE) {
      w.put<int32_t>(it.pos);
      w.put<uint32_t>(static_cast<uint32_t>(it.data.size()));
      w.put_bytes(it.data.data(), it.data.size());
    } else if (it.type == ItemType::FULL) {
      encode_desc(w, it.desc);
      w.put_i64s(it.dim0s);
    } else {
      w.put<uint8_t>(it.desc.kind);
      w.put<int32_t>(it.desc.set);
      w.put_string(it.desc.name);
      w.put<uint8_t>(static_cast<uint8_t>(it.error_kind));
      w.put_string(it.message);
    }
  }
  if (l.flags & kRespShutdown) w.put_string(l.shutdown_reason);
  finish(w, out);
}

void decode_response_list(const uint8_t* data, size_t len, ResponseList& l) {
  WireReader r(data, len);
  check_magic(r.get<uint32_t>(), kRespMagic);
  r.get<uint32_t>();
  l.clear();
  l.flags = r.get<uint32_t>();
  l.join_value = r.get<int32_t>();
  l.shutdown_rank = r.get<int32_t>();
  uint32_t n = r.get<uint32_t>();
  for (uint32_t i = 0; i < n; ++i) {
    ResponseItem& it = l.add();
    it.type = static_cast<ItemType>(r.get<uint8_t>());
    it.fused = r.get<uint8_t>() != 0;
    if (it.type == ItemType::CACHED) {
      it.pos = r.get<int32_t>();
    } else if (it.type == ItemType::INLINE) {
      it.pos = r.get<int32_t>();
      uint32_t len = r.get<uint32_t>();
      const uint8_t* p = r.take(len);
      it.data.assign(p, p + len);
    } else if (it.type == ItemType::FULL) {
      decode_desc(r, it.desc);
      r.get_i64s(it.dim0s);
    } else if (it.type == ItemType::ERROR) {
      it.desc.kind = static_cast<DescKind>(r.get<uint8_t>());
      it.desc.set = r.get<int32_t>();
      r.get_string(it.desc.name);
      uint8_t kind = r.get<uint8_t>();
      it.error_kind =
          kind <= static_cast<uint8_t>(ErrorKind::SHUTDOWN) ? static_cast<ErrorKind>(kind) : ErrorKind::INTERNAL;
      r.get_string(it.message);
    } else {
      PHV_ENFORCE_FAIL("corrupt engine negotiation message: item type ", int(it.type));
    }
  }
  if (l.flags & kRespShutdown) r.get_string(l.shutdown_reason);
}

}  // namespace phv
