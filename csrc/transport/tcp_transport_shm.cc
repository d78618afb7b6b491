// The shared-memory side of TcpTransport: the message layout in the rings, zero-copy receives into a
// RecvSink, doorbells over the pair's socket, a short spin over the rings, and the sleep flags raised
// before poll() (see shm_transport.h for the protocol).
#include <errno.h>
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>

#include "transport/tcp_transport.h"

namespace phv {

void TcpTransport::ring_doorbell(int peer) {
  char b = 1;
  ssize_t n = ::send(peers_[peer].fd.get(), &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  // EAGAIN: earlier doorbells are still unread, so the peer will wake anyway.
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    fail(ErrorKind::PEER_LOST, "connection to " + describe_peer(peer) + " lost: " + errno_text(errno), peer);
}

void TcpTransport::drain_doorbell(int peer) {
  char buf[256];
  Peer& p = peers_[peer];
  for (;;) {
    ssize_t n = ::recv(p.fd.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0) {
      // A send into a ring completes before the peer reads it, so a peer may finish and exit while its
      // last messages still wait in our ring: drain them first; fail only if more is expected.
      if (!p.recvs.empty()) recv_some(peer);
      if (!p.sends.empty() || !p.recvs.empty())
        fail(ErrorKind::PEER_LOST, "connection closed by " + describe_peer(peer) + " during " +
                                       (p.recvs.empty() ? op_text(peer, p.sends.front(), true)
                                                        : op_text(peer, p.recvs.front(), false)), peer);
      p.closed = true;
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    fail(ErrorKind::PEER_LOST, "connection to " + describe_peer(peer) + " lost: " + errno_text(errno), peer);
  }
}

namespace {
size_t padded(size_t len) { return (len + kShmAlign - 1) / kShmAlign * kShmAlign; }
}  // namespace

// Message layout in a ring: a kShmAlign-byte slot whose first kHeaderBytes are the header, the payload,
// padding up to a multiple of kShmAlign. Every publish ends at a multiple of kShmAlign (the end of a
// payload is published together with its padding), so head and tail always are multiples of kShmAlign,
// a payload split by the ring's end splits at a multiple of kShmAlign, and the consumer sees either
// whole 64-byte blocks of a payload or its complete end.
void TcpTransport::shm_send_some(int peer) {
  Peer& p = peers_[peer];
  ShmLink& link = *p.shm;
  size_t room = link.free_space();
  size_t staged = 0;  // put into the ring, not yet published
  auto flush = [&]() {
    ++moves_;
    link.publish(staged);
    staged = 0;
    if (link.peer_wants_data()) ring_doorbell(peer);
  };
  while (!p.sends.empty()) {
    Op& op = p.sends.front();
    if (op.done == 0) {
      if (room - staged < kShmAlign) break;
      link.put(staged, op.header, kHeaderBytes);
      staged += kShmAlign;
      op.done = kShmAlign;
    }
    const size_t end = kShmAlign + op.len;
    while (op.done < end) {
      size_t left = end - op.done;
      size_t n = std::min({left, room - staged, publish_bytes_});
      if (n == left) {
        if (padded(left) > room - staged) n -= n % kShmAlign;  // the end goes with its padding
      } else {
        n -= n % kShmAlign;
      }
      if (n == 0) break;
      link.put(staged, op.buf + (op.done - kShmAlign), n);
      staged += n;
      op.done += n;
      if (op.done < end && staged >= publish_bytes_) {
        flush();
        room = link.free_space();
      }
    }
    if (op.done < end) break;  // the ring is full
    staged += padded(op.len) - op.len;
    complete(op);  // the payload is in the ring: the caller's buffer is free again
    p.sends.pop_front();
    if (staged >= publish_bytes_) {
      flush();
      room = link.free_space();
    }
  }
  if (staged) flush();  // no new look at the consumer here: progress() sleeps on the last position seen
}

void TcpTransport::shm_recv_some(int peer) {
  Peer& p = peers_[peer];
  ShmLink& link = *p.shm;
  size_t avail = link.available();
  size_t used = 0;  // consumed, not yet released
  auto flush = [&]() {
    ++moves_;
    link.release(used);
    used = 0;
    if (link.peer_wants_space()) ring_doorbell(peer);
  };
  while (!p.recvs.empty()) {
    Op& op = p.recvs.front();
    if (op.done == 0) {
      if (avail - used < kShmAlign) break;
      link.get(used, op.header, kHeaderBytes);
      check_header(peer, op);
      used += kShmAlign;
      op.done = kShmAlign;
    }
    const size_t end = kShmAlign + op.len;
    while (op.done < end) {
      // A multiple of kShmAlign, or the whole end (see the layout above).
      size_t n = std::min({end - op.done, avail - used, publish_bytes_});
      if (n == 0) break;
      size_t off = op.done - kShmAlign;
      if (op.sink) {
        size_t contiguous = 0;
        const char* at = link.view(used, &contiguous);
        size_t first = std::min(n, contiguous);
        op.sink->consume(at, off, first);
        if (n > first) op.sink->consume(link.view(used + first, &contiguous), off + first, n - first);
      } else {
        link.get(used, op.buf + off, n);
      }
      used += n;
      op.done += n;
      if (op.done < end && used >= publish_bytes_) {
        flush();
        avail = link.available();
      }
    }
    if (op.done < end) break;  // the rest is not there yet
    used += padded(op.len) - op.len;
    complete(op);
    p.recvs.pop_front();
    if (used >= publish_bytes_) {
      flush();
      avail = link.available();
    }
  }
  if (used) flush();  // no new look at the producer here: progress() sleeps on the last position seen
}

bool TcpTransport::spin_shm() {
  // Before sleeping in poll(), poll the rings for up to spin_us_: a peer that is a few microseconds
  // behind answers without a doorbell or a wake-up (~30 us each on loopback). The first pause_ns_ spin
  // with the pause instruction: a peer running on another core answers within that (a 4-byte allreduce
  // at n=2 took 0.9 us pause-spinning, as Open MPI, and 1.2 us yielding on every turn). After that every
  // turn yields the CPU, so a peer that waits for our core (more ranks than cores, or other jobs on the
  // machine) runs meanwhile: under load, yielding took 12 us where pause-spinning took 237 us
  // (RESULTS.md). With nothing else runnable sched_yield() returns at once.
  if (spin_us_ <= 0) return false;
  const Clock::time_point start = Clock::now();
  const auto limit = std::chrono::microseconds(spin_us_);
  const auto pause_for = std::chrono::nanoseconds(pause_ns_);
  bool any = false;
  Clock::duration elapsed{};
  do {
    any = false;
    for (int peer = 0; peer < size_; ++peer) {
      Peer& p = peers_[peer];
      if (!p.shm) continue;
      if (!p.sends.empty()) {
        any = true;
        if (p.shm->tail_moved()) shm_send_some(peer);
      }
      if (!p.recvs.empty()) {
        any = true;
        if (p.shm->head_moved()) shm_recv_some(peer);
      }
    }
    if (!done_.empty()) return true;
    if (elapsed < pause_for) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    } else {
      sched_yield();
    }
    elapsed = Clock::now() - start;
  } while (any && elapsed < limit);
  return false;
}

bool TcpTransport::prepare_shm_sleep() {
  for (int peer = 0; peer < size_; ++peer) {
    Peer& p = peers_[peer];
    if (!p.shm || (p.sends.empty() && p.recvs.empty())) continue;
    p.sleeping = true;
    if ((!p.recvs.empty() && !p.shm->sleep_until_readable()) || (!p.sends.empty() && !p.shm->sleep_until_writable()))
      return false;
  }
  return true;
}

}  // namespace phv
