// Shared-memory links between two ranks of one host, used by TcpTransport in place of the socket's
// data path for peers on the same host (ConnectOptions::shm_enable).
//
// A link is one POSIX shared-memory mapping holding two single-producer single-consumer byte rings, one
// per direction. SharedMemoryLink lays messages out in them (shared_memory_link.h): a 64-byte header slot,
// the payload, padding to a multiple of 64, so every payload starts 64-byte aligned and a payload split
// by the ring's end splits at a multiple of 64 bytes (never inside an element). A message costs one
// memcpy into the ring; the receiver either copies it out or -- zero-copy receive, Transport::RecvSink --
// reduces straight from the ring; no system call while both sides are busy.
//
// Positions: head = bytes ever published by the producer, tail = bytes ever released by the consumer;
// head - tail is the fill level; a position maps to data[pos & (ring_bytes - 1)].
//
// Waiting: a side that cannot progress spins briefly, then raises a "sleeping" flag in the ring and sleeps
// in the transport's poll() on the pair's TCP connection; the other side, after publishing or releasing
// bytes, sees the flag and sends one doorbell byte over that connection. So one poll() waits for sockets
// and rings together, and a peer that dies is still noticed at once (its socket closes). The sleeper
// sleeps only if the position it waits on is still the one it last saw; flag and positions use
// sequentially consistent operations, so either the sleeper sees the move or the mover sees the flag
// (no lost wake-up).
//
// Setup (setup_shm_links) runs over the already authenticated TCP connections: host identities are
// exchanged, the lower rank of each same-host pair creates the mapping (mode 0600, random name), the
// higher rank maps it and acknowledges, and the creator unlinks the name at once, so nothing is left in
// /dev/shm even if a process dies later. A pair where anything fails keeps using TCP.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/types.h"

namespace phv {

constexpr size_t kShmDefaultRingBytes = size_t(1) << 20;  // per direction (tuned: RESULTS.md)
constexpr size_t kShmAlign = 64;                          // message slots start at multiples of this
// The producer publishes (and the consumer releases) at least every this many bytes inside a long
// message, so the other side starts reading (reusing) a segment's first bytes while the rest is still
// being copied (reduced): a pipeline inside each message, and the bytes are read while still in cache.
constexpr size_t kShmPublishBytes = size_t(64) << 10;

class ShmLink {
 public:
  struct Ring;  // control block of one direction, in shared memory (shm_transport.cc)
  // Takes ownership of the mapping (ring_bytes: a power of two, data size of each direction).
  // The two ends of a link: the creator (the lower rank) sends on ring 0, the peer that attached on ring 1.
  enum class End { CREATOR, ATTACHED };
  ShmLink(void* base, size_t map_bytes, size_t ring_bytes, End end);
  ~ShmLink();
  ShmLink(const ShmLink&) = delete;
  ShmLink& operator=(const ShmLink&) = delete;

  size_t ring_bytes() const { return ring_bytes_; }

  // Producer (outgoing ring). free_space() also records the consumer position it saw (for sleeping).
  size_t free_space();
  void put(size_t at, const void* src, size_t len);  // copy to head + at (not yet visible)
  void publish(size_t n);                            // head += n: the consumer may read them

  // Consumer (incoming ring). available() also records the producer position it saw.
  size_t available();
  void get(size_t at, void* dst, size_t len) const;          // copy from tail + at
  const char* view(size_t at, size_t* contiguous) const;     // pointer to tail + at, bytes until the wrap
  void release(size_t n);                                    // tail += n: the producer may reuse them

  // Cheap checks for spinning: has the other side moved since free_space()/available() last looked?
  bool tail_moved() const;
  bool head_moved() const;

  // Before sleeping: raise my flag; false (flag lowered again) if the position already moved.
  bool sleep_until_readable();
  bool sleep_until_writable();
  void clear_sleep_flags();
  // After publish()/release(): true if the peer sleeps waiting for that (its flag is lowered): ring its
  // doorbell.
  bool peer_wants_data();
  bool peer_wants_space();

 private:
  Ring* out_;
  Ring* in_;
  char* out_data_;
  char* in_data_;
  void* base_;
  size_t map_bytes_;
  size_t ring_bytes_;
  uint64_t head_ = 0;       // my producer position (only I store out_->head)
  uint64_t tail_ = 0;       // my consumer position (only I store in_->tail)
  uint64_t seen_tail_ = 0;  // out_->tail when free_space() last looked
  uint64_t seen_head_ = 0;  // in_->head when available() last looked
};

// Host identity: hostname, boot id and the identity of /dev/shm (ranks that see the same one can share).
std::string shm_host_id();

// Collective over every connected pair (fds[p] valid for p != rank). Returns one link per peer, null
// where the pair uses TCP. Small fixed-size messages only; throws HvdError on a broken connection.
// ring_bytes: the data size per direction of the links this rank creates (rounded up to a power of two
// >= 64 KiB); a link's size is decided by its creator (the lower rank) and read back by its peer.
// all_local (optional) is set to whether every rank enabled shared memory and runs on this host -- the
// same answer on every rank (host identity is an equivalence), even where a pair's mapping later fails
// and that pair falls back to TCP.
std::vector<std::unique_ptr<ShmLink>> setup_shm_links(int rank, const std::vector<int>& fds,
                                                      const std::vector<std::string>& addrs, bool enable,
                                                      size_t ring_bytes, Deadline deadline, bool* all_local = nullptr);

}  // namespace phv
