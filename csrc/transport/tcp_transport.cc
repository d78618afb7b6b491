#include "transport/tcp_transport.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "common/logging.h"

namespace phv {
namespace {

constexpr uint32_t kMessageMagic = 0x4d564850;  // "PHVM"
constexpr int kMaxIov = 64;                     // iovecs per system call (header + payload per message)
// Default spin before sleeping when shm peers have work: 4 B at n=4 on 2 cores under load took 228 us
// with 0 (sleep at once), 89 us with 20, 108 us with 50, 83 us with 200 (RESULTS.md) --
// of which the first kPauseNs spin with the pause instruction, then every turn yields (spin_shm()).
constexpr int kSpinUs = 50;
constexpr long kPauseNs = 2000;

void encode_header(uint8_t* h, uint32_t seq, uint64_t len) {
  for (int i = 0; i < 4; ++i) h[i] = uint8_t(kMessageMagic >> (8 * i));
  for (int i = 0; i < 4; ++i) h[4 + i] = uint8_t(seq >> (8 * i));
  for (int i = 0; i < 8; ++i) h[8 + i] = uint8_t(len >> (8 * i));
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

TcpTransport::TcpTransport(Store& store, const MeshOptions& options)
    : rank_(options.rank), size_(options.size), spin_us_(options.shm_spin_us),
      pause_ns_(options.shm_yield > 0 ? 0 : kPauseNs),
      in_place_(options.shm_in_place),
      lowat_max_(options.recv_lowat_bytes),
      publish_bytes_(std::max(kShmAlign, (options.shm_publish_bytes ? options.shm_publish_bytes : kShmPublishBytes) /
                                             kShmAlign * kShmAlign)),
      peers_(options.size) {
  std::vector<MeshConnection> conns = connect_mesh(store, options, &rejected_);
  for (int p = 0; p < size_; ++p) {
    peers_[p].fd = std::move(conns[p].fd);
    peers_[p].addr = p == rank_ ? "self" : conns[p].addr;
  }
  if (size_ > 1) {
    std::vector<int> fds(size_, -1);
    std::vector<std::string> addrs(size_);
    for (int p = 0; p < size_; ++p) {
      fds[p] = peers_[p].fd.get();
      addrs[p] = peers_[p].addr;
    }
    auto links = setup_shm_links(rank_, fds, addrs, options.shm_enable,
                                 options.shm_ring_bytes ? options.shm_ring_bytes : kShmDefaultRingBytes,
                                 deadline_after(options.connect_timeout_s), &all_local_);
    int local = 1;
    for (int p = 0; p < size_; ++p) {
      peers_[p].shm = std::move(links[p]);
      local += peers_[p].shm ? 1 : 0;
    }
    // More ranks sharing memory than CPUs (4 ranks on 2 cores): the peer we wait for is most likely
    // waiting for our CPU, so yield from the first turn (4 B at n=4: 15 us against 24 us with the pause
    // phase; Open MPI 22 us).
    cpu_set_t cpus;
    int ncpu = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    if (options.shm_yield < 0 && local > ncpu) pause_ns_ = 0;
  }
  if (spin_us_ < 0) spin_us_ = kSpinUs;
  if (options.shm_yield == 0) pause_ns_ = 1000L * spin_us_;  // never yield: pause for the whole spin
}

TcpTransport::~TcpTransport() { close(); }

void TcpTransport::close() {
  for (auto& p : peers_) {
    p.fd.reset();
    p.shm.reset();
    p.sends.clear();
    p.recvs.clear();
  }
  self_sends_.clear();
  self_recvs_.clear();
  pending_ = 0;
  if (!failure_)
    failure_ = std::make_unique<HvdError>(ErrorKind::SHUTDOWN,
                                          "rank " + std::to_string(rank_) + ": the transport has been shut down");
}

std::string TcpTransport::describe_peer(int peer) const {
  if (peer < 0 || peer >= size_) return "rank " + std::to_string(peer) + " (no such rank)";
  return "rank " + std::to_string(peer) + " (" + peers_[peer].addr + (peers_[peer].shm ? ", shared memory" : "") + ")";
}

void TcpTransport::check_usable(int peer, const char* what) const {
  if (failure_) throw *failure_;
  PHV_CHECK_ARG(peer >= 0 && peer < size_, "rank ", rank_, ": ", what, " to/from rank ", peer,
                " which is not in [0, ", size_, ")");
}

std::string TcpTransport::op_text(int peer, const Op& op, bool send) const {
  std::ostringstream s;
  const size_t header = peers_[peer].shm ? kShmAlign : kHeaderBytes;
  size_t payload_done = op.done > header ? op.done - header : 0;
  s << (send ? "send to " : "receive from ") << describe_peer(peer) << " of message #" << op.seq << " ("
    << op.len << " bytes, " << payload_done << " " << (send ? "sent" : "received") << ", posted "
    << seconds_since(op.posted) << " s ago)";
  return s.str();
}

void TcpTransport::fail(ErrorKind kind, const std::string& message, int peer) {
  std::string text = "rank " + std::to_string(rank_) + ": " + message;
  log(LogLevel::DEBUG, "transport failing: ", text);
  close();  // drops every request (the caller's buffers are no longer referenced) and wakes the peers
  failure_ = std::make_unique<HvdError>(kind, text, peer);
  throw *failure_;
}

RequestId TcpTransport::post_send(int peer, const void* buf, size_t len) {
  check_usable(peer, "send");
  PHV_CHECK_ARG(buf != nullptr || len == 0, "rank ", rank_, ": send of ", len, " bytes from a null buffer");
  Op op{next_id_++, static_cast<char*>(const_cast<void*>(buf)), len, 0, 0, nullptr, 1, {}, Clock::now()};
  ++pending_;
  if (peer == rank_) {
    self_sends_.push_back(op);
    match_self();
    return op.id;
  }
  Peer& p = peers_[peer];
  op.seq = p.send_seq++;
  encode_header(op.header, op.seq, len);
  p.sends.push_back(op);
  return op.id;
}

RequestId TcpTransport::post_recv(int peer, void* buf, size_t len) {
  check_usable(peer, "receive");
  PHV_CHECK_ARG(buf != nullptr || len == 0, "rank ", rank_, ": receive of ", len, " bytes into a null buffer");
  Op op{next_id_++, static_cast<char*>(buf), len, 0, 0, nullptr, 1, {}, Clock::now()};
  ++pending_;
  if (peer == rank_) {
    self_recvs_.push_back(op);
    match_self();
    return op.id;
  }
  Peer& p = peers_[peer];
  op.seq = p.recv_seq++;
  p.recvs.push_back(op);
  return op.id;
}

RequestId TcpTransport::post_recv_sink(int peer, size_t len, size_t grain, RecvSink* sink) {
  check_usable(peer, "receive");
  if (!recv_in_place(peer)) return Transport::post_recv_sink(peer, len, grain, sink);  // throws
  PHV_CHECK_ARG(sink != nullptr && grain >= 1 && kShmAlign % grain == 0, "rank ", rank_,
                ": zero-copy receive needs a sink and a grain dividing ", kShmAlign, " (got ", grain, ")");
  Op op{next_id_++, nullptr, len, 0, 0, sink, grain, {}, Clock::now()};
  ++pending_;
  Peer& p = peers_[peer];
  op.seq = p.recv_seq++;
  p.recvs.push_back(op);
  return op.id;
}

void TcpTransport::match_self() {
  while (!self_sends_.empty() && !self_recvs_.empty()) {
    Op& s = self_sends_.front();
    Op& r = self_recvs_.front();
    if (s.len != r.len)
      fail(ErrorKind::INTERNAL, "message to self of " + std::to_string(s.len) + " bytes, but the posted receive expects " +
                                    std::to_string(r.len));
    if (s.len) std::memmove(r.buf, s.buf, s.len);
    complete(s);
    complete(r);
    self_sends_.pop_front();
    self_recvs_.pop_front();
  }
}

void TcpTransport::complete(Op& op) {
  done_.push_back(op.id);
  --pending_;
}

void TcpTransport::set_lowat(int peer) {
  // Sleep until a useful amount has arrived, not at every 64 KiB packet: poll() reports the socket
  // readable only once SO_RCVLOWAT bytes are queued (or at EOF or an error), so a receiver that outpaces
  // its sender wakes once per lowat_max_ bytes instead of once per packet (1 MiB allreduce at n=2: 22%
  // less CPU, RESULTS.md). Never more than the head receive still needs, and only the
  // header until that has been checked: a message shorter than expected must still wake us to fail
  // with a protocol error rather than sleep into the deadline.
  Peer& p = peers_[peer];
  const Op& op = p.recvs.front();
  size_t left = op.done < kHeaderBytes ? kHeaderBytes - op.done : kHeaderBytes + op.len - op.done;
  int want = static_cast<int>(std::max<size_t>(1, std::min(left, lowat_max_)));
  if (want == p.lowat) return;
  if (setsockopt(p.fd.get(), SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0) p.lowat = want;
}

void TcpTransport::check_header(int peer, const Op& op) {
  const uint8_t* h = op.header;
  uint32_t magic = 0, seq = 0;
  uint64_t len = 0;
  for (int i = 0; i < 4; ++i) magic |= uint32_t(h[i]) << (8 * i);
  for (int i = 0; i < 4; ++i) seq |= uint32_t(h[4 + i]) << (8 * i);
  for (int i = 0; i < 8; ++i) len |= uint64_t(h[8 + i]) << (8 * i);
  if (magic == kMessageMagic && seq == op.seq && len == op.len) return;  // (no stream on the hot path)
  std::ostringstream why;
  if (magic != kMessageMagic) why << "bad message magic 0x" << std::hex << magic << std::dec;
  else if (seq != op.seq) why << "message #" << seq << " arrived where #" << op.seq << " was expected";
  else why << "message of " << len << " bytes, but the posted receive expects " << op.len;
  fail(ErrorKind::INTERNAL, "protocol error from " + describe_peer(peer) + ": " + why.str(), peer);
}

bool TcpTransport::send_some(int peer) {
  Peer& p = peers_[peer];
  if (p.shm) {
    shm_send_some(peer);
    return false;
  }
  while (!p.sends.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    size_t total = 0;
    for (const Op& op : p.sends) {
      if (n + 2 > kMaxIov) break;
      if (op.done < kHeaderBytes) {
        iov[n++] = {const_cast<uint8_t*>(op.header) + op.done, kHeaderBytes - op.done};
        total += kHeaderBytes - op.done;
        if (op.len) iov[n++] = {op.buf, op.len};
        total += op.len;
      } else {
        size_t off = op.done - kHeaderBytes;
        iov[n++] = {op.buf + off, op.len - off};
        total += op.len - off;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    ssize_t w = ::sendmsg(p.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      fail(ErrorKind::PEER_LOST, "connection lost during " + op_text(peer, p.sends.front(), true) + ": " +
                                     errno_text(errno), peer);
    }
    ++moves_;
    size_t left = static_cast<size_t>(w);
    while (!p.sends.empty()) {
      Op& op = p.sends.front();
      size_t take = std::min(kHeaderBytes + op.len - op.done, left);
      op.done += take;
      left -= take;
      if (op.done < kHeaderBytes + op.len) break;
      complete(op);
      p.sends.pop_front();
    }
    if (static_cast<size_t>(w) < total) return true;  // the socket buffer is full
  }
  return false;
}

bool TcpTransport::recv_some(int peer) {
  Peer& p = peers_[peer];
  if (p.shm) {
    shm_recv_some(peer);
    return false;
  }
  while (!p.recvs.empty()) {
    iovec iov[kMaxIov];
    int n = 0;
    size_t total = 0;
    for (Op& op : p.recvs) {
      if (n + 2 > kMaxIov) break;
      if (op.done < kHeaderBytes) {
        iov[n++] = {op.header + op.done, kHeaderBytes - op.done};
        total += kHeaderBytes - op.done;
        if (op.len) iov[n++] = {op.buf, op.len};
        total += op.len;
      } else {
        size_t off = op.done - kHeaderBytes;
        iov[n++] = {op.buf + off, op.len - off};
        total += op.len - off;
      }
    }
    ssize_t r = ::readv(p.fd.get(), iov, n);
    if (r == 0)
      fail(ErrorKind::PEER_LOST, "connection closed by the peer during " + op_text(peer, p.recvs.front(), false), peer);
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      if (errno == EINTR) continue;
      fail(ErrorKind::PEER_LOST, "connection lost during " + op_text(peer, p.recvs.front(), false) + ": " +
                                     errno_text(errno), peer);
    }
    // The header of a message is checked as soon as it is complete; payload bytes that a readv placed
    // in the posted buffer before a failed check are never reported as a completed receive.
    ++moves_;
    size_t left = static_cast<size_t>(r);
    while (!p.recvs.empty()) {
      Op& op = p.recvs.front();
      bool had_header = op.done >= kHeaderBytes;
      size_t take = std::min(kHeaderBytes + op.len - op.done, left);
      op.done += take;
      left -= take;
      if (!had_header && op.done >= kHeaderBytes) check_header(peer, op);
      if (op.done < kHeaderBytes + op.len) break;
      complete(op);
      p.recvs.pop_front();
    }
    if (static_cast<size_t>(r) < total) return true;
  }
  return false;
}

void TcpTransport::progress(std::vector<RequestId>& completed, Deadline deadline) {
  if (failure_) throw *failure_;
  bool first = true;
  Idle idle;
  begin_idle(idle);
  for (;;) {
    // I/O phase: on the first pass try every peer with work (data may already be there); later only
    // the sockets poll() reported.
    for (auto& p : peers_)
      if (p.sleeping) {
        p.sleeping = false;
        if (p.shm) p.shm->clear_sleep_flags();
      }
    if (first) {
      for (int peer = 0; peer < size_; ++peer) {
        if (!peers_[peer].sends.empty()) send_some(peer);
        if (!peers_[peer].recvs.empty()) recv_some(peer);
      }
    } else {
      for (size_t i = 0; i < pollfds_.size(); ++i) {
        short re = pollfds_[i].revents;
        if (!re) continue;
        int peer = poll_peers_[i];
        if (peers_[peer].shm) {
          drain_doorbell(peer);
          if (!peers_[peer].sends.empty()) send_some(peer);
          if (!peers_[peer].recvs.empty()) recv_some(peer);
          continue;
        }
        if ((re & (POLLOUT | POLLERR | POLLHUP)) && !peers_[peer].sends.empty()) send_some(peer);
        if ((re & (POLLIN | POLLERR | POLLHUP)) && !peers_[peer].recvs.empty()) recv_some(peer);
        if ((re & POLLNVAL)) fail(ErrorKind::PEER_LOST, "connection to " + describe_peer(peer) + " is closed", peer);
      }
    }
    first = false;
    if (!done_.empty()) {
      completed.insert(completed.end(), done_.begin(), done_.end());
      done_.clear();
      return;
    }
    if (pending_ == 0) return;
    if (spin_shm() || !prepare_shm_sleep()) {
      first = true;  // a ring moved: go round again without sleeping
      continue;
    }

    pollfds_.clear();
    poll_peers_.clear();
    for (int peer = 0; peer < size_; ++peer) {
      Peer& p = peers_[peer];
      short ev = (p.sends.empty() ? 0 : POLLOUT) | (p.recvs.empty() ? 0 : POLLIN);
      if (!ev) continue;
      if (p.shm) ev = POLLIN;  // doorbells (and the peer's death) arrive on the socket
      if (p.closed)
        fail(ErrorKind::PEER_LOST, "connection closed by " + describe_peer(peer) + " during " +
                                       (p.recvs.empty() ? op_text(peer, p.sends.front(), true)
                                                        : op_text(peer, p.recvs.front(), false)), peer);
      if (!p.shm && !p.recvs.empty() && lowat_max_ > 0) set_lowat(peer);
      pollfds_.push_back({p.fd.get(), ev, 0});
      poll_peers_.push_back(peer);
    }
    if (pollfds_.empty()) {
      // Only unmatched messages to self are pending: nothing on the network can complete them.
      fail(ErrorKind::INTERNAL, "a message to self is pending with no matching " +
                                    std::string(self_sends_.empty() ? "send" : "receive"));
    }
    int rc = ::poll(pollfds_.data(), pollfds_.size(), before_sleep(idle, deadline));
    if (rc < 0 && errno != EINTR)
      fail(ErrorKind::INTERNAL, std::string("poll failed: ") + errno_text(errno));
    if (rc == 0 && Clock::now() >= deadline)
      fail(ErrorKind::TIMEOUT, "deadline passed while waiting for " + waiting_for(), first_waiting_peer());
  }
}

}  // namespace phv
