// Every collective algorithm (algorithms/algorithms.h) with ranks as threads over MemoryTransport, whose
// rendezvous semantics make a ring that would deadlock over TCP deadlock here too (and hit the deadline).
// World sizes 1..5 and 8; counts 0, 1, primes, 2^k +- 1 and multi-segment sizes (segment_bytes forced
// down to 64 bytes); every dtype x op for allreduce with exact expected values (small integers, also in
// the float types); uneven allgather / alltoall / reducescatter; broadcast from every root along both of
// its algorithms; barrier ordering; process-set communicators; error and timeout paths. The reducing
// algorithms run a second time with zero-copy receives (Transport::RecvSink), as over shared memory.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/algorithms.h"
#include "common/error.h"
#include "common/reduce.h"
#include "tests/collective_harness.h"
#include "transport/memory_transport.h"

using namespace phv;

using namespace phv::testing;

namespace {
// ---------------------------------------------------------------- allreduce

using AllreduceFn = std::function<void(const Comm&, void*, size_t, DataType, ReduceOp, const Tuning&)>;

void test_allreduce(int p, const char* name, const AllreduceFn& fn, const Tuning& tuning) {
  run_world(p, name, [&](const Comm& comm) {
    for (DataType dt : kTypes)
      for (ReduceOp op : kOps)
        for (size_t count : kCounts) {
          size_t es = dtype_size(dt);
          std::vector<char> buf(count * es + 1, 0x5a);  // one guard byte past the end
          for (size_t i = 0; i < count; ++i) store(dt, buf.data(), i, input(dt, op, comm.rank(), i));
          fn(comm, buf.data(), count, dt, op, tuning);
          for (size_t i = 0; i < count; ++i) {
            std::vector<char> want(es);
            store(dt, want.data(), 0, expected(dt, op, p, i));
            CHECK(std::memcmp(buf.data() + i * es, want.data(), es) == 0,
                  "%s p=%d rank %d %s %s count=%zu seg=%zu i=%zu: got %g want %g", name, p, comm.rank(), dtype_name(dt),
                  reduce_op_name(op), count, tuning.segment_bytes, i, load(dt, buf.data(), i),
                  load(dt, want.data(), 0));
          }
          CHECK(static_cast<unsigned char>(buf[count * es]) == 0x5a, "%s wrote past the end", name);
        }
  });
}

// Non-integer float sums: every rank must end with bit-identical results (the ring computes each chunk
// on one rank; recursive doubling combines in the same order on both partners).
void test_identical(int p, const char* name, const AllreduceFn& fn, const Tuning& tuning) {
  const size_t count = 3001;
  std::vector<std::vector<float>> results(static_cast<size_t>(p));
  run_world(p, name, [&](const Comm& comm) {
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = std::sin(static_cast<float>(i * 31 + comm.rank() * 7)) * 1e3f;
    fn(comm, buf.data(), count, DataType::FLOAT32, ReduceOp::SUM, tuning);
    results[static_cast<size_t>(comm.rank())] = buf;
  });
  for (int r = 1; r < p; ++r)
    CHECK(std::memcmp(results[0].data(), results[static_cast<size_t>(r)].data(), count * 4) == 0,
          "%s p=%d: rank %d differs from rank 0", name, p, r);
  double err = 0;
  for (size_t i = 0; i < count; ++i) {
    double exact = 0;
    for (int r = 0; r < p; ++r) exact += static_cast<double>(std::sin(static_cast<float>(i * 31 + r * 7)) * 1e3f);
    err = std::max(err, std::fabs(exact - results[0][i]));
  }
  CHECK(err < 1e-2, "%s p=%d: max error %g", name, p, err);
}

void test_large_allreduce(int p) {
  const size_t count = (size_t(1) << 20) + 3;  // 4 MiB of float32, default tuning: several segments/chunk
  run_world(p, "large allreduce", [&](const Comm& comm) {
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((i + static_cast<size_t>(comm.rank())) % 1000);
    allreduce(comm, buf.data(), count, DataType::FLOAT32, ReduceOp::SUM, Tuning{}, soon());
    size_t bad = 0;
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < p; ++r) want += static_cast<float>((i + static_cast<size_t>(r)) % 1000);
      bad += buf[i] != want;
    }
    CHECK(bad == 0, "large allreduce p=%d rank %d: %zu wrong", p, comm.rank(), bad);
  });
}

