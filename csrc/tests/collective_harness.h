// Shared by the collective tests: a world of ranks as threads over MemoryTransport (checked with
// tests/check.h), and typed small-integer inputs whose reductions are exact in every dtype.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/reduce.h"
#include "common/types.h"
#include "tests/check.h"
#include "transport/memory_transport.h"

namespace phv {
namespace testing {

inline const int kWorlds[] = {1, 2, 3, 4, 5, 8};
inline const size_t kCounts[] = {0, 1, 2, 3, 7, 13, 31, 33, 63, 65, 127, 129, 257, 1021, 1025};
inline const DataType kTypes[] = {DataType::UINT8,   DataType::INT8,    DataType::INT16,    DataType::INT32,
                                  DataType::INT64,   DataType::FLOAT16, DataType::BFLOAT16, DataType::FLOAT32,
                                  DataType::FLOAT64, DataType::BOOL};
inline const ReduceOp kOps[] = {ReduceOp::SUM, ReduceOp::MIN, ReduceOp::MAX, ReduceOp::PRODUCT};

inline Deadline soon() { return deadline_after(20.0); }

// When set, run_world's transports hand reduce-phase receives to RecvSinks (zero-copy receive, as over
// shared memory) instead of copying them into scratch.
inline bool g_in_place = false;

// Runs body(comm) on `p` threads (comm = all ranks). An exception on one rank is reported and aborts
// the world, so the others fail fast instead of waiting for their deadlines.
inline void run_world(int p, const std::string& what, const std::function<void(const Comm&)>& body) {
  auto transports = make_memory_transports(p, g_in_place);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      Comm comm;
      comm.transport = transports[static_cast<size_t>(r)].get();
      for (int i = 0; i < p; ++i) comm.members.push_back(i);
      comm.my_index = r;
      try {
        body(comm);
      } catch (const std::exception& e) {
        CHECK(false, "%s: rank %d threw: %s", what.c_str(), r, e.what());
        static_cast<MemoryTransport*>(comm.transport)->abort_world(what + ": rank " + std::to_string(r) + " failed");
      }
    });
  }
  for (auto& t : threads) t.join();
}

// ---------------------------------------------------------------- typed element access (small integers)

inline void store(DataType dt, void* buf, size_t i, int64_t v) {
  switch (dt) {
    case DataType::UINT8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case DataType::INT8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case DataType::INT16: static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v); break;
    case DataType::INT32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::INT64: static_cast<int64_t*>(buf)[i] = v; break;
    case DataType::FLOAT16: static_cast<uint16_t*>(buf)[i] = float_to_half(static_cast<float>(v)); break;
    case DataType::BFLOAT16: static_cast<uint16_t*>(buf)[i] = float_to_bfloat16(static_cast<float>(v)); break;
    case DataType::FLOAT32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::FLOAT64: static_cast<double*>(buf)[i] = static_cast<double>(v); break;
    case DataType::BOOL: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v != 0); break;
  }
}
inline double load(DataType dt, const void* buf, size_t i) {
  switch (dt) {
    case DataType::UINT8: return static_cast<const uint8_t*>(buf)[i];
    case DataType::INT8: return static_cast<const int8_t*>(buf)[i];
    case DataType::INT16: return static_cast<const int16_t*>(buf)[i];
    case DataType::INT32: return static_cast<const int32_t*>(buf)[i];
    case DataType::INT64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::FLOAT16: return half_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::BFLOAT16: return bfloat16_to_float(static_cast<const uint16_t*>(buf)[i]);
    case DataType::FLOAT32: return static_cast<const float*>(buf)[i];
    case DataType::FLOAT64: return static_cast<const double*>(buf)[i];
    case DataType::BOOL: return static_cast<const uint8_t*>(buf)[i];
  }
  return 0;
}
inline bool is_unsigned(DataType dt) { return dt == DataType::UINT8 || dt == DataType::BOOL; }

// Input of rank r at element i: small integers whose reduction over <= 8 ranks is exact in every type
// (products use {-1, 1, 2}: |result| <= 256; sums stay within int8).
inline int64_t input(DataType dt, ReduceOp op, int r, size_t i) {
  if (dt == DataType::BOOL) return static_cast<int64_t>((i * 7 + static_cast<size_t>(r) * 3 + i / 5) % 3 != 0);
  int64_t h = static_cast<int64_t>((i * 7 + static_cast<size_t>(r) * 5 + (i / 3) * static_cast<size_t>(r)) % 7);
  if (op == ReduceOp::PRODUCT) return is_unsigned(dt) ? 1 + h % 2 : (h % 3 == 0 ? -1 : 1 + h % 2);
  return is_unsigned(dt) ? h : h - 3;
}
inline int64_t expected(DataType dt, ReduceOp op, int p, size_t i) {
  int64_t acc = input(dt, op, 0, i);
  for (int r = 1; r < p; ++r) {
    int64_t v = input(dt, op, r, i);
    switch (op) {
      case ReduceOp::SUM: acc = dt == DataType::BOOL ? (acc | v) : acc + v; break;
      case ReduceOp::PRODUCT: acc = dt == DataType::BOOL ? (acc & v) : acc * v; break;
      case ReduceOp::MIN: acc = std::min(acc, v); break;
      default: acc = std::max(acc, v); break;
    }
  }
  return acc;
}

}  // namespace testing
}  // namespace phv
