#include "transport/socket_link.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>

namespace phv {
namespace {

constexpr int kMaxIov = 64;  // iovecs per system call (header + payload per message)

// Gathers what is left to move of the queued messages -- the rest of a header, then the payload -- into
// `iov`, for a send as for a receive. Returns the number of iovecs; *total is their bytes.
int gather(std::deque<Transfer>& queue, iovec* iov, size_t* total) {
  int n = 0;
  *total = 0;
  for (Transfer& t : queue) {
    if (n + 2 > kMaxIov) break;
    if (t.done < kMessageHeaderBytes) {
      iov[n++] = {t.header + t.done, kMessageHeaderBytes - t.done};
      *total += kMessageHeaderBytes - t.done;
      if (t.len) iov[n++] = {t.buf, t.len};
      *total += t.len;
    } else {
      size_t off = t.done - kMessageHeaderBytes;
      iov[n++] = {t.buf + off, t.len - off};
      *total += t.len - off;
    }
  }
  return n;
}

}  // namespace

void SocketLink::move_some(std::deque<Transfer>& queue, Direction d) {
  const bool receiving = d == Direction::RECEIVE;
  while (!queue.empty()) {
    iovec iov[kMaxIov];
    size_t total = 0;
    int n = gather(queue, iov, &total);
    ssize_t r;
    if (receiving) {
      r = ::readv(fd_.get(), iov, n);
      if (r == 0)
        host_.fail(ErrorKind::PEER_LOST, "connection closed by the peer during " + text(queue.front(), d), peer_);
    } else {
      msghdr msg{};
      msg.msg_iov = iov;
      msg.msg_iovlen = static_cast<size_t>(n);
      r = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      host_.fail(ErrorKind::PEER_LOST, "connection lost during " + text(queue.front(), d) + ": " + errno_text(errno),
                 peer_);
    }
    // A received header is checked as soon as it is complete; payload bytes that a readv placed in the
    // posted buffer before a failed check are never reported as a completed receive.
    host_.moved();
    size_t left = static_cast<size_t>(r);
    while (!queue.empty()) {
      Transfer& t = queue.front();
      bool had_header = t.done >= kMessageHeaderBytes;
      size_t take = std::min(kMessageHeaderBytes + t.len - t.done, left);
      t.done += take;
      left -= take;
      if (receiving && !had_header && t.done >= kMessageHeaderBytes) check_header(t);
      if (t.done < kMessageHeaderBytes + t.len) break;
      host_.complete(t);
      queue.pop_front();
    }
    if (static_cast<size_t>(r) < total) return;  // the socket buffer is full (empty)
  }
}

void SocketLink::set_lowat() {
  // Sleep until a useful amount has arrived, not at every 64 KiB packet: poll() reports the socket
  // readable only once SO_RCVLOWAT bytes are queued (or at EOF or an error), so a receiver that outpaces
  // its sender wakes once per lowat_max_ bytes instead of once per packet (1 MiB allreduce at n=2: 22%
  // less CPU, RESULTS.md). Never more than the head receive still needs, and only the
  // header until that has been checked: a message shorter than expected must still wake us to fail
  // with a protocol error rather than sleep into the deadline.
  const Transfer& t = recvs_.front();
  size_t left = t.done < kMessageHeaderBytes ? kMessageHeaderBytes - t.done : kMessageHeaderBytes + t.len - t.done;
  int want = static_cast<int>(std::max<size_t>(1, std::min(left, lowat_max_)));
  if (want == lowat_) return;
  if (setsockopt(fd_.get(), SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0) lowat_ = want;
}

short SocketLink::poll_events() {
  short ev = (sends_.empty() ? 0 : POLLOUT) | (recvs_.empty() ? 0 : POLLIN);
  if (ev && !recvs_.empty() && lowat_max_ > 0) set_lowat();
  return ev;
}

void SocketLink::on_poll(short re) {
  if ((re & (POLLOUT | POLLERR | POLLHUP)) && !sends_.empty()) send_some();
  if ((re & (POLLIN | POLLERR | POLLHUP)) && !recvs_.empty()) recv_some();
  if ((re & POLLNVAL)) host_.fail(ErrorKind::PEER_LOST, "connection to " + describe() + " is closed", peer_);
}

void SocketLink::close() {
  fd_.reset();
  PeerLink::close();
}

}  // namespace phv
