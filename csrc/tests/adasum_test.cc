// Adasum (common/adasum.h, algorithms adasum_allreduce) with ranks as threads over MemoryTransport,
// world sizes 1..8, every float type, against a float64 reference of the same tree (fold ranks beyond the
// largest power of two into rank i, then combine the lower and upper half of every group of 2d ranks for
// d = 1, 2, ..), rounded to the tensor's type after each combination as the algorithm stores it.
// Exact cases: orthogonal vectors (disjoint supports) add, equal vectors come back unchanged (averaged).
// Several tensors in one buffer take their dot products per tensor; all ranks end with the same bits;
// process-set communicators (a subset of the ranks), the kernels' zero-vector rule, and the engine's
// refusal of Adasum on CUDA tensors, integer tensors and in reducescatter.
#include <cmath>
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "common/adasum.h"
#include "engine/validate.h"
#include "tests/collective_harness.h"

using namespace phv;
using namespace phv::testing;

namespace {

const DataType kFloatTypes[] = {DataType::FLOAT16, DataType::BFLOAT16, DataType::FLOAT32, DataType::FLOAT64};

// x rounded to dt (16-bit floats through float32, as the kernels store them).
double round_to(DataType dt, double x) {
  switch (dt) {
    case DataType::FLOAT16: return half_to_float(float_to_half(static_cast<float>(x)));
    case DataType::BFLOAT16: return bfloat16_to_float(float_to_bfloat16(static_cast<float>(x)));
    case DataType::FLOAT32: return static_cast<float>(x);
    default: return x;
  }
}
void put(DataType dt, void* buf, size_t i, double x) {
  switch (dt) {
    case DataType::FLOAT16: static_cast<uint16_t*>(buf)[i] = float_to_half(static_cast<float>(x)); break;
    case DataType::BFLOAT16: static_cast<uint16_t*>(buf)[i] = float_to_bfloat16(static_cast<float>(x)); break;
    case DataType::FLOAT32: static_cast<float*>(buf)[i] = static_cast<float>(x); break;
    default: static_cast<double*>(buf)[i] = x; break;
  }
}
// Relative size of one unit in the last place.
double ulp(DataType dt) {
  switch (dt) {
    case DataType::FLOAT16: return 1.0 / 1024;
    case DataType::BFLOAT16: return 1.0 / 128;
    case DataType::FLOAT32: return 1.0 / (1 << 23);
    default: return 1.0 / (1ull << 52);
  }
}

using Vec = std::vector<double>;

// adasum(a, b) of one tensor in float64, rounded to dt.
Vec adasum_ref(const Vec& a, const Vec& b, DataType dt) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  double ca = aa > 0 ? 1 - ab / (2 * aa) : 1, cb = bb > 0 ? 1 - ab / (2 * bb) : 1;
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = round_to(dt, ca * a[i] + cb * b[i]);
  return out;
}

// The tree of adasum_allreduce.cc over vectors[r] (one tensor per rank).
Vec tree_ref(std::vector<Vec> v, DataType dt) {
  const int p = static_cast<int>(v.size());
  int p2 = 1;
  while (p2 * 2 <= p) p2 *= 2;
  for (int i = 0; i < p - p2; ++i) v[i] = adasum_ref(v[i], v[p2 + i], dt);
  for (int d = 1; d < p2; d *= 2)
    for (int g = 0; g < p2; g += 2 * d) v[g] = adasum_ref(v[g], v[g + d], dt);
  return v[0];
}

// Rank r's tensor t: a part shared by all ranks (so dot products are far from 0) plus a part of its own.
double value(int r, size_t t, size_t i) {
  double scale = 1.0 + 3.0 * static_cast<double>(t);  // tensors of different sizes and scales
  return scale * (std::cos(0.11 * static_cast<double>(i) + static_cast<double>(t)) +
                  0.7 * std::sin(0.37 * static_cast<double>(i) + 1.3 * r + 0.5 * static_cast<double>(t)));
}

