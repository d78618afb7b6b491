// Transport over a full mesh of TCP connections (one per pair of ranks, set up by tcp_mesh.h).
//
// Each peer is a link object (link.h) of its kind: a TCP connection framing messages itself
// (socket_link.h), shared-memory rings for peers on the same host when options.shm_enable
// (shared_memory_link.h; their TCP connection then only carries wake-up doorbells and tells us when the
// peer dies), or this rank itself (self_link.h). For ring links recv_in_place() is true: post_recv_sink()
// hands the payload to the caller where it lies in the ring (zero-copy receive).
//
// One loop in progress() drives every link: it moves what can move, spins briefly over the rings of links
// with work, lets the links announce the sleep, and sleeps in one poll() over every link's socket.
//
// Waiting: poll() sleeps at most until the deadline, the next stall warning or limit of the calling
// thread's TransferWatch, and an interrupt slice when the thread has an interrupt check (interrupt.h).
//
// Failure: the first error (TIMEOUT, PEER_LOST, INTERRUPTED, a bad header) drops every pending request, closes
// every connection (so peers fail fast instead of waiting for their deadline) and is re-thrown by
// every later call. Not thread-safe: one thread drives a transport at a time.
#pragma once
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "rendezvous/store.h"
#include "transport/cross_memory.h"
#include "transport/link.h"
#include "transport/self_link.h"
#include "transport/tcp_mesh.h"
#include "transport/transfer_watch.h"
#include "transport/transport.h"

namespace phv {

class TcpTransport : public Transport, private LinkHost {
 public:
  // Collective: builds the mesh through the store (see MeshOptions).
  TcpTransport(Store& store, const MeshOptions& options);
  ~TcpTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  RequestId post_send(int peer, const void* buf, size_t len) override;
  RequestId post_recv(int peer, void* buf, size_t len) override;
  bool recv_in_place(int peer) const override { return in_place_ && uses_shm(peer); }
  RequestId post_recv_sink(int peer, size_t len, size_t grain, RecvSink* sink) override;
  bool shared_memory_everywhere() const override { return all_local_; }
  size_t direct_bytes() const override { return direct_bytes_in(wide_direct_); }
  void set_wide_direct(bool wide) override { wide_direct_ = wide; }
  bool wide_direct() const override { return wide_direct_; }
  void set_single_copy_allreduce(bool on) override { single_copy_allreduce_ = on; }
  bool single_copy_allreduce() const override { return single_copy_allreduce_; }
  size_t direct_bytes_in(bool wide) const override {
    return wide ? std::min(direct_.direct_bytes, kWideDirectBytes) : direct_.direct_bytes;
  }
  size_t broadcast_direct_bytes() const override { return direct_.broadcast_direct_bytes; }
  void read_direct(int peer, uint64_t addr, void* dst, size_t len, const char* op) override;
  void write_direct(int peer, uint64_t addr, const void* src, size_t len, const char* op) override;
  void start_posted() override;
  void set_wait_spin_us(long us) override { wait_spin_us_ = us; }
  void progress(std::vector<RequestId>& completed, Deadline deadline) override;
  size_t pending() const override { return pending_; }
  std::string describe_peer(int peer) const override;

  // Closes every connection; later calls throw SHUTDOWN. Idempotent.
  void close();
  size_t rejected_connections() const { return rejected_.load(); }
  bool uses_shm(int peer) const { return peer >= 0 && peer < size_ && links_[peer]->shares_memory(); }

 private:
  // LinkHost
  void complete(const Transfer& t) override;
  void moved() override { ++moves_; }
  [[noreturn]] void fail(ErrorKind kind, const std::string& message, int peer = kNoPeer) override;

  Transfer new_transfer(char* buf, size_t len, RecvSink* sink, size_t grain);
  bool spin();  // briefly polls the rings of links with work; true if something completed
  bool prepare_sleep();
  // Between the sleeps of one progress() call (tcp_transport_wait.cc): the interrupt check, the stall
  // watch of the calling thread (transfer_watch.h), and how long poll() may sleep.
  struct Idle {
    const TransferWatch* watch = nullptr;
    uint64_t moves_seen = 0;
    Clock::time_point since{}, next_warn{};  // since: the last movement (zero before the first sleep)
  };
  void begin_idle(Idle& idle) const;
  int before_sleep(Idle& idle, Deadline deadline);  // fails when interrupted or stalled past the limit
  std::string waiting_for() const;                  // the pending requests (up to 4), for messages
  int first_waiting_peer() const;                   // the peer waiting_for() names first; kNoPeer if none
  void check_usable(int peer, const char* what) const;
  // read_direct (write false) or write_direct (true): the checks, the copy, and the failure of the whole
  // transport when it fails.
  void copy_direct(int peer, uint64_t addr, void* mine, size_t len, bool write, const char* op);

  int rank_, size_;
  int spin_us_;
  long wait_spin_us_ = 0;  // set_wait_spin_us()
  long pause_ns_;   // spin(): spin with the pause instruction this long, then yield on every turn
  bool in_place_;
  bool all_local_ = false;  // setup_shm_links(): every rank on this host with shared memory enabled
  CrossMemory direct_;      // setup_cross_memory(): the agreed single-copy threshold and the peers' pids
  bool wide_direct_ = false;  // set_wide_direct(): the negotiation's copy-path mode
  bool single_copy_allreduce_ = false;  // set_single_copy_allreduce(): the negotiation's allreduce mode
  std::vector<std::unique_ptr<Link>> links_;  // index: peer rank
  SelfLink* self_ = nullptr;                  // links_[rank_]
  std::vector<RequestId> done_;  // completed, not yet reported by progress()
  size_t pending_ = 0;
  uint64_t moves_ = 0;  // system calls and ring publishes/releases that moved bytes (stall watch)
  RequestId next_id_ = 1;
  std::vector<struct pollfd> pollfds_;
  std::vector<Link*> poll_links_;  // the link of each entry of pollfds_
  std::unique_ptr<HvdError> failure_;
  std::atomic<size_t> rejected_{0};
};

}  // namespace phv
