// Single-copy reads and writes (transport/cross_memory.h, algorithms/direct_copy.h) between threads of one
// process over TcpTransport with shared memory: cross_memory_read and _write of our own memory (exact
// bytes, a bad address -> EFAULT, a missing process -> ESRCH); the connect-time agreement (on only where every rank can and
// wants, the largest threshold; off on every rank when one rank's probe is refused or one rank turns it
// off, and over TCP); allgather, broadcast, alltoall and reducescatter taking the single copy, with exact
// results, uneven blocks, an in-place allgather, and alltoall mixing copied and ring blocks; the single-copy
// allreduce with every op, in place, out of place and both mixed, over several pieces, chosen only while
// the negotiated mode is on and the buffer is large enough; a failing read or write names our rank, the peer
// and the op.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>

#include "algorithms/algorithms.h"
#include "algorithms/direct_copy.h"
#include "common/error.h"
#include "rendezvous/memory_store.h"
#include "tests/check.h"
#include "tests/mesh_harness.h"
#include "transport/cross_memory.h"
#include "transport/tcp_transport.h"

using namespace phv;
using namespace phv::testing;

namespace {

struct Setup {
  bool shm = true;
  size_t want = 256;  // every rank's threshold ...
  int odd_rank = -1;  // ... but this rank's, which is odd_want
  size_t odd_want = 0;
  int refuse_rank = -1;  // this rank's probe reports refused
};

std::vector<std::unique_ptr<TcpTransport>> make_mesh(MemoryStore& store, int n, const std::string& prefix,
                                                     const Setup& s) {
  return phv::testing::make_mesh(store, n, [&](int r) {
    MeshOptions o = mesh_options(r, n, prefix, s.shm);
    o.shm_ring_bytes = 64 << 10;
    o.shm_direct_bytes = r == s.odd_rank ? s.odd_want : s.want;
    o.shm_direct_refuse_probe = r == s.refuse_rank;
    return o;
  });
}

void run(std::vector<std::unique_ptr<TcpTransport>>& mesh, const std::function<void(const Comm&)>& body) {
  const int n = static_cast<int>(mesh.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Comm comm;
      comm.transport = mesh[r].get();
      for (int i = 0; i < n; ++i) comm.members.push_back(i);
      comm.my_index = r;
      try {
        body(comm);
      } catch (const std::exception& e) {
        CHECK(false, "rank %d threw: %s", r, e.what());
        mesh[r]->close();  // the others fail fast instead of waiting for their deadlines
      }
    });
  for (auto& t : threads) t.join();
}

Deadline soon() { return deadline_after(20.0); }

int32_t value(int rank, size_t i) { return static_cast<int32_t>((i * (2 * rank + 3) + rank) % 61) - 30; }

void test_read_own_memory() {
  std::vector<char> src((3 << 20) + 5), dst(src.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 2654435761u >> 7);
  CHECK(cross_memory_read(getpid(), reinterpret_cast<uintptr_t>(src.data()), dst.data(), dst.size()) == 0);
  CHECK(dst == src);
  CHECK(cross_memory_read(getpid(), 8, dst.data(), 16) == EFAULT);
  CHECK(cross_memory_read(getpid(), 0, dst.data(), 0) == 0);
  CHECK(cross_memory_read(0x7ffffff0, reinterpret_cast<uintptr_t>(src.data()), dst.data(), 16) == ESRCH);
  std::printf("ok   cross_memory_read of our own memory\n");
  std::vector<char> back(src.size());
  CHECK(cross_memory_write(getpid(), reinterpret_cast<uintptr_t>(back.data()), src.data(), src.size()) == 0);
  CHECK(back == src);
  CHECK(cross_memory_write(getpid(), 8, src.data(), 16) == EFAULT);
  CHECK(cross_memory_write(0x7ffffff0, reinterpret_cast<uintptr_t>(back.data()), src.data(), 16) == ESRCH);
  std::printf("ok   cross_memory_write into our own memory\n");
}

void test_agreement() {
  MemoryStore store;
  auto expect_all = [&](const char* what, const Setup& s, size_t want) {
    auto mesh = make_mesh(store, 3, what, s);
    for (auto& t : mesh)
      expect(t->direct_bytes() == want, std::string("agreement: ") + what, std::to_string(t->direct_bytes()));
  };
  expect_all("on", Setup{}, 256);
  expect_all("largest-wins", Setup{true, 256, 1, 4096, -1}, 4096);
  expect_all("one-off", Setup{true, 256, 2, 0, -1}, 0);
  expect_all("one-refused", Setup{true, 256, -1, 0, 1}, 0);
  expect_all("tcp", Setup{false, 256, -1, 0, -1}, 0);
}

