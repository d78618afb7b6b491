// EngineCore::run_sync, the synchronous fast path (enqueue + wait on the caller's thread, the background
// thread not woken): exact sums over many rounds (the response cache and the inline reduce of small
// cached tensors included), mixed with asynchronous requests of other ranks, a shape mismatch that fails
// on every rank and leaves the engine usable, a duplicate name refused before communication, and a
// timeout when one rank never submits. Ranks are threads over MemoryTransport; every wait is bounded.
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine_core.h"
#include "transport/memory_transport.h"

using namespace phv;

namespace {
std::atomic<int> failures{0};
std::atomic<long> checks{0};
std::mutex print_mu;
#define CHECK(cond, ...)                                          \
  do {                                                            \
    ++checks;                                                     \
    if (!(cond)) {                                                \
      failures++;                                                 \
      std::lock_guard<std::mutex> lk(print_mu);                   \
      std::printf("FAIL %s:%d: %s  ", __FILE__, __LINE__, #cond); \
      std::printf(__VA_ARGS__);                                   \
      std::printf("\n");                                          \
    }                                                             \
  } while (0)

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

void run_engines(int p, const std::string& what, const std::function<void(EngineCore&, int, Barrier&)>& body) {
  EngineOptions o;
  o.timeout_s = 20;
  o.stall_check_disable = true;
  auto transports = make_memory_transports(p);
  Barrier barrier(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      try {
        EngineCore core(*transports[static_cast<size_t>(r)], Tuning(), o);
        body(core, r, barrier);
        barrier.arrive();
        core.shutdown();
      } catch (const std::exception& e) {
        CHECK(false, "[%s p=%d rank %d] exception: %s", what.c_str(), p, r, e.what());
        static_cast<MemoryTransport*>(transports[static_cast<size_t>(r)].get())->abort_world(e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
}

Request req(const std::string& name, const std::vector<float>& in, std::vector<float>& out) {
  Request q;
  q.name = name;
  q.shape = {static_cast<int64_t>(in.size())};
  q.input = in.data();
  q.output = out.data();
  return q;
}

void test_sums(int p) {
  run_engines(p, "sums", [&](EngineCore& e, int r, Barrier&) {
    for (int i = 0; i < 200; ++i) {
      // 1 float (cached, reduced inline by the coordinator) and 1000 floats (the collective proper).
      for (size_t n : {size_t(1), size_t(1000)}) {
        std::vector<float> in(n, static_cast<float>(r + i)), out(n, -1.f);
        e.run_sync(req("s" + std::to_string(n), in, out), 0);
        float want = static_cast<float>(p * i + p * (p - 1) / 2);
        CHECK(out[0] == want && out[n - 1] == want, "p=%d rank %d iter %d n=%zu: %g != %g", p, r, i, n, out[0], want);
      }
      // Rank 0 asynchronous, the others synchronous: the same negotiation either way.
      std::vector<float> in(3, 1.f), out(3);
      if (r == 0) {
        e.wait(e.enqueue(req("mixed", in, out), 0));
      } else {
        e.run_sync(req("mixed", in, out), 0);
      }
      CHECK(out[2] == static_cast<float>(p), "mixed: %g", out[2]);
    }
  });
}

void test_errors(int p) {
  run_engines(p, "errors", [&](EngineCore& e, int r, Barrier& barrier) {
    std::vector<float> in(r == p - 1 ? 4 : 3, 1.f), out(in.size());
    try {
      e.run_sync(req("m", in, out), 0);
      CHECK(false, "rank %d: shape mismatch not reported", r);
    } catch (const HvdError& err) {
      CHECK(std::string(err.what()).find("Mismatched allreduce tensor shapes") != std::string::npos, "%s", err.what());
    }
    // A name already in flight is refused at once, before any communication.
    std::vector<float> a(2, 1.f), b(2);
    Handle h = e.enqueue(req("dup", a, b), 0);
    try {
      e.run_sync(req("dup", a, b), 0);
      CHECK(false, "duplicate name accepted");
    } catch (const HvdError& err) {
      CHECK(err.kind() == ErrorKind::INVALID_ARGUMENT, "%s", err.what());
    }
    e.wait(h);
    CHECK(b[1] == static_cast<float>(p), "dup: %g", b[1]);
    // Only rank 0 submits: it times out (on its own thread), the others are unaffected.
    barrier.arrive();
    if (r == 0) {
      try {
        e.run_sync(req("lonely", a, b), 0.3);
        CHECK(false, "timeout not reported");
      } catch (const HvdError& err) {
        CHECK(err.kind() == ErrorKind::TIMEOUT, "%s", err.what());
      }
    }
    barrier.arrive();
    std::vector<float> ok(1, 2.f), res(1);
    e.run_sync(req("after", ok, res), 0);
    CHECK(res[0] == 2.f * p, "engine unusable after errors: %g", res[0]);
  });
}

}  // namespace

int main() {
  for (int p : {1, 2, 4}) test_sums(p);
  for (int p : {2, 3}) test_errors(p);
  std::printf("%s: %ld checks, %d failures\n", failures ? "FAILED" : "OK", checks.load(), failures.load());
  return failures ? 1 : 0;
}
