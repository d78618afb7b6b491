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
// input (ALLREDUCE, REDUCE_SCATTER): where this rank's operands are when not in buf (out of place; it
// must not overlap buf, and it is only read). Every reduction of the reduce phase is then the first write
// of its range of buf, buf = input (op) received, and the first step sends from input: the result lands in
// buf without a copy of input into it first (a whole pass over memory: a 16 MiB allreduce at 2 ranks took
// 3.8 ms that way against 1.5 ms in place). A range never reduced here (the chunk sent first) is
// overwritten by the copy phase (ALLREDUCE); REDUCE_SCATTER leaves it, as it leaves every other rank's.
void run_ring(const Comm& comm, void* buf, const std::vector<Range>& chunks, DataType dt, ReduceOp op, RingKind kind,
              const Tuning& tuning, Deadline deadline, double postscale = 1.0, const void* input = nullptr);

}  // namespace phv
