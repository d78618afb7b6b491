#include "transport/link.h"

#include <sstream>

#include "common/byte_codec.h"

namespace phv {
namespace {

constexpr uint32_t kMessageMagic = 0x4d564850;  // "PHVM"

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

std::string Link::describe() const { return "rank " + std::to_string(peer_) + " (" + addr_ + kind_note() + ")"; }

void PeerLink::post_send(Transfer t) {
  t.seq = send_seq_++;
  store_le<uint32_t>(t.header, kMessageMagic);
  store_le<uint32_t>(t.header + 4, t.seq);
  store_le<uint64_t>(t.header + 8, t.len);
  sends_.push_back(t);
}

void PeerLink::post_recv(Transfer t) {
  t.seq = recv_seq_++;
  recvs_.push_back(t);
}

void PeerLink::pump() {
  if (!sends_.empty()) send_some();
  if (!recvs_.empty()) recv_some();
}

void PeerLink::check_header(const Transfer& t) {
  const uint32_t magic = load_le<uint32_t>(t.header);
  const uint32_t seq = load_le<uint32_t>(t.header + 4);
  const uint64_t len = load_le<uint64_t>(t.header + 8);
  if (magic == kMessageMagic && seq == t.seq && len == t.len) return;  // (no stream on the hot path)
  std::ostringstream why;
  if (magic != kMessageMagic) why << "bad message magic 0x" << std::hex << magic << std::dec;
  else if (seq != t.seq) why << "message #" << seq << " arrived where #" << t.seq << " was expected";
  else why << "message of " << len << " bytes, but the posted receive expects " << t.len;
  host_.fail(ErrorKind::INTERNAL, "protocol error from " + describe() + ": " + why.str(), peer_);
}

std::string PeerLink::text(const Transfer& t, Direction d) const {
  const bool send = d == Direction::SEND;
  std::ostringstream s;
  const size_t framing = framing_bytes();
  size_t payload_done = t.done > framing ? t.done - framing : 0;
  s << (send ? "send to " : "receive from ") << describe() << " of message #" << t.seq << " (" << t.len << " bytes, "
    << payload_done << " " << (send ? "sent" : "received") << ", posted " << seconds_since(t.posted) << " s ago)";
  return s.str();
}

std::string PeerLink::front_text() const {
  return recvs_.empty() ? text(sends_.front(), Direction::SEND) : text(recvs_.front(), Direction::RECEIVE);
}

void PeerLink::describe_waits(std::string& what, int& shown, int limit) const {
  if (shown >= limit) return;
  if (!recvs_.empty()) what += (shown++ ? "; " : "") + text(recvs_.front(), Direction::RECEIVE);
  if (!sends_.empty() && shown < limit) what += (shown++ ? "; " : "") + text(sends_.front(), Direction::SEND);
}

void PeerLink::close() {
  sends_.clear();
  recvs_.clear();
}

}  // namespace phv