// ---------------------------------------------------------------- allgather, broadcast, alltoall, reducescatter

size_t block_size(int r, int p, int variant) {
  switch (variant) {
    case 0: return 1000;                                                   // equal, multi-segment
    case 1: return static_cast<size_t>((r * 37 + p * 11) % 300);           // uneven
    case 2: return r % 2 == 0 ? 0 : static_cast<size_t>(r * 131 + 1);      // some empty
    default: return r == p - 1 ? 777 : 0;                                  // one non-empty block
  }
}
unsigned char pattern(int r, size_t j) { return static_cast<unsigned char>((r * 131 + j * 7 + j / 256) & 0xff); }

void test_allgather(int p, const Tuning& tuning) {
  run_world(p, "allgatherv", [&](const Comm& comm) {
    for (int variant = 0; variant < 4; ++variant)
      for (bool in_place : {false, true}) {
        std::vector<size_t> bytes(static_cast<size_t>(p));
        size_t total = 0, my_off = 0;
        for (int r = 0; r < p; ++r) {
          bytes[static_cast<size_t>(r)] = block_size(r, p, variant);
          if (r == comm.rank()) my_off = total;
          total += bytes[static_cast<size_t>(r)];
        }
        size_t mine = bytes[static_cast<size_t>(comm.rank())];
        std::vector<unsigned char> send(mine), recv(total + 1, 0xee);
        for (size_t j = 0; j < mine; ++j) send[j] = pattern(comm.rank(), j);
        const void* src = send.data();
        if (in_place) {
          std::memcpy(recv.data() + my_off, send.data(), mine);
          src = recv.data() + my_off;
        }
        allgatherv(comm, src, recv.data(), bytes, tuning, soon());
        size_t off = 0, bad = 0;
        for (int r = 0; r < p; ++r)
          for (size_t j = 0; j < bytes[static_cast<size_t>(r)]; ++j) bad += recv[off++] != pattern(r, j);
        CHECK(bad == 0 && recv[total] == 0xee, "allgatherv p=%d rank %d variant %d in_place %d seg=%zu: %zu wrong", p,
              comm.rank(), variant, in_place, tuning.segment_bytes, bad);
      }
  });
}

// out_of_place: the root's bytes are in a separate input, which must stay as it was, and its buf starts
// as garbage like everyone else's.
void test_broadcast(int p, const Tuning& tuning, const char* name, bool out_of_place = false) {
  run_world(p, name, [&](const Comm& comm) {
    for (size_t bytes : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(70001)})
      for (int root = 0; root < p; ++root) {
        std::vector<unsigned char> buf(bytes + 1, 0xee), input(bytes);
        for (size_t j = 0; j < bytes; ++j) input[j] = pattern(root, j);
        if (comm.rank() == root && !out_of_place) std::memcpy(buf.data(), input.data(), bytes);
        broadcast(comm, buf.data(), bytes, root, tuning, soon(), out_of_place ? input.data() : nullptr);
        size_t bad = 0;
        for (size_t j = 0; j < bytes; ++j) bad += (buf[j] != pattern(root, j)) + (input[j] != pattern(root, j));
        CHECK(bad == 0 && buf[bytes] == 0xee, "%s p=%d rank %d root %d bytes %zu: %zu wrong", name, p, comm.rank(),
              root, bytes, bad);
      }
  });
}

