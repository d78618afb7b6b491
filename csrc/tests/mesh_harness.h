// A whole job's transports inside one test process: make_mesh connects n TcpTransports, one per rank,
// each from its own thread (their constructors rendezvous through the store and connect to each other,
// so they must run at the same time). `options(r)` gives rank r's MeshOptions; mesh_options is the
// common start (rank, size, secret, store prefix, a 10 s connect timeout, shared memory on or off).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/store.h"
#include "transport/tcp_transport.h"

namespace phv {
namespace testing {

inline MeshOptions mesh_options(int rank, int size, const std::string& prefix, bool shm,
                                const std::string& secret = "job-secret") {
  MeshOptions o;
  o.rank = rank;
  o.size = size;
  o.secret = secret;
  o.store_prefix = prefix;
  o.connect_timeout_s = 10;
  o.shm_enable = shm;
  return o;
}

inline std::vector<std::unique_ptr<TcpTransport>> make_mesh(Store& store, int n,
                                                            const std::function<MeshOptions(int)>& options) {
  std::vector<std::unique_ptr<TcpTransport>> out(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] { out[static_cast<size_t>(r)] = std::make_unique<TcpTransport>(store, options(r)); });
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace testing
}  // namespace phv
