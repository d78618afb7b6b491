// Bootstrap of the TCP full mesh: every rank listens on bind_host, publishes "host:port" in the store
// under <prefix>/tcp/addr/<rank>, connects to every higher rank and accepts every lower one. Each
// connection proves the job secret (handshake.h, context "<prefix>") and states its rank; accepted
// strangers are logged and closed without disturbing the set-up. The listener is closed once the mesh
// is complete, so nothing keeps listening while the job runs.
#pragma once
#include <atomic>
#include <string>
#include <vector>

#include "common/types.h"
#include "rendezvous/socket.h"
#include "rendezvous/store.h"

namespace phv {

struct MeshOptions {
  int rank = 0;
  int size = 1;
  std::string bind_host = "127.0.0.1";
  std::string secret;
  std::string store_prefix = "phv";
  double connect_timeout_s = 60;
  int socket_buffer_bytes = kDefaultSocketBufferBytes;
  bool shm_enable = false;  // TcpTransport: shared-memory rings for peers on this host (shm_transport.h)
  int shm_spin_us = -1;     // TcpTransport: how long to poll the rings before sleeping in poll();
                            // -1: a default that depends on whether the local ranks fit on our CPUs
  int shm_yield = -1;       // TcpTransport: while spinning, 1: sched_yield() on every turn, 0: never (pause
                            // instruction only), -1: pause for the first 2 us, then yield (yield from the
                            // start when more ranks share memory than we have CPUs)
  size_t shm_ring_bytes = 0;  // TcpTransport: ring size per direction of the links we create (0: default)
  bool shm_in_place = true;   // TcpTransport: offer zero-copy receives (recv_in_place) on shm links
  size_t shm_publish_bytes = 0;  // TcpTransport: publish/release granularity inside a message (0: default)
  size_t shm_direct_bytes = 0;       // TcpTransport: single-copy reads from this size up (cross_memory.h; 0: off)
  bool shm_direct_refuse_probe = false;  // TcpTransport, a test hook: the single-copy probe reports refused
  size_t recv_lowat_bytes = size_t(256) << 10;  // TcpTransport: SO_RCVLOWAT cap while sleeping (0: off)
};

struct MeshConnection {
  Fd fd;             // invalid for my own rank
  std::string addr;  // the peer's "host:port" as seen from here
};

// Collective over all ranks of options.size. Returns one connection per rank (index = rank).
// `rejected` (optional) counts strangers turned away. Throws HvdError naming the ranks not reached.
std::vector<MeshConnection> connect_mesh(Store& store, const MeshOptions& options,
                                         std::atomic<size_t>* rejected = nullptr);

}  // namespace phv