// The ring out of place with a postscale: bit for bit what it gives in place (the same rounding), and
// the input left as it was.
void test_out_of_place_postscale(int p, const Tuning& tuning) {
  run_world(p, "ring_allreduce(out of place, postscale)", [&](const Comm& comm) {
    for (DataType dt : {DataType::FLOAT32, DataType::FLOAT64, DataType::FLOAT16, DataType::BFLOAT16}) {
      const size_t count = 5003, es = dtype_size(dt);
      std::vector<char> input(count * es), saved, inplace, out(count * es, 0x33);
      for (size_t i = 0; i < count; ++i) store(dt, input.data(), i, static_cast<double>((i * 7 + comm.rank()) % 61));
      saved = inplace = input;
      ring_allreduce(comm, inplace.data(), count, dt, ReduceOp::SUM, tuning, soon(), 0.3);
      ring_allreduce(comm, out.data(), count, dt, ReduceOp::SUM, tuning, soon(), 0.3, input.data());
      CHECK(out == inplace && input == saved,
            "out-of-place postscale p=%d rank %d %s: differs (%d) or input changed (%d)", p, comm.rank(),
            dtype_name(dt), out != inplace, input != saved);
    }
  });
}

size_t a2a_bytes(int from, int to, int variant) {
  if (variant == 0) return 64;
  if (variant == 1) return static_cast<size_t>((from * 5 + to * 3) % 11) * 97;
  return (from + to) % 3 == 0 ? 0 : static_cast<size_t>(from * 1000 + to + 1);
}

void test_alltoall(int p) {
  run_world(p, "alltoallv", [&](const Comm& comm) {
    const int me = comm.rank();
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<size_t> sb(static_cast<size_t>(p)), rb(static_cast<size_t>(p));
      size_t stotal = 0, rtotal = 0;
      for (int r = 0; r < p; ++r) {
        stotal += sb[static_cast<size_t>(r)] = a2a_bytes(me, r, variant);
        rtotal += rb[static_cast<size_t>(r)] = a2a_bytes(r, me, variant);
      }
      std::vector<unsigned char> send(stotal), recv(rtotal + 1, 0xee);
      size_t off = 0;
      for (int r = 0; r < p; ++r)
        for (size_t j = 0; j < sb[static_cast<size_t>(r)]; ++j) send[off++] = pattern(me * 16 + r, j);
      alltoallv(comm, send.data(), sb, recv.data(), rb, soon());
      size_t bad = 0;
      off = 0;
      for (int r = 0; r < p; ++r)
        for (size_t j = 0; j < rb[static_cast<size_t>(r)]; ++j) bad += recv[off++] != pattern(r * 16 + me, j);
      CHECK(bad == 0 && recv[rtotal] == 0xee, "alltoallv p=%d rank %d variant %d: %zu wrong", p, me, variant, bad);
    }
  });
}

void test_reducescatter(int p, const Tuning& tuning) {
  run_world(p, "reducescatter", [&](const Comm& comm) {
    for (DataType dt : kTypes)
      for (ReduceOp op : kOps)
        for (int variant = 0; variant < 3; ++variant) {
          std::vector<size_t> counts(static_cast<size_t>(p));
          size_t total = 0, my_off = 0;
          for (int r = 0; r < p; ++r) {
            // Horovod's split of dim0 rows (first dim0 % p ranks one more), uneven, and with empty blocks.
            size_t c = variant == 0
                           ? 101 / static_cast<size_t>(p) + (static_cast<size_t>(r) < 101 % static_cast<size_t>(p))
                       : variant == 1 ? static_cast<size_t>((r * 37 + 5) % 53)
                                      : (r % 2 ? 0 : static_cast<size_t>(r + 1) * 29);
            counts[static_cast<size_t>(r)] = c;
            if (r == comm.rank()) my_off = total;
            total += c;
          }
          size_t es = dtype_size(dt), mine = counts[static_cast<size_t>(comm.rank())];
          std::vector<char> in(total * es), out(mine * es + 1, 0x5a);
          for (size_t i = 0; i < total; ++i) store(dt, in.data(), i, input(dt, op, comm.rank(), i));
          std::vector<char> in_copy = in;
          reducescatter(comm, in.data(), out.data(), counts, dt, op, tuning, soon());
          size_t bad = 0;
          for (size_t i = 0; i < mine; ++i) {
            std::vector<char> want(es);
            store(dt, want.data(), 0, expected(dt, op, p, my_off + i));
            bad += std::memcmp(out.data() + i * es, want.data(), es) != 0;
          }
          CHECK(bad == 0 && out[mine * es] == 0x5a && in == in_copy,
                "reducescatter p=%d rank %d %s %s variant %d: %zu wrong", p, comm.rank(), dtype_name(dt),
                reduce_op_name(op), variant, bad);
        }
  });
}

