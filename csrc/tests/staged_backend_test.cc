// The host-staged GPU backend (cuda_staged_backend.cc) on host memory, against the fake CUDA runtime of
// tests/fake_cuda (copies happen only once their event is polled complete): ranks as threads over
// MemoryTransport, every collective, dtype and reduce op at 1-4 ranks, fused entries (one in place),
// prescale/postscale, uneven blocks. A result read before its copies were waited for comes out stale.
#include <string>
#include <vector>

#include "backends/cuda_backends.h"
#include "tests/collective_harness.h"

using namespace phv;
using namespace phv::testing;

namespace {

bool is_float(DataType dt) {
  return dt == DataType::FLOAT16 || dt == DataType::BFLOAT16 || dt == DataType::FLOAT32 || dt == DataType::FLOAT64;
}

using Bytes = std::vector<char>;

// Three fused entries (the middle one in place) of every op; floats also with prescale 2, postscale 0.5.
void allreduce(GpuBackend& gpu, const Comm& comm, DataType dt, int p) {
  const size_t counts[] = {5, 1025, 3};
  size_t es = dtype_size(dt);
  for (ReduceOp op : kOps) {
    for (double pre : {1.0, 2.0}) {
      if (pre != 1.0 && (!is_float(dt) || op != ReduceOp::SUM)) continue;
      std::vector<Bytes> in(3), out(3);
      std::vector<GpuEntry> entries;
      size_t base = 0;
      for (int k = 0; k < 3; ++k) {
        in[k].resize(counts[k] * es);
        out[k].resize(counts[k] * es);
        for (size_t i = 0; i < counts[k]; ++i) store(dt, in[k].data(), i, input(dt, op, comm.rank(), base + i));
        entries.push_back(GpuEntry{in[k].data(), k == 1 ? static_cast<void*>(in[k].data()) : out[k].data(), counts[k]});
        base += counts[k];
      }
      gpu.allreduce(comm, entries, dt, op, pre, 1.0 / pre, 0);
      base = 0;
      for (int k = 0; k < 3; ++k) {
        const char* res = k == 1 ? in[k].data() : out[k].data();
        for (size_t i = 0; i < counts[k]; ++i) {
          double want = static_cast<double>(expected(dt, op, p, base + i));
          CHECK(load(dt, res, i) == want, " allreduce %s %s p %d entry %d [%zu]: %g, want %g", dtype_name(dt),
                reduce_op_name(op), p, k, i, load(dt, res, i), want);
        }
        base += counts[k];
      }
    }
  }
}

// Uneven blocks everywhere: rank q owns q + 1 (allgather), sends q + 1 rows to q (alltoall), keeps q + 2
// elements (reducescatter); broadcast from the last rank.
void others(GpuBackend& gpu, const Comm& comm, DataType dt, int p) {
  int r = comm.rank();
  size_t es = dtype_size(dt);
  auto value = [&](int q) { return dt == DataType::BOOL ? int64_t{1} : int64_t{q % 3 + 1}; };

  std::vector<size_t> bytes;
  for (int q = 0; q < p; ++q) bytes.push_back(static_cast<size_t>(q + 1) * es);
  Bytes mine(static_cast<size_t>(r + 1) * es), all(static_cast<size_t>(p * (p + 1) / 2) * es);
  for (int i = 0; i <= r; ++i) store(dt, mine.data(), static_cast<size_t>(i), value(r));
  gpu.allgatherv(comm, mine.data(), all.data(), bytes, 0);
  size_t at = 0;
  for (int q = 0; q < p; ++q)
    for (int i = 0; i <= q; ++i, ++at)
      CHECK(load(dt, all.data(), at) == value(q), " allgather %s p %d from %d", dtype_name(dt), p, q);

  Bytes b(7 * es);
  for (size_t i = 0; i < 7; ++i) store(dt, b.data(), i, r == p - 1 ? value(1) : 0);
  gpu.broadcast(comm, b.data(), b.size(), p - 1, 0);
  for (size_t i = 0; i < 7; ++i) CHECK(load(dt, b.data(), i) == value(1), " broadcast %s p %d", dtype_name(dt), p);

  std::vector<size_t> send_bytes, recv_bytes;
  Bytes send, recv(static_cast<size_t>((r + 1) * p) * es);
  for (int q = 0; q < p; ++q) {
    send_bytes.push_back(static_cast<size_t>(q + 1) * es);
    recv_bytes.push_back(static_cast<size_t>(r + 1) * es);
    for (int i = 0; i <= q; ++i) {
      send.resize(send.size() + es);
      store(dt, send.data() + send.size() - es, 0, (r + q) % 2);
    }
  }
  gpu.alltoallv(comm, send.data(), send_bytes, recv.data(), recv_bytes, 0);
  at = 0;
  for (int q = 0; q < p; ++q)
    for (int i = 0; i <= r; ++i, ++at)
      CHECK(load(dt, recv.data(), at) == (q + r) % 2, " alltoall %s p %d from %d", dtype_name(dt), p, q);

  std::vector<size_t> counts;
  size_t total = 0;
  for (int q = 0; q < p; ++q) {
    counts.push_back(static_cast<size_t>(q + 2));
    total += static_cast<size_t>(q + 2);
  }
  Bytes in(total * es), out(static_cast<size_t>(r + 2) * es);
  for (size_t i = 0; i < total; ++i) store(dt, in.data(), i, 1);
  double pre = is_float(dt) ? 2.0 : 1.0;
  gpu.reducescatter(comm, in.data(), out.data(), counts, dt, ReduceOp::SUM, pre, 1.0 / pre, 0);
  for (int i = 0; i < r + 2; ++i)
    CHECK(load(dt, out.data(), static_cast<size_t>(i)) == (dt == DataType::BOOL ? 1 : p), " reducescatter %s p %d",
          dtype_name(dt), p);
}

}  // namespace

int main() {
  for (int p : {1, 2, 3, 4}) {
    for (DataType dt : kTypes) {
      run_world(p, std::string("staged ") + dtype_name(dt), [&](const Comm& comm) {
        auto gpu = make_staged_backend(comm.rank(), 0, Tuning{}, 20);
        allreduce(*gpu, comm, dt, p);
        others(*gpu, comm, dt, p);
      });
    }
  }
  return finish("staged_backend_test");
}