// Runs adasum_allreduce on the ranks `members` of a p-rank world over tensors of `counts` elements and
// checks every rank's result against the reference, within 4 ulps of the tensor's largest value, or
// 1e-13 of it for float64: the core adds its dot products in another order (per rank, then across ranks),
// and the float64 rounding of those sums moves the coefficients by more than a float64 ulp.
void check_tree(int p, const std::vector<int>& members, DataType dt, const std::vector<size_t>& counts) {
  const int k = static_cast<int>(members.size());
  size_t total = 0;
  for (size_t c : counts) total += c;
  const size_t es = dtype_size(dt);
  std::vector<std::vector<char>> results(static_cast<size_t>(k));
  run_world(p, "adasum", [&](const Comm& world) {
    int me = -1;
    for (int j = 0; j < k; ++j) me = members[static_cast<size_t>(j)] == world.rank() ? j : me;
    if (me < 0) return;
    Comm comm{world.transport, members, me};
    std::vector<char> buf(total * es + 1, 0x5a);
    for (size_t t = 0, off = 0; t < counts.size(); off += counts[t++])
      for (size_t i = 0; i < counts[t]; ++i) put(dt, buf.data(), off + i, value(me, t, i));
    adasum_allreduce(comm, buf.data(), counts, dt, soon());
    results[static_cast<size_t>(me)] = buf;
  });
  for (int j = 0; j < k; ++j) {
    const std::vector<char>& got = results[static_cast<size_t>(j)];
    CHECK(got.size() == total * es + 1 && static_cast<unsigned char>(got.back()) == 0x5a,
          "adasum p=%d k=%d %s: rank %d result missing or written past the end", p, k, dtype_name(dt), j);
    if (got.size() != total * es + 1) return;
    CHECK(std::memcmp(got.data(), results[0].data(), total * es) == 0,
          "adasum p=%d k=%d %s: rank %d differs from rank 0", p, k, dtype_name(dt), j);
  }
  for (size_t t = 0, off = 0; t < counts.size(); off += counts[t++]) {
    std::vector<Vec> inputs(static_cast<size_t>(k), Vec(counts[t]));
    for (int r = 0; r < k; ++r)
      for (size_t i = 0; i < counts[t]; ++i) inputs[static_cast<size_t>(r)][i] = round_to(dt, value(r, t, i));
    Vec want = tree_ref(inputs, dt);
    double big = 0;
    for (double w : want) big = std::max(big, std::fabs(w));
    for (size_t i = 0; i < counts[t]; ++i) {
      double g = load(dt, results[0].data(), off + i);
      CHECK(std::fabs(g - want[i]) <= std::max(4 * ulp(dt), 1e-13) * big,
            "adasum p=%d k=%d %s tensor %zu (of %zu) i=%zu: got %.17g want %.17g", p, k, dtype_name(dt), t, counts[t],
            i, g, want[i]);
    }
  }
}

// Orthogonal (rank r owns the elements i % k == r): the exact sum. Equal: the vector itself.
void check_exact(int p, DataType dt, size_t count) {
  const size_t es = dtype_size(dt);
  run_world(p, "adasum exact", [&](const Comm& comm) {
    const int r = comm.rank();
    std::vector<char> orth(count * es), same(count * es);
    for (size_t i = 0; i < count; ++i) {
      double v = static_cast<double>(static_cast<int>(i % 13) - 6);
      put(dt, orth.data(), i, static_cast<int>(i % static_cast<size_t>(p)) == r ? v : 0.0);
      put(dt, same.data(), i, v * 0.25);
    }
    adasum_allreduce(comm, orth.data(), {count}, dt, soon());
    adasum_allreduce(comm, same.data(), {count}, dt, soon());
    for (size_t i = 0; i < count; ++i) {
      double v = static_cast<double>(static_cast<int>(i % 13) - 6);
      CHECK(load(dt, orth.data(), i) == v, "adasum orthogonal p=%d %s i=%zu: got %g want %g", p, dtype_name(dt), i,
            load(dt, orth.data(), i), v);
      CHECK(load(dt, same.data(), i) == v * 0.25, "adasum equal p=%d %s i=%zu: got %g want %g", p, dtype_name(dt), i,
            load(dt, same.data(), i), v * 0.25);
    }
  });
}