void test_barrier(int p) {
  std::atomic<int> arrived[3] = {{0}, {0}, {0}};
  run_world(p, "barrier", [&](const Comm& comm) {
    for (int round = 0; round < 3; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(((comm.rank() + round) % p) * 3));
      arrived[round].fetch_add(1);
      barrier(comm, soon());
      CHECK(arrived[round].load() == p, "barrier p=%d round %d: rank %d left with %d arrived", p, round, comm.rank(),
            arrived[round].load());
    }
  });
}

// A process set {1, 3, 4} of a 5-rank world, and two worlds running at once (no shared mutable state).
void test_subsets_and_concurrency() {
  auto transports = make_memory_transports(5);
  std::vector<int> members = {1, 3, 4};
  std::vector<std::thread> threads;
  for (size_t k = 0; k < members.size(); ++k) {
    threads.emplace_back([&, k] {
      Comm comm{transports[static_cast<size_t>(members[k])].get(), members, static_cast<int>(k)};
      Tuning t;
      t.segment_bytes = 64;
      std::vector<int32_t> buf(1000, members[k]);
      ring_allreduce(comm, buf.data(), buf.size(), DataType::INT32, ReduceOp::SUM, t, soon());
      small_allreduce(comm, buf.data(), buf.size(), DataType::INT32, ReduceOp::MAX, soon());
      CHECK(buf[0] == 8 && buf[999] == 8, "process set: rank %d got %d", members[k], buf[0]);
      std::vector<char> b(100, static_cast<char>(members[k]));
      broadcast(comm, b.data(), b.size(), 2, t, soon());
      CHECK(b[50] == 4, "process set broadcast from set rank 2 (global 4): %d", b[50]);
      barrier(comm, soon());
    });
  }
  std::thread other([] { test_large_allreduce(3); });
  for (auto& t : threads) t.join();
  other.join();
}

void test_errors() {
  auto transports = make_memory_transports(2);
  Comm c0{transports[0].get(), {0, 1}, 0};
  float x[4] = {0, 0, 0, 0};
  expect_error("AVERAGE", ErrorKind::INVALID_ARGUMENT,
               [&] { allreduce(c0, x, 4, DataType::FLOAT32, ReduceOp::AVERAGE, Tuning{}, soon()); });
  expect_error("bad root", ErrorKind::INVALID_ARGUMENT, [&] { broadcast(c0, x, 16, 2, Tuning{}, soon()); });
  expect_error("allgather sizes", ErrorKind::INVALID_ARGUMENT, [&] { allgatherv(c0, x, x, {4}, Tuning{}, soon()); });
  expect_error("alltoall sizes", ErrorKind::INVALID_ARGUMENT, [&] { alltoallv(c0, x, {4, 4, 4}, x, {4, 4}, soon()); });
  expect_error("reducescatter counts", ErrorKind::INVALID_ARGUMENT,
               [&] { reducescatter(c0, x, x, {1, 1, 1}, DataType::FLOAT32, ReduceOp::SUM, Tuning{}, soon()); });
  // The peer never shows up: the deadline fires, promptly.
  auto t0 = Clock::now();
  expect_error("timeout", ErrorKind::TIMEOUT,
               [&] { allreduce(c0, x, 4, DataType::FLOAT32, ReduceOp::SUM, Tuning{}, deadline_after(0.2)); });
  double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(waited >= 0.19 && waited < 2.0, "timeout after %.3f s", waited);
  // Length mismatch: both ends fail.
  auto t2 = make_memory_transports(2);
  std::thread peer([&] {
    char b[8] = {0};
    expect_error("mismatch (sender)", ErrorKind::INTERNAL,
                 [&] { t2[1]->wait_all({t2[1]->post_send(0, b, 8)}, soon()); });
  });
  char b[4];
  expect_error("mismatch (receiver)", ErrorKind::INTERNAL,
               [&] { t2[0]->wait_all({t2[0]->post_recv(1, b, 4)}, soon()); });
  peer.join();
}

