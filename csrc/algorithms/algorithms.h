// Collective algorithms over a Comm. They move bytes only through Transport (never sockets) and reduce
// only through common/reduce.h. All buffers are host memory. All calls are collective over comm and
// blocking until done or `deadline`; a failure throws HvdError (the engine adds op/name context).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>
#include "algorithms/tuning.h"
#include "common/types.h"
#include "transport/transport.h"

namespace phv {

// In place: buf (count elements of dt) becomes the reduction over all ranks, times postscale
// (scale_buffer's rounding). op: SUM/MIN/MAX/PRODUCT (AVERAGE is SUM with postscale 1/size), or ADASUM
// (adasum_allreduce with one tensor). Chooses the
// small-message algorithm or the pipelined ring by size (tuning.h), or, while the negotiation has chosen it,
// the single-copy allreduce for large buffers (direct_copy.h). The ring scales only the chunk each
// rank owns, once it is fully reduced and before it is passed on: 1/p of the buffer per rank instead of
// a pass over all of it afterwards.
// input: out of place, this rank's operands (count elements, not overlapping buf, only read); buf then
// only receives the result. The ring takes its operands from input directly (ring_pipeline.h); the other
// algorithms copy input into buf first.
void allreduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, const Tuning& tuning,
               Deadline deadline, double postscale = 1.0, const void* input = nullptr);

// Pipelined ring (reduce-scatter then allgather), and the latency-optimal small-message algorithm;
// exposed for tests and benchmarks. allreduce() picks between them.
void ring_allreduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, const Tuning& tuning,
                    Deadline deadline, double postscale = 1.0, const void* input = nullptr);
void small_allreduce(const Comm& comm, void* buf, size_t count, DataType dt, ReduceOp op, Deadline deadline);

// Adasum (common/adasum.h) over buf, which holds tensors of counts[0], counts[1], .. elements end to end:
// every tensor becomes the Adasum of all ranks' copies of it, dot products taken per tensor. Float types
// only; any set size (see adasum_allreduce.cc for how ranks beyond a power of two are folded in).
// allreduce() with op ADASUM calls it with one tensor.
void adasum_allreduce(const Comm& comm, void* buf, const std::vector<size_t>& counts, DataType dt, Deadline deadline,
                      double postscale = 1.0);

// recv receives the concatenation of every rank's block in rank order; bytes_per_rank[r] is rank r's
// block size (blocks may differ, may be 0). send holds my block (bytes_per_rank[comm.rank()] bytes);
// send may alias recv + offset of my block.
void allgatherv(const Comm& comm, const void* send, void* recv, const std::vector<size_t>& bytes_per_rank,
                const Tuning& tuning, Deadline deadline);

// buf (bytes) on root is copied to every rank's buf. input (the root's; ignored elsewhere): out of place,
// the bytes to broadcast when not in buf (not overlapping it; only read); the root's buf gets them too.
void broadcast(const Comm& comm, void* buf, size_t bytes, int root, const Tuning& tuning, Deadline deadline,
               const void* input = nullptr);

// send_bytes[r]: how many bytes of `send` (consecutive blocks, rank order) go to rank r;
// recv_bytes[r]: how many bytes arrive from rank r into `recv` (consecutive blocks, rank order).
void alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
               const std::vector<size_t>& recv_bytes, Deadline deadline);

// Every rank passes the full input (sum of counts elements); rank r receives block r (counts[r]
// elements, blocks consecutive in rank order) of the reduction. Ring reduce-scatter, pipelined.
void reducescatter(const Comm& comm, const void* input, void* output, const std::vector<size_t>& counts, DataType dt,
                   ReduceOp op, const Tuning& tuning, Deadline deadline);

void barrier(const Comm& comm, Deadline deadline);

}  // namespace phv
