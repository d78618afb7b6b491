// What a rank asks the engine to do, and what it gets back.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "common/norm_tap.h"
#include "common/types.h"
#include "engine/output_bytes.h"

namespace phv {

struct Request {
  OpType type = OpType::ALLREDUCE;
  std::string name;                 // unique among in-flight requests of this rank ("" -> engine names it)
  DataType dtype = DataType::FLOAT32;
  std::vector<int64_t> shape;       // element shape; count = product (scalar: empty shape, count 1)
  const void* input = nullptr;      // host pointer (device >= 0: CUDA pointer)
  void* output = nullptr;           // allreduce/broadcast/reducescatter: caller-owned; may equal input
                                    // allgather/alltoall: ignored, the engine allocates (Result.output)
  ReduceOp reduce_op = ReduceOp::SUM;
  double prescale = 1.0;            // multiply inputs before reducing
  double postscale = 1.0;           // multiply results after reducing (AVERAGE adds 1/size here)
  int root = 0;                     // broadcast root, in process-set ranks
  std::vector<int64_t> splits;      // alltoall: rows of dim 0 to send to each rank (empty: equal split)
  int process_set = 0;              // 0 is the global set
  int device = -1;                  // -1 CPU, else CUDA device ordinal
  int64_t stream = 0;               // device >= 0: cudaStream_t the inputs were written on (0 = legacy
                                    // default); the GPU backend orders the collective after it
  int64_t group = 0;                // grouped allreduce: requests with the same nonzero group run as one unit
  int64_t group_size = 0;           // number of requests in that group
  NormTap norm_tap;                 // the noise-scale measurement's hook (common/norm_tap.h)
};

struct Result {
  OutputBytes output;                            // allgather/alltoall output bytes
  std::vector<int64_t> output_shape;             // allgather/alltoall/reducescatter output shape
  std::vector<int64_t> received_splits;          // alltoall: rows received from each rank
  int64_t value = -1;                            // join: the last rank to join
  // allgather/alltoall of CUDA tensors: the output in device memory (GpuBackend::allocate), complete when
  // the request completes; `output` stays empty then. Freed when the last owner lets go.
  std::shared_ptr<void> device_output;
  size_t device_output_bytes = 0;
  int device = -1;
};

}  // namespace phv
