// The shared-memory side of TcpTransport's progress loop: doorbells over the pair's socket, a short
// spin over the rings, and the sleep flags raised before poll() (see shm_transport.h for the protocol).
#include <errno.h>
#include <sched.h>
#include <sys/socket.h>

#include "transport/tcp_transport.h"

namespace phv {

void TcpTransport::ring_doorbell(int peer) {
  char b = 1;
  ssize_t n = ::send(peers_[peer].fd.get(), &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  // EAGAIN: earlier doorbells are still unread, so the peer will wake anyway.
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    fail(ErrorKind::PEER_LOST, "connection to " + describe_peer(peer) + " lost: " + errno_text(errno));
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
                                                        : op_text(peer, p.recvs.front(), false)));
      p.closed = true;
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    fail(ErrorKind::PEER_LOST, "connection to " + describe_peer(peer) + " lost: " + errno_text(errno));
  }
}

bool TcpTransport::spin_shm() {
  // Long enough to catch a peer that is a few microseconds behind, short enough that ranks sharing a
  // core do not steal much from each other before sleeping in poll(); yielding lets a peer that shares
  // our core run meanwhile.
  if (spin_us_ <= 0) return false;
  Clock::time_point until = Clock::now() + std::chrono::microseconds(spin_us_);
  bool any = false;
  do {
    any = false;
    for (int peer = 0; peer < size_; ++peer) {
      Peer& p = peers_[peer];
      if (!p.shm) continue;
      if (!p.sends.empty()) {
        any = true;
        if (p.shm->can_write()) send_some(peer);
      }
      if (!p.recvs.empty()) {
        any = true;
        if (p.shm->can_read()) recv_some(peer);
      }
    }
    if (!done_.empty()) return true;
    if (spin_yield_) {
      sched_yield();
    } else {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
  } while (any && Clock::now() < until);
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
