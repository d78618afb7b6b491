// A connected group of ranks: the store client, the transport (TCP between hosts, shared memory between
// local ranks when enabled) and the global Comm. Collectives on host buffers run over its transport
// through HostBackend (host_backend.h), the engine's executor's backend for host memory.
// Used by the engine's background thread, and directly (no engine) by _core.Communicator for tests and
// the "raw core" benchmarks.
#pragma once
#include <memory>
#include <string>
#include <vector>
#include "algorithms/algorithms.h"
#include "algorithms/tuning.h"
#include "rendezvous/store.h"
#include "transport/cross_memory.h"
#include "transport/transport.h"

namespace phv {

struct ConnectOptions {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string store_host = "127.0.0.1";  // rendezvous store (hosted by the launcher or rank 0)
  int store_port = 0;
  std::string secret;                    // per-job secret: proves membership in every handshake
  std::string bind_host = "127.0.0.1";   // address our listening socket binds to (never 0.0.0.0 unless asked)
  std::string store_prefix = "phv";      // key namespace, so several groups can share one store
  double connect_timeout_s = 60;         // bootstrap: store waits and connection set-up
  bool shm_enable = true;                // shared memory between ranks of one host
  int shm_spin_us = -1;                  // shm: poll the rings this long before sleeping (-1: automatic)
  int shm_spin_yield = -1;               // shm: yield the CPU while polling: 1 always, 0 never, -1 after 2 us
  size_t shm_ring_bytes = 0;             // shm: ring size per direction (0: 1 MiB; a power of two >= 64 KiB)
  bool shm_zero_copy = true;             // shm: reduce straight from the ring (false: copy out first)
  size_t shm_direct_bytes = kDirectBytesAuto;  // shm: single copies from this size up (0: off; cross_memory.h)
  bool shm_direct_refuse_probe = false;  // shm, a test hook: the single-copy probe reports refused
  Tuning tuning;
};

class TcpBackend {
 public:
  // Collective: every rank of the job constructs one with the same store_prefix.
  explicit TcpBackend(const ConnectOptions& options);
  ~TcpBackend();

  const Comm& world() const { return world_; }
  Comm make_comm(const std::vector<int>& global_ranks) const;  // members ascending; must include me
  Transport& transport() { return *transport_; }
  Store& store() { return *store_; }
  const Tuning& tuning() const { return options_.tuning; }
  const ConnectOptions& options() const { return options_; }

 private:
  ConnectOptions options_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Transport> transport_;
  Comm world_;
};

}  // namespace phv
