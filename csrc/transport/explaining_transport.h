// A Transport that adds an explanation to the first failure of the transport it wraps.
//
// A transport error names only the peer whose connection broke, which is often an echo of a failure
// elsewhere. The layer that can find the cause (the engine, through its failure board) passes it in as
// an Explainer; the transport itself knows nothing about how the explanation is found.
#pragma once
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "transport/transport.h"

namespace phv {

// Given the first failure (its text and its peer()), returns text to append to it ("" for nothing).
// It may block for a while (it may ask other ranks) and may throw; a throw just adds nothing.
using Explainer = std::function<std::string(const HvdError& error)>;

// Forwards everything to `inner` and, the first time a call throws an error other than SHUTDOWN or
// INVALID_ARGUMENT, re-throws it with explain(error) appended. Later calls that re-throw the same failure
// get the same explained text, so every message of a stopped engine quotes one cause.
class ExplainingTransport : public Transport {
 public:
  ExplainingTransport(Transport& inner, Explainer explain) : inner_(inner), explain_(std::move(explain)) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  RequestId post_send(int peer, const void* buf, size_t len) override;
  RequestId post_recv(int peer, void* buf, size_t len) override;
  // The zero-copy receive and the shared-memory fact must pass through too, or every collective the
  // engine runs would take the copying path and the TCP segment sizes.
  bool recv_in_place(int peer) const override { return inner_.recv_in_place(peer); }
  RequestId post_recv_sink(int peer, size_t len, size_t grain, RecvSink* sink) override;
  bool shared_memory_everywhere() const override { return inner_.shared_memory_everywhere(); }
  // So must the single-copy reads, or the engine's large collectives would keep the two-copy rings.
  size_t direct_bytes() const override { return inner_.direct_bytes(); }
  size_t broadcast_direct_bytes() const override { return inner_.broadcast_direct_bytes(); }
  void set_wide_direct(bool wide) override { inner_.set_wide_direct(wide); }
  bool wide_direct() const override { return inner_.wide_direct(); }
  void set_single_copy_allreduce(bool on) override { inner_.set_single_copy_allreduce(on); }
  bool single_copy_allreduce() const override { return inner_.single_copy_allreduce(); }
  size_t direct_bytes_in(bool wide) const override { return inner_.direct_bytes_in(wide); }
  void read_direct(int peer, uint64_t addr, void* dst, size_t len, const char* op) override;
  void write_direct(int peer, uint64_t addr, const void* src, size_t len, const char* op) override;
  void start_posted() override;
  void set_wait_spin_us(long us) override { inner_.set_wait_spin_us(us); }
  void progress(std::vector<RequestId>& completed, Deadline deadline) override;
  size_t pending() const override { return inner_.pending(); }
  std::string describe_peer(int peer) const override { return inner_.describe_peer(peer); }

 private:
  [[noreturn]] void rethrow(const HvdError& e);

  Transport& inner_;
  Explainer explain_;
  std::mutex mu_;
  std::string original_, explained_;  // the first failure, as thrown and as explained
};

}  // namespace phv