// The alpha-beta-gamma model (tuning.h): closed forms at p = 2 and 4, the cap, the overrides, and the
// segment sizes for TCP and shared memory.
void test_tuning() {
  Tuning t;
  auto near = [](size_t got, double want) { return std::fabs(static_cast<double>(got) - want) <= 1.0; };
  CHECK(small_message_threshold(t, 1) == 0, "p=1");
  CHECK(near(small_message_threshold(t, 2, false), 2 * t.alpha_s * t.gamma_bytes_per_s), "p=2 tcp: %zu",
        small_message_threshold(t, 2, false));
  CHECK(near(small_message_threshold(t, 2, true), 2 * t.alpha_shm_s * t.gamma_bytes_per_s), "p=2 shm");
  double p4 = 4 * t.alpha_s / (0.5 / t.beta_bytes_per_s + 1.25 / t.gamma_bytes_per_s);
  CHECK(near(small_message_threshold(t, 4, false), p4), "p=4 tcp: %zu vs %.0f", small_message_threshold(t, 4), p4);
  double p3 = t.alpha_shm_s / ((3 - 4.0 / 3) / t.beta_bytes_per_s + (2 - 2.0 / 3) / t.gamma_bytes_per_s);
  CHECK(near(small_message_threshold(t, 3, true), p3), "p=3 shm");
  CHECK(small_message_threshold(t, 2, true) < small_message_threshold(t, 2, false), "shm hop is cheaper");
  Tuning slow = t;
  slow.alpha_s = 1.0;  // absurd latency: capped at 1 MiB
  CHECK(small_message_threshold(slow, 2) == (size_t(1) << 20), "cap");
  Tuning fixed = t;
  fixed.small_threshold_bytes = 123;
  fixed.segment_bytes = 4096;
  CHECK(small_message_threshold(fixed, 4, true) == 123 && segment_size(fixed, 1 << 20, true) == 4096, "overrides");
  CHECK(segment_size(t, 0, false) == (size_t(512) << 10), "tcp segment %zu", segment_size(t, 0, false));
  CHECK(segment_size(t, 0, true) == (size_t(256) << 10), "shm segment %zu", segment_size(t, 0, true));
  // 3 MiB + 1 byte over TCP: 7 segments of nearly equal size (not 6 full ones and a sliver), rounded up
  // to 64 bytes: ceil(3145729 / 7) = 449390 -> 449408.
  CHECK(segment_size(t, (size_t(3) << 20) + 1, false) == 449408, "balanced %zu",
        segment_size(t, (size_t(3) << 20) + 1, false));
}

}  // namespace