void test_collectives(int n) {
  MemoryStore store;
  auto mesh = make_mesh(store, n, "coll" + std::to_string(n), Setup{});
  const std::string at = " at " + std::to_string(n) + " ranks";
  run(mesh, [&](const Comm& comm) {
    const int r = comm.rank();
    // allgather: blocks of 1000 + 7q bytes (above the 256-byte threshold on average), out of place and in place
    std::vector<size_t> bytes(n);
    size_t total = 0;
    for (int q = 0; q < n; ++q) total += bytes[q] = 1000 + 7 * q;
    std::vector<char> mine(bytes[r]), out(total), want(total);
    for (size_t i = 0, off = 0; i < static_cast<size_t>(n); off += bytes[i], ++i)
      for (size_t k = 0; k < bytes[i]; ++k) want[off + k] = static_cast<char>(value(static_cast<int>(i), k));
    for (size_t k = 0; k < mine.size(); ++k) mine[k] = static_cast<char>(value(r, k));
    allgatherv(comm, mine.data(), out.data(), bytes, Tuning{}, soon());
    expect(out == want, "allgather" + at);
    std::vector<char> inplace(total);
    size_t my_off = 0;
    for (int q = 0; q < r; ++q) my_off += bytes[q];
    std::memcpy(inplace.data() + my_off, mine.data(), mine.size());
    allgatherv(comm, inplace.data() + my_off, inplace.data(), bytes, Tuning{}, soon());
    expect(inplace == want, "allgather in place" + at);
    // broadcast from every root
    for (int root = 0; root < n; ++root) {
      std::vector<int32_t> buf(5000), expect_buf(5000);
      for (size_t i = 0; i < buf.size(); ++i) buf[i] = value(r, i), expect_buf[i] = value(root, i);
      broadcast(comm, buf.data(), buf.size() * 4, root, Tuning{}, soon());
      expect(buf == expect_buf, "broadcast from " + std::to_string(root) + at);
    }
    // alltoall: rank r sends 100 * (1 + (r + j) % 3) int32 to rank j: 400 bytes go through the ring, the rest
    // are read in place
    std::vector<size_t> sb(n), rb(n);
    size_t stotal = 0, rtotal = 0;
    for (int j = 0; j < n; ++j) {
      stotal += sb[j] = 400 * (1 + (r + j) % 3);
      rtotal += rb[j] = 400 * (1 + (j + r) % 3);
    }
    std::vector<int32_t> send(stotal / 4), recv(rtotal / 4), expect_recv(rtotal / 4);
    for (size_t j = 0, off = 0; j < static_cast<size_t>(n); off += sb[j] / 4, ++j)
      for (size_t k = 0; k < sb[j] / 4; ++k) send[off + k] = value(r, k + 7 * j);
    for (size_t j = 0, off = 0; j < static_cast<size_t>(n); off += rb[j] / 4, ++j)
      for (size_t k = 0; k < rb[j] / 4; ++k) expect_recv[off + k] = value(static_cast<int>(j), k + 7 * r);
    const std::vector<int32_t> send_before = send;
    alltoallv(comm, send.data(), sb, recv.data(), rb, soon());
    expect(recv == expect_recv && send == send_before, "alltoall, mixed blocks" + at);
    // reducescatter (SUM, int32): uneven blocks of 300 + q elements
    std::vector<size_t> counts(n);
    size_t count = 0;
    for (int q = 0; q < n; ++q) count += counts[q] = 300 + q;
    std::vector<int32_t> in(count), rs_out(counts[r]);
    for (size_t i = 0; i < count; ++i) in[i] = value(r, i);
    const std::vector<int32_t> in_before = in;
    reducescatter(comm, in.data(), rs_out.data(), counts, DataType::INT32, ReduceOp::SUM, Tuning{}, soon());
    size_t start = 0;
    for (int q = 0; q < r; ++q) start += counts[q];
    bool ok = in == in_before;
    for (size_t i = 0; i < counts[r]; ++i) {
      int32_t sum = 0;
      for (int q = 0; q < n; ++q) sum += value(q, start + i);
      ok = ok && rs_out[i] == sum;
    }
    expect(ok, "reducescatter" + at);
    CHECK(use_direct(comm, 256) && !use_direct(comm, 255));
  });
}

