// Shared by the engine tests: p ranks as threads, each with its own EngineCore over MemoryTransport,
// and a barrier between them. Checked with tests/check.h.
#pragma once
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_core.h"
#include "tests/check.h"
#include "transport/memory_transport.h"

namespace phv {
namespace testing {

// A reusable barrier for the rank threads (C++17 has none): arrive() returns once all n have arrived.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    int gen = gen_;
    if (++count_ == n_) {
      count_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return gen != gen_; });
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, count_ = 0, gen_ = 0;
};

// Runs body(engine, rank, barrier) on p threads, then shuts every engine down. An exception on one
// rank is a failed check and aborts the world, so the others fail fast instead of at their timeouts.
inline void run_engines(int p, const std::string& what, const EngineOptions& options,
                        const std::function<void(EngineCore&, int, Barrier&)>& body) {
  auto transports = make_memory_transports(p);
  Barrier barrier(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      try {
        EngineCore core(*transports[static_cast<size_t>(r)], Tuning(), options);
        body(core, r, barrier);
        barrier.arrive();  // nobody shuts down while another rank still has work
        core.shutdown();
      } catch (const std::exception& e) {
        CHECK(false, "[%s p=%d rank %d] exception: %s", what.c_str(), p, r, e.what());
        static_cast<MemoryTransport*>(transports[static_cast<size_t>(r)].get())->abort_world(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace testing
}  // namespace phv
