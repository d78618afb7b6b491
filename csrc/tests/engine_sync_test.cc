// EngineCore::run_sync, the synchronous fast path (enqueue + wait on the caller's thread, the background
// thread not woken): exact sums over many rounds (the response cache and the inline reduce of small
// cached tensors included), mixed with asynchronous requests of other ranks, a shape mismatch that fails
// on every rank and leaves the engine usable, a duplicate name refused before communication, and a
// timeout when one rank never submits. Ranks are threads over MemoryTransport; every wait is bounded.
#include <cstdio>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "tests/engine_harness.h"

using namespace phv;
using namespace phv::testing;

namespace {
// Default cycle time (engine_test uses 1 ms), bounded waits, no stall checks.
EngineOptions sync_options() {
  EngineOptions o;
  o.timeout_s = 20;
  o.stall_check_disable = true;
  return o;
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
  run_engines(p, "sums", sync_options(), [&](EngineCore& e, int r, Barrier&) {
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
  run_engines(p, "errors", sync_options(), [&](EngineCore& e, int r, Barrier& barrier) {
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
  return finish("engine_sync_test");
}
