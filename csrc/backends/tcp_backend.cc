// TcpBackend: store client + TCP full mesh + the world Comm (backends/backend.h).
// shm_enable: peers on the same host exchange data through shared-memory rings (transport/shm_transport.h).
#include <algorithm>

#include "backends/backend.h"
#include "common/error.h"
#include "rendezvous/memory_store.h"
#include "rendezvous/tcp_store.h"
#include "transport/tcp_transport.h"

namespace phv {

TcpBackend::TcpBackend(const ConnectOptions& options) : options_(options) {
  PHV_CHECK_ARG(options.size >= 1, "world size must be >= 1, got ", options.size);
  PHV_CHECK_ARG(options.rank >= 0 && options.rank < options.size, "rank ", options.rank, " is not in [0, ",
                options.size, ")");
  PHV_CHECK_ARG(options.local_size >= 1 && options.local_rank >= 0 && options.local_rank < options.local_size,
                "local rank ", options.local_rank, " is not in [0, ", options.local_size, ")");
  PHV_CHECK_ARG(options.connect_timeout_s > 0, "connect_timeout_s must be > 0");
  if (options.size == 1 && options.store_port == 0) {
    store_ = std::make_unique<MemoryStore>();  // a single process needs no rendezvous
  } else {
    PHV_CHECK_ARG(options.store_port > 0 && options.store_port < 65536, "rank ", options.rank,
                  ": store_port must be in [1, 65535], got ", options.store_port);
    store_ = std::make_unique<TcpStoreClient>(options.store_host, options.store_port, options.secret,
                                              options.connect_timeout_s);
  }
  MeshOptions mesh;
  mesh.rank = options.rank;
  mesh.size = options.size;
  mesh.bind_host = options.bind_host;
  mesh.secret = options.secret;
  mesh.store_prefix = options.store_prefix;
  mesh.connect_timeout_s = options.connect_timeout_s;
  mesh.shm_enable = options.shm_enable;
  mesh.shm_spin_us = options.shm_spin_us;
  mesh.shm_yield = options.shm_spin_yield;
  mesh.shm_ring_bytes = options.shm_ring_bytes;
  mesh.shm_in_place = options.shm_zero_copy;
  mesh.shm_direct_bytes = options.shm_direct_bytes;
  mesh.shm_direct_refuse_probe = options.shm_direct_refuse_probe;
  transport_ = std::make_unique<TcpTransport>(*store_, mesh);
  world_.transport = transport_.get();
  world_.members.resize(options.size);
  for (int r = 0; r < options.size; ++r) world_.members[r] = r;
  world_.my_index = options.rank;
}

TcpBackend::~TcpBackend() {
  transport_.reset();  // closes every connection before the store goes away
  store_.reset();
}

Comm TcpBackend::make_comm(const std::vector<int>& global_ranks) const {
  PHV_CHECK_ARG(!global_ranks.empty(), "a process set needs at least one rank");
  Comm comm;
  comm.transport = transport_.get();
  comm.members = global_ranks;
  comm.my_index = -1;
  for (size_t i = 0; i < global_ranks.size(); ++i) {
    int r = global_ranks[i];
    PHV_CHECK_ARG(r >= 0 && r < options_.size, "rank ", r, " in a process set is not in [0, ", options_.size, ")");
    PHV_CHECK_ARG(i == 0 || global_ranks[i - 1] < r, "process set ranks must be ascending and unique");
    if (r == options_.rank) comm.my_index = static_cast<int>(i);
  }
  PHV_CHECK_ARG(comm.my_index >= 0, "rank ", options_.rank, " is not a member of the process set");
  return comm;
}

}  // namespace phv
