// The one interface the engine's executor runs every collective through, whatever memory the buffers
// live in: HostBackend (host_backend.h) runs the host algorithms over the Comm's transport, and
// GpuCollectiveBackend (gpu_collective_backend.h) hands CUDA buffers to this rank's GpuBackend.
//
// The executor keeps what is the engine's business (which requests form a unit, who owns an output,
// the result shapes); a backend owns how the bytes move and reduce, including every choice among
// algorithms (small-message, ring, two-level, Adasum) and any scratch or fusion buffer it needs.
// Every call is collective over comm and blocking until done; failures throw HvdError.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>
#include "common/types.h"
#include "transport/transport.h"

namespace phv {

// One tensor of an allreduce unit (several are fused into one reduction). A host entry with a null
// input stands for a tensor this rank does not have (it joined): it contributes the reduction's
// identity and its result is discarded (output is null too).
struct BufferEntry {
  const void* input;
  void* output;  // may equal input
  size_t count;  // elements
  intptr_t stream = 0;  // CUDA: producer stream of this entry when it differs from the call's
};

// The steps of an allreduce that the engine's timeline shows as spans of their own.
enum class Phase { COPY_IN, REDUCE, COPY_OUT };
enum class Edge { BEGIN, END };

class PhaseObserver {
 public:
  virtual ~PhaseObserver() = default;
  virtual void mark(Phase phase, Edge edge) = 0;
};

// What every call carries besides its buffers.
struct CallContext {
  Deadline deadline;                  // host transfers give up at this point (TIMEOUT)
  intptr_t stream = 0;                // CUDA: the stream the inputs were written on (0: legacy default)
  PhaseObserver* phases = nullptr;    // allreduce only; may be null
  void mark(Phase phase, Edge edge) const {
    if (phases != nullptr) phases->mark(phase, edge);
  }
};

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;

  // Every entry's output becomes the reduction over all ranks of its input, scaled by prescale before
  // and postscale after (AVERAGE has been turned into SUM with a postscale by the caller). op ADASUM
  // takes its dot products per entry.
  virtual void allreduce(const Comm& comm, const std::vector<BufferEntry>& entries, DataType dt, ReduceOp op,
                         double prescale, double postscale, const CallContext& ctx) = 0;
  // recv gets every rank's block in rank order; bytes_per_rank[r] is rank r's block (may be 0).
  virtual void allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes_per_rank,
                          const CallContext& ctx) = 0;
  // buf on every rank becomes root's input (root copies input into buf first when they differ).
  virtual void broadcast(const Comm& comm, const void* input, void* buf, size_t bytes, int root,
                         const CallContext& ctx) = 0;
  // send_bytes[r] of send go to rank r, recv_bytes[r] arrive from rank r (consecutive blocks, rank order).
  virtual void alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
                         const std::vector<size_t>& recv_bytes, const CallContext& ctx) = 0;
  // Every rank passes the full input (sum of counts elements); rank r receives block r of the reduction,
  // scaled by prescale before and postscale after.
  virtual void reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts,
                             DataType dt, ReduceOp op, double prescale, double postscale, const CallContext& ctx) = 0;
  virtual void barrier(const Comm& comm, const CallContext& ctx) = 0;
};

}  // namespace phv
