// Shared-memory links between two ranks of one host, used by TcpTransport in place of the socket's
// data path for peers on the same host (ConnectOptions::shm_enable).
//
// A link is one POSIX shared-memory mapping holding two single-producer single-consumer byte rings, one
// per direction. The rings carry exactly the byte stream the socket would (16-byte header + payload per
// message), so the transport's framing and checks stay the same; a message costs one memcpy in and one
// memcpy out, with no system call while both sides are busy.
//
// Waiting: a side that finds its ring empty (or full) spins briefly, then raises a "sleeping" flag in
// the ring and sleeps in the transport's poll() on the pair's TCP connection; the other side, after
// moving bytes, sees the flag and sends one doorbell byte over that connection. So one poll() waits for
// sockets and rings together, and a peer that dies is still noticed at once (its socket closes).
// Flag and ring indices use sequentially consistent operations: either the sleeper sees the new bytes
// or the mover sees the flag (no lost wake-up).
//
// Setup (setup_shm_links) runs over the already authenticated TCP connections: host identities are
// exchanged, the lower rank of each same-host pair creates the mapping (mode 0600, random name), the
// higher rank maps it and acknowledges, and the creator unlinks the name at once, so nothing is left in
// /dev/shm even if a process dies later. A pair where anything fails keeps using TCP.
#pragma once
#include <sys/uio.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/types.h"

namespace phv {

constexpr size_t kShmRingBytes = size_t(2) << 20;  // per direction; a power of two

class ShmLink {
 public:
  struct Ring;  // one direction, in shared memory (shm_transport.cc)
  ShmLink(void* base, size_t map_bytes, bool creator);  // takes ownership of the mapping
  ~ShmLink();
  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;

  // Copies as many bytes of iov as fit into the outgoing ring / are available in the incoming ring.
  size_t write(const iovec* iov, int n);
  size_t read(const iovec* iov, int n);
  bool can_write() const;  // the outgoing ring has free space
  bool can_read() const;   // the incoming ring has data

  // Before sleeping: raise my flag; false (flag lowered again) if the condition already changed.
  bool sleep_until_readable();
  bool sleep_until_writable();
  void clear_sleep_flags();
  // After moving bytes: true if the peer sleeps waiting for that (its flag is lowered): ring its doorbell.
  bool peer_wants_data();   // after write()
  bool peer_wants_space();  // after read()

 private:
  Ring* out_;
  Ring* in_;
  void* base_;
  size_t map_bytes_;
};

// Host identity: hostname, boot id and the identity of /dev/shm (ranks that see the same one can share).
std::string shm_host_id();

// Collective over every connected pair (fds[p] valid for p != rank). Returns one link per peer, null
// where the pair uses TCP. Small fixed-size messages only; throws HvdError on a broken connection.
std::vector<std::unique_ptr<ShmLink>> setup_shm_links(int rank, const std::vector<int>& fds,
                                                      const std::vector<std::string>& addrs, bool enable,
                                                      Deadline deadline);

}  // namespace phv
