// Internal: the one pipelined ring driver behind ring_allreduce, reducescatter and allgatherv.
#pragma once
#include <vector>

#include "algorithms/ring_schedule.h"
#include "algorithms/tuning.h"
#include "common/types.h"
#include "transport/transport.h"

namespace phv {

enum class RingKind {
  ALLREDUCE,       // 2(p-1) steps, shift 1: reduce phase then copy phase; buf ends fully reduced
  REDUCE_SCATTER,  // p-1 steps, shift 1: chunk r of buf ends holding the reduction of chunk r
  ALLGATHER,       // p-1 steps, shift 0: chunk r of buf is copied to every rank (dt is ignored: bytes)
};

// buf holds sum(chunks.count) elements of dt (for ALLGATHER: bytes, chunks in bytes). Updated in place.
// ALLREDUCE only: postscale multiplies each segment of the chunk this rank owns right after its last
// reduction, before the copy phase sends it on, so every rank ends with the scaled result.
void run_ring(const Comm& comm, void* buf, const std::vector<Range>& chunks, DataType dt, ReduceOp op, RingKind kind,
              const Tuning& tuning, Deadline deadline, double postscale = 1.0);

}  // namespace phv