// The single-copy allreduce (direct_allreduce.cc), called directly: int32 over 2.5 pieces (1 MiB each) of
// rank 0's block, uneven blocks, every op; ranks in place and out of place at once (a joined rank reduces in
// place while the others pass their input); a float32 AVERAGE's postscale; the choice in allreduce().
void test_allreduce(int n) {
  MemoryStore store;
  auto mesh = make_mesh(store, n, "allreduce" + std::to_string(n), Setup{});
  const std::string at = " at " + std::to_string(n) + " ranks";
  run(mesh, [&](const Comm& comm) {
    const int r = comm.rank();
    const size_t count = n * (size_t(5) << 20) / 8 + 3;  // rank 0's block: 2.5 MiB of int32
    for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MIN, ReduceOp::MAX, ReduceOp::PRODUCT}) {
      std::vector<int32_t> want(count);
      for (size_t i = 0; i < count; ++i) {
        int32_t acc = value(0, i);
        for (int q = 1; q < n; ++q) {
          const int32_t v = value(q, i);
          if (op == ReduceOp::SUM) acc += v;
          if (op == ReduceOp::MIN) acc = std::min(acc, v);
          if (op == ReduceOp::MAX) acc = std::max(acc, v);
          if (op == ReduceOp::PRODUCT)
            acc = static_cast<int32_t>(static_cast<uint32_t>(acc) * static_cast<uint32_t>(v));
        }
        want[i] = acc;
      }
      for (int in_place_rank : {-1, 1 % n, n}) {  // -1: every rank out of place; n: every rank in place
        std::vector<int32_t> in(count), buf(count, 7);
        for (size_t i = 0; i < count; ++i) in[i] = value(r, i);
        const std::vector<int32_t> before = in;
        if (in_place_rank == n || in_place_rank == r) {
          direct_allreduce(comm, in.data(), count, DataType::INT32, op, soon());
          buf = in;
        } else {
          direct_allreduce(comm, buf.data(), count, DataType::INT32, op, soon(), 1.0, in.data());
          expect(in == before, "allreduce left its input" + at);
        }
        expect(buf == want, "allreduce op " + std::to_string(static_cast<int>(op)) + ", in place at rank " +
                                std::to_string(in_place_rank) + at);
      }
    }
    std::vector<float> avg(count);
    for (size_t i = 0; i < count; ++i) avg[i] = static_cast<float>(n * value(r, i));
    direct_allreduce(comm, avg.data(), count, DataType::FLOAT32, ReduceOp::SUM, soon(), 1.0 / n);
    bool ok = true;
    for (size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int q = 0; q < n; ++q) sum += static_cast<float>(value(q, i));
      ok = ok && avg[i] == sum;
    }
    expect(ok, "allreduce average" + at);
    // The choice: eligible from kDirectAllreduceMinBytes; taken only while the negotiated mode is on.
    CHECK(!direct_allreduce_eligible(comm, kDirectAllreduceMinBytes - 1));
    CHECK(direct_allreduce_eligible(comm, kDirectAllreduceMinBytes));
    CHECK(!use_direct_allreduce(comm, kDirectAllreduceMinBytes));
    comm.transport->set_single_copy_allreduce(true);
    CHECK(use_direct_allreduce(comm, kDirectAllreduceMinBytes));
    std::vector<int32_t> big(kDirectAllreduceMinBytes / 4, r + 1);
    allreduce(comm, big.data(), big.size(), DataType::INT32, ReduceOp::SUM, Tuning{}, soon());
    comm.transport->set_single_copy_allreduce(false);
    expect(big == std::vector<int32_t>(big.size(), n * (n + 1) / 2), "allreduce() through single copies" + at);
  });
}

void test_read_failure() {
  MemoryStore store;
  auto mesh = make_mesh(store, 2, "fail", Setup{});
  char buf[16];
  expect_error("a read of an unmapped address", ErrorKind::INTERNAL,
               {"rank 0", "rank 1", "allgather", "single-copy read of 16 bytes"},
               [&] { mesh[0]->read_direct(1, 8, buf, sizeof(buf), "allgather"); });
  auto again = make_mesh(store, 2, "fail-write", Setup{});
  expect_error("a write to an unmapped address", ErrorKind::INTERNAL,
               {"rank 0", "rank 1", "broadcast", "single-copy write of 16 bytes"},
               [&] { again[0]->write_direct(1, 8, buf, sizeof(buf), "broadcast"); });
}

}  // namespace

int main() {
  setvbuf(stdout, nullptr, _IONBF, 0);
  alarm(120);  // hard limit: a hang is a failure
  test_read_own_memory();
  test_agreement();
  for (int n : {2, 3, 4}) test_collectives(n);
  for (int n : {2, 3, 4}) test_allreduce(n);
  test_read_failure();
  return finish("cross_memory_test");
}
