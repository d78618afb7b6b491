// EngineCore::run_sync, the synchronous fast path (enqueue + wait on the caller's thread, the background
// thread not woken): exact sums over many rounds (the response cache and the inline reduce of small
// cached tensors included), mixed with asynchronous requests of other ranks, a shape mismatch that fails
// on every rank and leaves the engine usable, a duplicate name refused before communication, and a
// timeout when one rank never submits. Also prepared requests (EngineCore::prepare / run_prepared): new
// buffers every call, exact sums, and the same errors (a shape mismatch, a name in flight) after which the
// prepared request still runs. Small reducescatters (inline and express): exact blocks. Ranks are
// threads over MemoryTransport; every wait is bounded.
#include <algorithm>
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

void test_prepared(int p) {
  run_engines(p, "prepared", sync_options(), [&](EngineCore& e, int r, Barrier& barrier) {
    std::vector<float> seed1(1, 0.f), seed(1000, 0.f), none(1000);  // stand-ins while the requests are checked
    auto small = e.prepare(req("prep1", seed1, none), 0);
    auto large = e.prepare(req("prep1000", seed, none), 0);
    // Two pairs of buffers in turn: each call must use the buffers it is given, not the last ones.
    std::vector<std::vector<float>> ins(2, std::vector<float>(1000)), outs(2, std::vector<float>(1000));
    for (int i = 0; i < 200; ++i) {
      std::vector<float>& in = ins[i % 2];
      std::vector<float>& out = outs[i % 2];
      std::fill(in.begin(), in.end(), static_cast<float>(r + i));
      std::fill(out.begin(), out.end(), -1.f);
      float want = static_cast<float>(p * i + p * (p - 1) / 2);
      e.run_prepared(*small, in.data(), out.data());
      CHECK(out[0] == want && out[1] == -1.f, "p=%d rank %d iter %d small: %g != %g", p, r, i, out[0], want);
      e.run_prepared(*large, in.data(), out.data());
      CHECK(out[0] == want && out[999] == want, "p=%d rank %d iter %d large: %g != %g", p, r, i, out[999], want);
    }
    // In place: input and output the same buffer.
    std::vector<float> both(1000, 2.f);
    e.run_prepared(*large, both.data(), both.data());
    CHECK(both[500] == 2.f * p, "in place: %g", both[500]);
    // A name in flight through enqueue() is refused at once; then the prepared request runs again. A name
    // stays in flight only while some rank has not submitted it yet, so each rank checks a name that
    // another rank holds back until the barrier: rank 0 checks 'prep1', the others 'prep2'. (With one rank
    // every request completes on its own, so there is nothing to check.)
    std::vector<float> a(1, 1.f), b(1);
    if (p > 1) {
      auto second = e.prepare(req("prep2", seed1, none), 0);
      std::vector<float> b2(1);
      const bool holds_prep2 = r == 0;
      Handle mine = holds_prep2 ? e.enqueue(req("prep1", a, b), 0) : e.enqueue(req("prep2", a, b2), 0);
      try {
        e.run_prepared(holds_prep2 ? *small : *second, a.data(), b.data());
        CHECK(false, "rank %d: a prepared request ran while its name was in flight", r);
      } catch (const HvdError& err) {
        CHECK(err.kind() == ErrorKind::INVALID_ARGUMENT, "%s", err.what());
      }
      barrier.arrive();
      Handle held = holds_prep2 ? e.enqueue(req("prep2", a, b2), 0) : e.enqueue(req("prep1", a, b), 0);
      e.wait(mine);
      e.wait(held);
      CHECK(b[0] == static_cast<float>(p) && b2[0] == static_cast<float>(p), "enqueued prep1, prep2: %g %g", b[0],
            b2[0]);
    }
    // One rank prepared another shape under the same name: the mismatch on every rank, every time.
    std::vector<float> shaped(r == p - 1 ? 4 : 3, 1.f), shaped_out(4);
    auto odd = e.prepare(req("odd", shaped, shaped_out), 0);
    for (int i = 0; i < 2 && p > 1; ++i) {
      try {
        e.run_prepared(*odd, shaped.data(), shaped_out.data());
        CHECK(false, "rank %d: shape mismatch not reported", r);
      } catch (const HvdError& err) {
        CHECK(std::string(err.what()).find("Mismatched allreduce tensor shapes") != std::string::npos, "%s",
              err.what());
      }
    }
    a[0] = 3.f;
    e.run_prepared(*small, a.data(), b.data());
    CHECK(b[0] == 3.f * p, "prepared request unusable after errors: %g", b[0]);
    // A prepared request needs a name: automatic names are given per call.
    try {
      e.prepare(req("", a, b), 0);
      CHECK(false, "an unnamed request was prepared");
    } catch (const HvdError& err) {
      CHECK(err.kind() == ErrorKind::INVALID_ARGUMENT, "%s", err.what());
    }
  });
}

// Small reducescatters (inline, then express once steady): uneven blocks (dim0 = p + 1: rank 0 keeps two
// rows of three), Sum and Average, exact values every call, and the engine's output shape.
void test_small_reducescatter(int p) {
  run_engines(p, "small reducescatter", sync_options(), [&](EngineCore& e, int r, Barrier&) {
    const int64_t dim0 = p + 1, cols = 3;
    const int64_t first = r == 0 ? 0 : r + 1, rows = r == 0 ? 2 : 1;
    for (int i = 0; i < 50; ++i) {
      for (ReduceOp op : {ReduceOp::SUM, ReduceOp::AVERAGE}) {
        std::vector<float> in(static_cast<size_t>(dim0 * cols)), out(static_cast<size_t>(rows * cols), -1.f);
        for (size_t k = 0; k < in.size(); ++k) in[k] = static_cast<float>(k + r + i);
        Request q;
        q.type = OpType::REDUCESCATTER;
        q.name = op == ReduceOp::SUM ? "rs_sum" : "rs_avg";
        q.reduce_op = op;
        q.shape = {dim0, cols};
        q.input = in.data();
        q.output = out.data();
        Result res = e.run_sync(std::move(q), 0);
        CHECK(res.output_shape.size() == 2 && res.output_shape[0] == rows && res.output_shape[1] == cols,
              "p=%d rank %d: output shape", p, r);
        for (int64_t k = 0; k < rows * cols; ++k) {
          const int64_t at = first * cols + k;  // element index in the full input
          float sum = static_cast<float>(p * (at + i) + p * (p - 1) / 2);
          float want = op == ReduceOp::SUM ? sum : sum / static_cast<float>(p);
          CHECK(out[static_cast<size_t>(k)] == want, "p=%d rank %d iter %d op %d [%lld]: %g != %g", p, r, i,
                static_cast<int>(op), static_cast<long long>(k), out[static_cast<size_t>(k)], want);
        }
      }
    }
  });
}

}  // namespace

int main() {
  for (int p : {1, 2, 4}) test_sums(p);
  for (int p : {2, 3}) test_errors(p);
  for (int p : {1, 2, 4}) test_prepared(p);
  for (int p : {1, 2, 3, 4}) test_small_reducescatter(p);
  return finish("engine_sync_test");
}
