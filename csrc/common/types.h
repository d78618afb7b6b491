// Element types, reduction ops and the clock used for every deadline in the core.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace phv {

// Numbering is part of the Python binding contract (pyhorovod/_core.pyi): do not reorder.
enum class DataType : int {
  UINT8 = 0,
  INT8 = 1,
  INT16 = 2,
  INT32 = 3,
  INT64 = 4,
  FLOAT16 = 5,
  BFLOAT16 = 6,
  FLOAT32 = 7,
  FLOAT64 = 8,
  BOOL = 9,
};

// AVERAGE is SUM followed by a postscale of 1/size (done by the engine, not by kernels). ADASUM is not
// element-wise (common/adasum.h): float tensors on the host, allreduce only (adasum_allreduce).
enum class ReduceOp : int { SUM = 0, AVERAGE = 1, MIN = 2, MAX = 3, PRODUCT = 4, ADASUM = 5 };

enum class OpType : int {
  ALLREDUCE = 0,
  ALLGATHER = 1,
  BROADCAST = 2,
  ALLTOALL = 3,
  REDUCESCATTER = 4,
  BARRIER = 5,
  JOIN = 6,
};

size_t dtype_size(DataType dt);
const char* dtype_name(DataType dt);
const char* reduce_op_name(ReduceOp op);
const char* op_type_name(OpType op);
// "[2, 3]": a shape, or any list of ranks, as every message of the core writes it.
std::string shape_str(const std::vector<int64_t>& shape);

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Clock::duration seconds_to_duration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

inline Deadline deadline_after(double seconds) { return Clock::now() + seconds_to_duration(seconds); }

}  // namespace phv
