// Transport over a full mesh of TCP connections (one per pair of ranks, set up by tcp_mesh.h).
//
// Data path: every message is a 16-byte header {magic "PHVM", sequence u32, length u64} followed by
// the payload, written straight from / read straight into the caller's buffer with writev/readv (the
// header and payload of several queued messages go in one system call). The header is checked
// against the posted receive (length and per-pair sequence number); nothing is ever allocated from a
// length read off the network. One poll loop in progress() drives all sends and receives together;
// before it sleeps, SO_RCVLOWAT makes a socket wake it only once a useful amount has arrived (set_lowat).
//
// Peers on the same host (options.shm_enable) exchange the same messages through shared-memory rings
// instead (shm_transport.h; the layout and the waiting are in tcp_transport_shm.cc); their TCP connection
// then only carries wake-up doorbells and tells us when the peer dies. For them recv_in_place() is true:
// post_recv_sink() hands the payload to the caller where it lies in the ring (zero-copy receive).
//
// Waiting: poll() sleeps at most until the deadline, the next stall warning or limit of the calling
// thread's TransferWatch, and an interrupt slice when the thread has an interrupt check (interrupt.h).
//
// Failure: the first error (TIMEOUT, PEER_LOST, INTERRUPTED, a bad header) drops every pending request, closes
// every connection (so peers fail fast instead of waiting for their deadline) and is re-thrown by
// every later call. Not thread-safe: one thread drives a transport at a time.
#pragma once
#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "rendezvous/socket.h"
#include "rendezvous/store.h"
#include "transport/shm_transport.h"
#include "transport/tcp_mesh.h"
#include "transport/transfer_watch.h"
#include "transport/transport.h"

namespace phv {

class TcpTransport : public Transport {
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
  void progress(std::vector<RequestId>& completed, Deadline deadline) override;
  size_t pending() const override { return pending_; }
  std::string describe_peer(int peer) const override;

  // Closes every connection; later calls throw SHUTDOWN. Idempotent.
  void close();
  size_t rejected_connections() const { return rejected_.load(); }
  bool uses_shm(int peer) const { return peer >= 0 && peer < size_ && peers_[peer].shm != nullptr; }

 private:
  static constexpr size_t kHeaderBytes = 16;
  struct Op {
    RequestId id;
    char* buf;
    size_t len;
    size_t done;  // bytes of header + payload transferred (shm: ring bytes of the message, padding included)
    uint32_t seq;
    RecvSink* sink;  // zero-copy receive (shm peers only); then buf is null
    size_t grain;    // sink pieces are multiples of this (but the last)
    uint8_t header[kHeaderBytes];
    Clock::time_point posted;
  };
  struct Peer {
    Fd fd;
    std::string addr;
    std::deque<Op> sends, recvs;
    uint32_t send_seq = 0, recv_seq = 0;
    std::unique_ptr<ShmLink> shm;  // null: the data goes over fd
    bool sleeping = false;         // raised shm sleep flags before the last poll()
    bool closed = false;           // shm peer: its socket reached EOF (bytes may remain in the ring)
    int lowat = 1;                 // SO_RCVLOWAT currently set on fd (set_lowat)
  };

  void set_lowat(int peer);  // before poll(): SO_RCVLOWAT for the head receive of a TCP peer
  bool send_some(int peer);  // non-blocking; true if the socket would block with data left
  bool recv_some(int peer);
  void shm_send_some(int peer);  // send_some/recv_some for a shared-memory peer
  void shm_recv_some(int peer);
  void ring_doorbell(int peer);
  void drain_doorbell(int peer);
  bool spin_shm();          // briefly polls the rings of shm peers with work; true if something completed
  bool prepare_shm_sleep(); // raises sleep flags; false if a ring became ready meanwhile
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
  void check_header(int peer, const Op& op);
  void complete(Op& op);
  // Closes everything and throws "rank <me>: <message>"; `peer` is the peer the failure is about.
  [[noreturn]] void fail(ErrorKind kind, const std::string& message, int peer = kNoPeer);
  void check_usable(int peer, const char* what) const;
  void match_self();
  std::string op_text(int peer, const Op& op, bool send) const;

  int rank_, size_;
  int spin_us_;
  long pause_ns_;   // spin_shm(): spin with the pause instruction this long, then yield on every turn
  bool in_place_;
  size_t lowat_max_;        // set_lowat(): the most a poll() waits for (0: off)
  size_t publish_bytes_;
  bool all_local_ = false;  // setup_shm_links(): every rank on this host with shared memory enabled
  std::vector<Peer> peers_;
  std::deque<Op> self_sends_, self_recvs_;
  std::vector<RequestId> done_;  // completed, not yet reported by progress()
  size_t pending_ = 0;
  uint64_t moves_ = 0;  // system calls and ring publishes/releases that moved bytes (stall watch)
  RequestId next_id_ = 1;
  std::vector<struct pollfd> pollfds_;
  std::vector<int> poll_peers_;
  std::unique_ptr<HvdError> failure_;
  std::atomic<size_t> rejected_{0};
};

}  // namespace phv
