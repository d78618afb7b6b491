// The two-level collectives (algorithms/hierarchy.h): the model's fit and choice as pure functions, the
// host grouping, and hierarchical_allreduce / hierarchical_allgatherv exact over threads as ranks for
// several host layouts (consecutive and interleaved ranks), every dtype and op, uneven counts.
#include <cmath>
#include <cstring>

#include "algorithms/hierarchy.h"
#include "tests/collective_harness.h"

using namespace phv;
using namespace phv::testing;

namespace {

void test_fit_and_choice() {
  // T = 2(n-1) alpha + 2(n-1)/n M/beta with alpha = 30 us, beta = 100 MB/s, n = 4: recovered exactly.
  RingFit truth{30e-6, 1e8};
  RingFit f = fit_ring(4, 1e5, truth.allreduce_s(4, 1e5), 4e6, truth.allreduce_s(4, 4e6));
  CHECK(std::abs(f.alpha_s - 30e-6) < 1e-12 && std::abs(f.beta_bytes_per_s - 1e8) < 1e-3, "fit %g %g", f.alpha_s,
        f.beta_bytes_per_s);
  CHECK(!fit_ring(4, 1e5, 2.0, 4e6, 1.0).valid(), "a slower small message gives no fit");
  CHECK(!fit_ring(1, 1e5, 1.0, 4e6, 2.0).valid(), "one rank gives no fit");

  HierarchyModel m;
  m.flat = {20e-6, 1.25e8};    // the NIC
  m.local = {10e-6, 2e9};      // shared memory
  m.cross = {20e-6, 6.25e7};   // each of 2 cross rings gets half the NIC
  TwoLevel tl;
  tl.hosts = 2;
  tl.per_host = 2;
  Tuning tuning;
  const OpType ar = OpType::ALLREDUCE;
  // 16 MiB: flat 2*3*20us + 1.5*M/125MB/s; hierarchical local(M) + cross(M/2) -- hierarchical wins.
  CHECK(prefer_two_level(-1, m, tl, 16 << 20, ar, tuning), "16 MiB: hierarchical");
  // Below the small-message threshold the flat allreduce is recursive doubling: 1 KiB is latency, and
  // two levels add a phase (flat 46.9 us against 48.7 us); at 64 KiB recursive doubling's whole message
  // across the NIC loses to the cross rings' half (1.11 ms against 0.62 ms).
  CHECK(65536 < small_message_threshold(tuning, 4), "64 KiB is a small message at p=4");
  CHECK(!prefer_two_level(-1, m, tl, 1024, ar, tuning), "1 KiB: flat recursive doubling");
  CHECK(prefer_two_level(-1, m, tl, 65536, ar, tuning), "64 KiB: hierarchical beats recursive doubling");
  CHECK(std::abs(m.flat_small_allreduce_s(2, 2, 1024) - (10e-6 + 1024 / 2e9 + 20e-6 + 1024 / 6.25e7)) < 1e-12,
        "flat_small = log2(L) local + log2(H) cross exchanges of the whole message");
  // A fit whose alphas clamped to 0 would call two levels faster at every size; the tuning's latencies
  // floor them, so a tiny message stays flat.
  HierarchyModel no_alpha = m;
  no_alpha.local.alpha_s = no_alpha.cross.alpha_s = no_alpha.flat.alpha_s = 0;
  CHECK(!prefer_two_level(-1, no_alpha, tl, 256, ar, tuning), "alpha 0 fit, 256 B: flat (alpha floored)");
  CHECK(no_alpha.with_alpha_floor(tuning).cross.alpha_s == tuning.alpha_s &&
            no_alpha.with_alpha_floor(tuning).local.alpha_s == tuning.alpha_shm_s,
        "floors: alpha_s across, alpha_shm_s inside");
  CHECK(prefer_two_level(1, m, tl, 1024, ar, tuning), "mode 1: always");
  CHECK(!prefer_two_level(0, m, tl, 16 << 20, ar, tuning), "mode 0: never");
  CHECK(!prefer_two_level(-1, HierarchyModel{}, tl, 16 << 20, ar, tuning), "no model: flat");
  // Local links slower than the NIC: the extra local phases never pay off.
  HierarchyModel slow = m;
  slow.local = {1e-3, 1e7};
  CHECK(!prefer_two_level(-1, slow, tl, 16 << 20, ar, tuning), "slow local links: flat");
  CHECK(m.hierarchical_allreduce_s(2, 2, 1e6) == m.local.allreduce_s(2, 1e6) + m.cross.allreduce_s(2, 5e5),
        "hierarchical = local(M) + cross(M/L)");
  CHECK(m.hierarchical_allreduce_s(2, 2, 1e6, 1e6) == m.local.allreduce_s(2, 1e6) + m.cross.exchanges_s(2, 5e5),
        "a cross shard below the cross comm's threshold: recursive doubling");
  CHECK(std::abs(m.cross.exchanges_s(4, 1e3) - 2 * (20e-6 + 1e3 / 6.25e7)) < 1e-15 &&
            std::abs(m.cross.exchanges_s(3, 1e3) - 2 * (20e-6 + 1e3 / 6.25e7)) < 1e-15,
        "exchanges: ceil(log2 n) rounds");
  // Init measured two levels slower below 16 KiB: under that size flat, whatever the model says.
  HierarchyModel measured = m;
  measured.two_level_from_bytes = 16 << 10;
  CHECK(prefer_two_level(-1, measured, tl, 65536, ar, tuning), "64 KiB: above the measured start");
  CHECK(!prefer_two_level(-1, measured, tl, 8192, ar, tuning) && prefer_two_level(-1, m, tl, 8192, ar, tuning),
        "8 KiB: the model alone picks two levels, the measured start keeps it flat");
  CHECK(prefer_two_level(-1, measured, tl, 16 << 20, ar, tuning), "above the small-message threshold: the model");
}

void test_grouping() {
  Comm world;
  world.members = {0, 1, 2, 3};
  world.my_index = 3;
  TwoLevel tl;
  CHECK(make_two_level(world, {0, 1, 1, 0}, &tl), "interleaved 2x2");
  CHECK(tl.local.members == std::vector<int>({0, 3}) && tl.local.rank() == 1, "local comm of rank 3");
  CHECK(tl.cross.members == std::vector<int>({2, 3}) && tl.cross.rank() == 1, "cross comm: 2nd of each host");
  CHECK(!make_two_level(world, {0, 0, 0, 1}, &tl), "unequal hosts");
  CHECK(!make_two_level(world, {0, 0, 0, 0}, &tl), "one host");
  CHECK(!make_two_level(world, {0, 0, 1}, &tl), "layout shorter than the comm");
}

void test_allreduce(const std::vector<int>& host_of) {
  const int p = static_cast<int>(host_of.size());
  for (DataType dt : kTypes) {
    for (ReduceOp op : kOps) {
      std::string what =
          "hierarchical_allreduce p=" + std::to_string(p) + " " + dtype_name(dt) + " " + reduce_op_name(op);
      run_world(p, what, [&](const Comm& comm) {
        TwoLevel tl;
        if (!make_two_level(comm, host_of, &tl)) throw std::runtime_error("no two levels");
        const size_t esize = dtype_size(dt);
        for (size_t count : kCounts) {
          std::vector<uint8_t> buf(count * esize + 1);
          for (size_t i = 0; i < count; ++i) store(dt, buf.data(), i, input(dt, op, comm.rank(), i));
          Tuning tuning;
          tuning.segment_bytes = 64;  // many segments per shard
          hierarchical_allreduce(tl, buf.data(), count, dt, op, tuning, soon());
          for (size_t i = 0; i < count; ++i) {
            double want = static_cast<double>(expected(dt, op, p, i));
            CHECK(load(dt, buf.data(), i) == want, "%s count=%zu rank %d i=%zu: got %g want %g", what.c_str(), count,
                  comm.rank(), i, load(dt, buf.data(), i), want);
          }
        }
      });
    }
  }
}

void test_allgather(const std::vector<int>& host_of) {
  const int p = static_cast<int>(host_of.size());
  run_world(p, "hierarchical_allgatherv", [&](const Comm& comm) {
    TwoLevel tl;
    if (!make_two_level(comm, host_of, &tl)) throw std::runtime_error("no two levels");
    for (size_t scale : {0, 1, 7, 1000}) {
      std::vector<size_t> bytes(static_cast<size_t>(p));
      size_t total = 0;
      for (int r = 0; r < p; ++r)
        total += bytes[static_cast<size_t>(r)] = scale * static_cast<size_t>(r % 3) + (r == 1);
      std::vector<uint8_t> mine(bytes[static_cast<size_t>(comm.rank())], static_cast<uint8_t>(comm.rank() + 1));
      std::vector<uint8_t> out(total, 0);
      hierarchical_allgatherv(comm, tl, host_of, mine.data(), out.data(), bytes, Tuning{}, soon());
      size_t off = 0;
      for (int r = 0; r < p; ++r)
        for (size_t i = 0; i < bytes[static_cast<size_t>(r)]; ++i, ++off)
          CHECK(out[off] == r + 1, "allgather p=%d scale=%zu rank %d: byte %zu of block %d is %d", p, scale,
                comm.rank(), i, r, out[off]);
    }
  });
}

}  // namespace

int main() {
  test_fit_and_choice();
  test_grouping();
  const std::vector<std::vector<int>> layouts = {{0, 0, 1, 1},       {0, 1, 1, 0},       {0, 1},
                                                 {0, 0, 0, 1, 1, 1}, {0, 1, 2, 0, 1, 2}, {0, 0, 1, 1, 2, 2, 3, 3}};
  for (const auto& layout : layouts) {
    test_allreduce(layout);
    test_allgather(layout);
  }
  return finish("hierarchy_test");
}