void check_kernels() {
  AdasumDots zero{0, 0, 4};  // a = 0: both coefficients finite, a's is 1
  double ca, cb;
  adasum_coefficients(zero, ca, cb);
  CHECK(ca == 1 && cb == 1, "zero vector: coefficients %g %g, want 1 1", ca, cb);
  for (DataType dt : kFloatTypes) {
    const size_t n = 1000, es = dtype_size(dt);
    std::vector<char> a(n * es), b(n * es);
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; ++i) {
      put(dt, a.data(), i, value(0, 0, i));
      put(dt, b.data(), i, value(1, 0, i));
      double x = load(dt, a.data(), i), y = load(dt, b.data(), i);
      ab += x * y;
      aa += x * x;
      bb += y * y;
    }
    AdasumDots d;
    adasum_dots(a.data(), b.data(), n, dt, d);
    CHECK(std::fabs(d.ab - ab) < 1e-12 * aa && std::fabs(d.aa - aa) < 1e-12 * aa && std::fabs(d.bb - bb) < 1e-12 * bb,
          "adasum_dots %s: (%g %g %g), want (%g %g %g)", dtype_name(dt), d.ab, d.aa, d.bb, ab, aa, bb);
    bool threw = false;
    try {
      adasum_dots(a.data(), b.data(), 1, DataType::INT32, d);
    } catch (const HvdError&) {
      threw = true;
    }
    CHECK(threw, "adasum_dots accepted int32");
  }
}

// The engine refuses Adasum where it has no algorithm for it: CUDA tensors, integer tensors, reducescatter.
void check_validation() {
  float data[4] = {1, 2, 3, 4};
  auto refused = [&](OpType type, DataType dt, int device, const char* text) {
    Request req;
    req.type = type;
    req.name = "t";
    req.dtype = dt;
    req.shape = {4};
    req.input = data;
    req.output = data;
    req.reduce_op = ReduceOp::ADASUM;
    req.device = device;
    try {
      validate_request(req, 2);
    } catch (const HvdError& e) {
      CHECK(e.kind() == ErrorKind::INVALID_ARGUMENT && std::strstr(e.what(), text) != nullptr,
            "Adasum refused with '%s', want '%s'", e.what(), text);
      return;
    }
    CHECK(false, "Adasum accepted (%s, %s, device %d)", op_type_name(type), dtype_name(dt), device);
  };
  refused(OpType::ALLREDUCE, DataType::FLOAT32, 0, "host tensors only");
  refused(OpType::ALLREDUCE, DataType::INT32, -1, "needs a float16");
  refused(OpType::REDUCESCATTER, DataType::FLOAT32, -1, "allreduce");
  Request ok;
  ok.name = "t";
  ok.shape = {4};
  ok.input = data;
  ok.output = data;
  ok.reduce_op = ReduceOp::ADASUM;
  CHECK(validate_request(ok, 2).op == ReduceOp::ADASUM, "a host float32 Adasum allreduce is accepted");
}

}  // namespace

int main() {
  check_kernels();
  check_validation();
  const std::vector<size_t> one_tensor{1029};
  const std::vector<size_t> several{5, 0, 17, 1, 64, 3};  // boundaries fall inside the halves
  for (int p : {1, 2, 3, 4, 5, 6, 7, 8}) {
    std::vector<int> all;
    for (int r = 0; r < p; ++r) all.push_back(r);
    for (DataType dt : kFloatTypes) {
      check_tree(p, all, dt, one_tensor);
      check_tree(p, all, dt, several);
      check_tree(p, all, dt, {1});
      check_exact(p, dt, 101);
    }
  }
  check_tree(5, {1, 3, 4}, DataType::FLOAT32, {7, 300});  // a process set of 3 out of 5
  check_tree(5, {0, 2, 3, 4}, DataType::FLOAT64, {7, 300});
  return finish("adasum_test");
}
