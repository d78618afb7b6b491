// The engine (engine/engine_core.h) with ranks as threads over MemoryTransport: fused allreduces with
// exact values, different submission orders, mismatches (error on every rank, engine usable after),
// duplicate names, every op kind, the response cache over many rounds (also with a tiny capacity that
// forces evictions), join with uneven steps, process sets (static and dynamic), timeouts, grouped
// allreduce, stall shutdown and shutdown from one rank. Every wait is bounded by the request timeouts.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "tests/engine_harness.h"

using namespace phv;
using namespace phv::testing;

namespace {
EngineOptions base_options() {
  EngineOptions o;
  o.timeout_s = 20;
  o.cycle_time_ms = 1;
  o.stall_check_disable = true;
  return o;
}

Request allreduce_req(const std::string& name, const std::vector<float>& in, std::vector<float>& out,
                      ReduceOp op = ReduceOp::SUM) {
  Request q;
  q.type = OpType::ALLREDUCE;
  q.name = name;
  q.dtype = DataType::FLOAT32;
  q.shape = {static_cast<int64_t>(in.size())};
  q.input = in.data();
  q.output = out.data();
  q.reduce_op = op;
  return q;
}

// Rank r contributes (r + 1) * (i + k) at element i of tensor k; the sum over p ranks is p(p+1)/2 (i+k).
void test_fused_allreduce(int p, int64_t threshold, int cache) {
  EngineOptions o = base_options();
  o.fusion_threshold_bytes = threshold;
  o.cache_capacity = cache;
  run_engines(p, "fused", o, [&](EngineCore& e, int r, Barrier&) {
    const int kTensors = 40;
    for (int iter = 0; iter < 5; ++iter) {
      std::vector<std::vector<float>> in(kTensors), out(kTensors);
      std::vector<Handle> h;
      for (int k = 0; k < kTensors; ++k) {
        size_t n = static_cast<size_t>(1 + (k * 37) % 300);
        in[k].resize(n);
        out[k].assign(n, -1.f);
        for (size_t i = 0; i < n; ++i) in[k][i] = static_cast<float>((r + 1) * (static_cast<int>(i) + k));
      }
      // Odd ranks submit in reverse order: the engine must still agree on one order.
      for (int j = 0; j < kTensors; ++j) {
        int k = (r % 2) ? kTensors - 1 - j : j;
        h.push_back(e.enqueue(allreduce_req("t" + std::to_string(k), in[k], out[k]), 0));
      }
      for (Handle x : h) e.wait(x);
      float tri = static_cast<float>(p * (p + 1) / 2);
      for (int k = 0; k < kTensors; ++k) {
        for (size_t i = 0; i < out[k].size(); ++i) {
          float want = tri * static_cast<float>(static_cast<int>(i) + k);
          if (out[k][i] != want) {
            CHECK(false, "fused p=%d thr=%lld cache=%d rank %d tensor %d [%zu] = %g, want %g", p, (long long)threshold,
                  cache, r, k, i, out[k][i], want);
            return;
          }
          if (in[k][i] != static_cast<float>((r + 1) * (static_cast<int>(i) + k))) {
            CHECK(false, "input modified");
            return;
          }
        }
      }
    }
    ++checks;
  });
}

void test_mismatch(int p) {
  run_engines(p, "mismatch", base_options(), [&](EngineCore& e, int r, Barrier&) {
    std::vector<float> in(r == p - 1 ? 4 : 3, 1.f), out(in.size());
    Handle h = e.enqueue(allreduce_req("m", in, out), 0);
    try {
      e.wait(h);
      CHECK(false, "rank %d: shape mismatch not reported", r);
    } catch (const HvdError& err) {
      std::string want =
          "Mismatched allreduce tensor shapes: rank 0 sent [3], rank " + std::to_string(p - 1) + " sent [4]";
      CHECK(std::string(err.what()).find(want) != std::string::npos, "rank %d: %s", r, err.what());
      CHECK(std::string(err.what()).find("rank " + std::to_string(r) + ": allreduce 'm'") == 0, "%s", err.what());
    }
    Request q = allreduce_req("op", in, out, r == 0 ? ReduceOp::SUM : ReduceOp::MAX);
    q.shape = {3};
    try {
      e.wait(e.enqueue(q, 0));
      CHECK(false, "op mismatch not reported");
    } catch (const HvdError& err) {
      CHECK(
          std::string(err.what()).find("Mismatched reduce ops: rank 0 used Sum, rank 1 used Max") != std::string::npos,
          "%s", err.what());
    }
    std::vector<float> ok(3, 1.f), res(3);
    e.wait(e.enqueue(allreduce_req("after", ok, res), 0));
    CHECK(res[0] == static_cast<float>(p), "engine unusable after mismatch: %g", res[0]);
  });
}

void test_other_ops(int p) {
  run_engines(p, "ops", base_options(), [&](EngineCore& e, int r, Barrier&) {
    // allgather: rank r sends r+1 rows of 2 int32s valued r.
    std::vector<int32_t> rows(static_cast<size_t>(2 * (r + 1)), r);
    Request g;
    g.type = OpType::ALLGATHER;
    g.name = "g";
    g.dtype = DataType::INT32;
    g.shape = {r + 1, 2};
    g.input = rows.data();
    Result res = e.wait(e.enqueue(g, 0));
    CHECK(res.output_shape.size() == 2 && res.output_shape[0] == p * (p + 1) / 2, "allgather shape");
    const int32_t* got = reinterpret_cast<const int32_t*>(res.output->data());
    size_t at = 0;
    for (int q = 0; q < p; ++q) {
      for (int k = 0; k < 2 * (q + 1); ++k) CHECK(got[at++] == q, "allgather value");
    }
    // broadcast from the last rank
    std::vector<double> b(5, r == p - 1 ? 7.5 : 0.0), bo(5, 0.0);
    Request bq;
    bq.type = OpType::BROADCAST;
    bq.name = "b";
    bq.dtype = DataType::FLOAT64;
    bq.shape = {5};
    bq.input = b.data();
    bq.output = bo.data();
    bq.root = p - 1;
    e.wait(e.enqueue(bq, 0));
    CHECK(bo[4] == 7.5, "broadcast %g", bo[4]);
    // alltoall: rank r sends q+1 rows (value 100r+q) to rank q
    std::vector<int64_t> splits, data;
    for (int q = 0; q < p; ++q) {
      splits.push_back(q + 1);
      for (int k = 0; k <= q; ++k) data.push_back(100 * r + q);
    }
    Request a;
    a.type = OpType::ALLTOALL;
    a.name = "a";
    a.dtype = DataType::INT64;
    a.shape = {static_cast<int64_t>(data.size())};
    a.input = data.data();
    a.splits = splits;
    Result ar = e.wait(e.enqueue(a, 0));
    CHECK(ar.output_shape[0] == p * (r + 1), "alltoall rows %lld", (long long)ar.output_shape[0]);
    const int64_t* av = reinterpret_cast<const int64_t*>(ar.output->data());
    for (int q = 0; q < p; ++q) {
      CHECK(ar.received_splits[static_cast<size_t>(q)] == r + 1, "received splits");
      CHECK(av[q * (r + 1)] == 100 * q + r, "alltoall value");
    }
    // reducescatter of 2p+1 rows: the first rank gets one extra row
    int64_t dim0 = 2 * p + 1;
    std::vector<float> rin(static_cast<size_t>(dim0), 1.f), rout(3, 0.f);
    Request rs;
    rs.type = OpType::REDUCESCATTER;
    rs.name = "rs";
    rs.dtype = DataType::FLOAT32;
    rs.shape = {dim0};
    rs.input = rin.data();
    rs.output = rout.data();
    rs.reduce_op = ReduceOp::AVERAGE;
    Result rr = e.wait(e.enqueue(rs, 0));
    CHECK(rr.output_shape[0] == (r == 0 ? 3 : 2), "reducescatter rows");
    CHECK(rout[0] == 1.f && rout[1] == 1.f, "reducescatter average %g", rout[0]);
    Request bar;
    bar.type = OpType::BARRIER;
    e.wait(e.enqueue(bar, 0));
  });
}

void test_join(int p) {
  run_engines(p, "join", base_options(), [&](EngineCore& e, int r, Barrier&) {
    // Rank r runs r + 1 steps; at step s the contributors are ranks s..p-1, each adding (rank + 1).
    for (int s = 0; s <= r; ++s) {
      std::vector<float> in(3, static_cast<float>(r + 1)), out(3);
      e.wait(e.enqueue(allreduce_req("step." + std::to_string(s), in, out), 0));
      float want = 0;
      for (int q = s; q < p; ++q) want += static_cast<float>(q + 1);
      CHECK(out[2] == want, "join p=%d rank %d step %d: %g want %g", p, r, s, out[2], want);
    }
    Request j;
    j.type = OpType::JOIN;
    Result res = e.wait(e.enqueue(j, 0));
    CHECK(res.value == p - 1, "join returned %lld", (long long)res.value);
  });
}

void test_process_sets() {
  EngineOptions o = base_options();
  o.process_sets = {{2, 0}, {1, 2, 3}};
  o.dynamic_process_sets = true;
  run_engines(4, "sets", o, [&](EngineCore& e, int r, Barrier& barrier) {
    for (int id : {1, 2}) {
      std::vector<int> ranks = e.process_set_ranks(id);
      bool member = std::find(ranks.begin(), ranks.end(), r) != ranks.end();
      std::vector<float> in(2, static_cast<float>(r)), out(2);
      Request q = allreduce_req("x", in, out);
      q.process_set = id;
      if (!member) {
        try {
          e.enqueue(q, 0);
          CHECK(false, "non-member enqueue accepted");
        } catch (const HvdError& err) {
          CHECK(err.kind() == ErrorKind::INVALID_ARGUMENT, "%s", err.what());
        }
        continue;
      }
      e.wait(e.enqueue(q, 0));
      float want = 0;
      for (int m : ranks) want += static_cast<float>(m);
      CHECK(out[0] == want, "set %d rank %d: %g want %g", id, r, out[0], want);
    }
    int id = e.add_process_set({3, 1});
    CHECK(id == 3, "new set id %d", id);
    if (r == 1 || r == 3) {
      std::vector<float> in(1, 1.f), out(1);
      Request q = allreduce_req("y", in, out);
      q.process_set = id;
      e.wait(e.enqueue(q, 0));
      CHECK(out[0] == 2.f, "dynamic set sum %g", out[0]);
    }
    barrier.arrive();
    e.remove_process_set(id);
    CHECK(e.process_set_ids().size() == 3, "ids after remove");
  });
}

void test_timeout_and_duplicates() {
  run_engines(2, "timeout", base_options(), [&](EngineCore& e, int r, Barrier& barrier) {
    std::vector<float> in(1, 1.f), out(1);
    if (r == 0) {
      Handle h = e.enqueue(allreduce_req("lonely", in, out), 0.3);
      try {
        e.enqueue(allreduce_req("lonely", in, out), 0);
        CHECK(false, "duplicate accepted");
      } catch (const HvdError& err) {
        CHECK(err.kind() == ErrorKind::INVALID_ARGUMENT, "%s", err.what());
      }
      try {
        e.wait(h);
        CHECK(false, "no timeout");
      } catch (const HvdError& err) {
        CHECK(err.kind() == ErrorKind::TIMEOUT, "kind %d", int(err.kind()));
        CHECK(std::string(err.what()).find("ranks [1] never submitted it") != std::string::npos, "%s", err.what());
        CHECK(std::string(err.what()).find("request #1") != std::string::npos, "%s", err.what());
      }
    }
    barrier.arrive();
    e.wait(e.enqueue(allreduce_req("lonely", in, out), 0));
    CHECK(out[0] == 2.f, "after timeout %g", out[0]);
  });
}

void test_grouped(int p) {
  run_engines(p, "group", base_options(), [&](EngineCore& e, int r, Barrier&) {
    std::vector<std::vector<float>> in(5), out(5);
    std::vector<Handle> h;
    for (int k = 0; k < 5; ++k) {
      in[k].assign(static_cast<size_t>(k + 1), static_cast<float>(k));
      out[k].assign(in[k].size(), -1.f);
      Request q = allreduce_req("grp." + std::to_string(k), in[k], out[k]);
      q.group = 42 + r;  // group ids are local to a rank
      q.group_size = 5;
      h.push_back(e.enqueue(q, 0));
    }
    for (Handle x : h) e.wait(x);
    for (int k = 0; k < 5; ++k) CHECK(out[k][0] == static_cast<float>(k * p), "group value");
  });
}

void test_stall_shutdown() {
  EngineOptions o = base_options();
  o.stall_check_disable = false;
  o.stall_check_s = 0.2;
  o.stall_shutdown_s = 0.5;
  run_engines(2, "stall", o, [&](EngineCore& e, int r, Barrier& barrier) {
    std::vector<float> in(1, 1.f), out(1);
    if (r == 0) {
      try {
        e.wait(e.enqueue(allreduce_req("stuck", in, out), 0));
        CHECK(false, "stall shutdown did not fail the request");
      } catch (const HvdError& err) {
        CHECK(err.kind() == ErrorKind::SHUTDOWN, "%s", err.what());
        CHECK(std::string(err.what()).find("'stuck' waited") != std::string::npos, "%s", err.what());
      }
    }
    barrier.arrive();
    // Rank 1's engine may not have processed the shutdown round yet when it gets here: the request is
    // then refused at enqueue or failed at wait, but never run.
    try {
      e.wait(e.enqueue(allreduce_req("later", in, out), 0));
      CHECK(false, "a request after stall shutdown ran");
    } catch (const HvdError& err) {
      CHECK(err.kind() == ErrorKind::SHUTDOWN, "%s", err.what());
    }
  });
}

}  // namespace

int main() {
  for (int p : {1, 2, 3, 4}) {
    test_fused_allreduce(p, 128 << 20, 1024);
    test_fused_allreduce(p, 0, 1024);
    test_fused_allreduce(p, 1000, 3);
    test_fused_allreduce(p, 128 << 20, 0);
    test_other_ops(p);
    test_join(p);
    test_grouped(p);
  }
  test_mismatch(2);
  test_mismatch(3);
  test_process_sets();
  test_timeout_and_duplicates();
  test_stall_shutdown();
  return finish("engine_test");
}
