#include "transport/shared_memory_link.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>

namespace phv {
namespace {
size_t padded(size_t len) { return (len + kShmAlign - 1) / kShmAlign * kShmAlign; }
}  // namespace

void SharedMemoryLink::ring_doorbell() {
  char b = 1;
  ssize_t n = ::send(fd_.get(), &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  // EAGAIN: earlier doorbells are still unread, so the peer will wake anyway.
  if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
    host_.fail(ErrorKind::PEER_LOST, "connection to " + describe() + " lost: " + errno_text(errno), peer_);
}

void SharedMemoryLink::drain_doorbell() {
  char buf[256];
  for (;;) {
    ssize_t n = ::recv(fd_.get(), buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) continue;
    // A peer that exits with doorbells of ours still unread in its socket resets the connection instead
    // of closing it: that is the same clean exit (the doorbells carry no data), so it is not an error by
    // itself, e.g. a peer leaving a barrier while this rank still exchanges its last round with another.
    if (n == 0 || errno == ECONNRESET) {
      // A send into a ring completes before the peer reads it, so a peer may finish and exit while its
      // last messages still wait in our ring: drain them first; fail only if more is expected.
      if (!recvs_.empty()) recv_some();
      if (!idle())
        host_.fail(ErrorKind::PEER_LOST, "connection closed by " + describe() + " during " + front_text(), peer_);
      closed_ = true;
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return;
    host_.fail(ErrorKind::PEER_LOST, "connection to " + describe() + " lost: " + errno_text(errno), peer_);
  }
}

// Every publish ends at a multiple of kShmAlign (the end of a payload is published together with its
// padding), so head and tail always are multiples of kShmAlign and the consumer sees either whole 64-byte
// blocks of a payload or its complete end.
void SharedMemoryLink::send_some() {
  ShmLink& ring = *rings_;
  size_t room = ring.free_space();
  size_t staged = 0;  // put into the ring, not yet published
  auto flush = [&]() {
    host_.moved();
    ring.publish(staged);
    staged = 0;
    if (ring.peer_wants_data()) ring_doorbell();
  };
  while (!sends_.empty()) {
    Transfer& t = sends_.front();
    if (t.done == 0) {
      if (room - staged < kShmAlign) break;
      ring.put(staged, t.header, kMessageHeaderBytes);
      staged += kShmAlign;
      t.done = kShmAlign;
    }
    const size_t end = kShmAlign + t.len;
    while (t.done < end) {
      size_t left = end - t.done;
      size_t n = std::min({left, room - staged, publish_bytes_});
      if (n == left) {
        if (padded(left) > room - staged) n -= n % kShmAlign;  // the end goes with its padding
      } else {
        n -= n % kShmAlign;
      }
      if (n == 0) break;
      ring.put(staged, t.buf + (t.done - kShmAlign), n);
      staged += n;
      t.done += n;
      if (t.done < end && staged >= publish_bytes_) {
        flush();
        room = ring.free_space();
      }
    }
    if (t.done < end) break;  // the ring is full
    staged += padded(t.len) - t.len;
    host_.complete(t);  // the payload is in the ring: the caller's buffer is free again
    sends_.pop_front();
    if (staged >= publish_bytes_) {
      flush();
      room = ring.free_space();
    }
  }
  if (staged) flush();  // no new look at the consumer here: the loop sleeps on the last position seen
}

void SharedMemoryLink::recv_some() {
  ShmLink& ring = *rings_;
  size_t avail = ring.available();
  size_t used = 0;  // consumed, not yet released
  auto flush = [&]() {
    host_.moved();
    ring.release(used);
    used = 0;
    if (ring.peer_wants_space()) ring_doorbell();
  };
  while (!recvs_.empty()) {
    Transfer& t = recvs_.front();
    if (t.done == 0) {
      if (avail - used < kShmAlign) break;
      ring.get(used, t.header, kMessageHeaderBytes);
      check_header(t);
      used += kShmAlign;
      t.done = kShmAlign;
    }
    const size_t end = kShmAlign + t.len;
    while (t.done < end) {
      // A multiple of kShmAlign, or the whole end (see the layout above).
      size_t n = std::min({end - t.done, avail - used, publish_bytes_});
      if (n == 0) break;
      size_t off = t.done - kShmAlign;
      if (t.sink) {
        size_t contiguous = 0;
        const char* at = ring.view(used, &contiguous);
        size_t first = std::min(n, contiguous);
        t.sink->consume(at, off, first);
        if (n > first) t.sink->consume(ring.view(used + first, &contiguous), off + first, n - first);
      } else {
        ring.get(used, t.buf + off, n);
      }
      used += n;
      t.done += n;
      if (t.done < end && used >= publish_bytes_) {
        flush();
        avail = ring.available();
      }
    }
    if (t.done < end) break;  // the rest is not there yet
    used += padded(t.len) - t.len;
    host_.complete(t);
    recvs_.pop_front();
    if (used >= publish_bytes_) {
      flush();
      avail = ring.available();
    }
  }
  if (used) flush();  // no new look at the producer here: the loop sleeps on the last position seen
}

void SharedMemoryLink::woke() {
  if (!sleeping_) return;
  sleeping_ = false;
  if (rings_) rings_->clear_sleep_flags();
}

bool SharedMemoryLink::spin_once() {
  bool work = false;
  if (!sends_.empty()) {
    work = true;
    if (rings_->tail_moved()) send_some();
  }
  if (!recvs_.empty()) {
    work = true;
    if (rings_->head_moved()) recv_some();
  }
  return work;
}

bool SharedMemoryLink::prepare_sleep() {
  if (idle()) return true;
  sleeping_ = true;
  return (recvs_.empty() || rings_->sleep_until_readable()) && (sends_.empty() || rings_->sleep_until_writable());
}

short SharedMemoryLink::poll_events() {
  if (idle()) return 0;
  if (closed_)
    host_.fail(ErrorKind::PEER_LOST, "connection closed by " + describe() + " during " + front_text(), peer_);
  return POLLIN;  // doorbells (and the peer's death) arrive on the socket
}

void SharedMemoryLink::on_poll(short revents) {
  drain_doorbell();
  if (!sends_.empty()) send_some();
  if (!recvs_.empty()) recv_some();
}

void SharedMemoryLink::close() {
  fd_.reset();
  rings_.reset();
  PeerLink::close();
}

}  // namespace phv
