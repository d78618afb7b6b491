// Transport between ranks that are threads of one process -- for unit tests of the algorithms only.
//
// Semantics are deliberately strict (rendezvous): a send completes only when the matching receive has
// been posted and the bytes copied, so an algorithm that would deadlock over TCP once messages outgrow
// the socket buffers deadlocks (and times out) here too. Messages between one ordered pair match in
// posting order; a length mismatch fails both ends with HvdError (INTERNAL), an expired deadline with
// TIMEOUT. All ranks share one mutex/condition variable (simplicity over speed).
//
// Zero-copy receives (in_place worlds): a receive posted with post_recv_sink is matched like any other,
// but its send stays pending until the receiver's own progress() has handed the sender's bytes to the
// sink, in pieces of a few grains (so the tests see split pieces, as from a shared-memory ring).
#pragma once
#include <memory>
#include <vector>

#include "transport/transport.h"

namespace phv {

struct MemoryWorld;  // shared mailboxes, defined in memory_transport.cc

class MemoryTransport : public Transport {
 public:
  MemoryTransport(std::shared_ptr<MemoryWorld> world, int rank);
  ~MemoryTransport() override;

  int rank() const override { return rank_; }
  int size() const override;
  RequestId post_send(int peer, const void* buf, size_t len) override;
  RequestId post_recv(int peer, void* buf, size_t len) override;
  bool recv_in_place(int peer) const override;
  RequestId post_recv_sink(int peer, size_t len, size_t grain, RecvSink* sink) override;
  bool shared_memory_everywhere() const override;  // an in_place world (threads share memory)
  void progress(std::vector<RequestId>& completed, Deadline deadline) override;
  size_t pending() const override;
  std::string describe_peer(int peer) const override;
  // Kept only so that tests can see the negotiation's modes (no single copies here).
  void set_wide_direct(bool wide) override { wide_ = wide; }
  bool wide_direct() const override { return wide_; }
  void set_single_copy_allreduce(bool on) override { single_copy_allreduce_ = on; }
  bool single_copy_allreduce() const override { return single_copy_allreduce_; }

  // Makes every rank's next progress() fail with PEER_LOST (a test whose thread died calls this so the
  // others stop waiting instead of running into their deadlines).
  void abort_world(const std::string& why);

 private:
  std::shared_ptr<MemoryWorld> world_;
  int rank_;
  bool wide_ = false;
  bool single_copy_allreduce_ = false;
};

// One transport per rank of a world of `size` threads.
// in_place: recv_in_place() is true for every peer (zero-copy receives through RecvSink).
std::vector<std::unique_ptr<Transport>> make_memory_transports(int size, bool in_place = false);

}  // namespace phv