int main() {
  auto t0 = Clock::now();
  Tuning many_segments;
  many_segments.segment_bytes = 64;       // dozens of segments per chunk
  many_segments.max_segments_in_flight = 2;
  Tuning defaults;
  AllreduceFn ring = [](const Comm& c, void* b, size_t n, DataType dt, ReduceOp op, const Tuning& t) {
    ring_allreduce(c, b, n, dt, op, t, soon());
  };
  AllreduceFn small = [](const Comm& c, void* b, size_t n, DataType dt, ReduceOp op, const Tuning&) {
    small_allreduce(c, b, n, dt, op, soon());
  };
  AllreduceFn chosen = [](const Comm& c, void* b, size_t n, DataType dt, ReduceOp op, const Tuning& t) {
    allreduce(c, b, n, dt, op, t, soon());
  };
  // Out of place: the operands move to a separate input (checked unchanged after) and b starts as garbage.
  auto out_of_place =
      [](std::function<void(const Comm&, void*, size_t, DataType, ReduceOp, const Tuning&, const void*)> run) {
        return [run](const Comm& c, void* b, size_t n, DataType dt, ReduceOp op, const Tuning& t) {
          const size_t bytes = n * dtype_size(dt);
          std::vector<char> input(static_cast<char*>(b), static_cast<char*>(b) + bytes), saved = input;
          std::memset(b, 0x6b, bytes);
          run(c, b, n, dt, op, t, input.data());
          CHECK(input == saved, "rank %d %s %s count=%zu: the input changed", c.rank(), dtype_name(dt),
                reduce_op_name(op), n);
        };
      };
  AllreduceFn ring_from = out_of_place([](const Comm& c, void* b, size_t n, DataType dt, ReduceOp op, const Tuning& t,
                                          const void* in) { ring_allreduce(c, b, n, dt, op, t, soon(), 1.0, in); });
  AllreduceFn chosen_from = out_of_place([](const Comm& c, void* b, size_t n, DataType dt, ReduceOp op, const Tuning& t,
                                            const void* in) { allreduce(c, b, n, dt, op, t, soon(), 1.0, in); });
  Tuning force_binomial, force_chain = many_segments;
  force_binomial.small_threshold_bytes = size_t(1) << 30;
  force_chain.small_threshold_bytes = 1;
  test_tuning();
  for (int p : kWorlds) {
    test_allreduce(p, "ring_allreduce(seg 64)", ring, many_segments);
    test_allreduce(p, "ring_allreduce(default)", ring, defaults);
    test_allreduce(p, "small_allreduce", small, defaults);
    test_allreduce(p, "allreduce", chosen, defaults);
    test_allreduce(p, "ring_allreduce(seg 64, out of place)", ring_from, many_segments);
    test_allreduce(p, "ring_allreduce(default, out of place)", ring_from, defaults);
    test_allreduce(p, "allreduce(out of place)", chosen_from, defaults);
    test_out_of_place_postscale(p, many_segments);
    test_identical(p, "ring_allreduce(seg 64)", ring, many_segments);
    test_identical(p, "small_allreduce", small, defaults);
    test_large_allreduce(p);
    test_allgather(p, many_segments);
    test_allgather(p, defaults);
    test_broadcast(p, force_binomial, "broadcast(binomial)");
    test_broadcast(p, force_chain, "broadcast(chain)");
    test_broadcast(p, defaults, "broadcast(default)");
    test_broadcast(p, force_binomial, "broadcast(binomial, out of place)", true);
    test_broadcast(p, force_chain, "broadcast(chain, out of place)", true);
    test_broadcast(p, defaults, "broadcast(default, out of place)", true);
    test_alltoall(p);
    test_reducescatter(p, many_segments);
    test_reducescatter(p, defaults);
    test_barrier(p);
    std::printf("world size %d done (%.1f s)\n", p, std::chrono::duration<double>(Clock::now() - t0).count());
    std::fflush(stdout);
  }
  // The reducing algorithms again, with zero-copy receives (RecvSink pieces of 3 elements).
  g_in_place = true;
  for (int p : kWorlds) {
    test_allreduce(p, "ring_allreduce(seg 64, in place)", ring, many_segments);
    test_allreduce(p, "ring_allreduce(default, in place)", ring, defaults);
    test_allreduce(p, "ring_allreduce(seg 64, in place world, out of place)", ring_from, many_segments);
    test_out_of_place_postscale(p, many_segments);
    test_identical(p, "ring_allreduce(seg 64, in place)", ring, many_segments);
    test_large_allreduce(p);
    test_reducescatter(p, many_segments);
    test_allgather(p, many_segments);
    test_broadcast(p, force_chain, "broadcast(chain, in place world)");
  }
  std::printf("in-place receives done (%.1f s)\n", std::chrono::duration<double>(Clock::now() - t0).count());
  g_in_place = false;
  test_subsets_and_concurrency();
  test_errors();
  std::printf("all done (%.1f s)\n", std::chrono::duration<double>(Clock::now() - t0).count());
  return finish("algorithms_test");
}
