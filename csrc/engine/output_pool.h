// Reused output memory for allgather/alltoall through the engine (Result.output), and for the new arrays
// that allreduce, broadcast and reducescatter return to Python (bindings/owned_array.h, new_output_array).
//
// Those outputs are allocated by the engine and handed to Python (a numpy array owns them through a
// capsule). A fresh 64 MiB buffer costs page faults on first touch (glibc maps allocations that large with
// mmap and unmaps them on free), and it used to cost a zero fill as well: 16 MiB allgathers at 4 ranks
// took 19.8 ms through the API against 6.8 ms for the raw core into a reused buffer (RESULTS.md). So the
// shared_ptr's deleter hands a released buffer back here, and the next request of a size it can hold
// takes it: a loop that drops each result before the next call touches no new pages. The buffers
// themselves are on whole huge pages (output_bytes.h).
//
// Bounded: at most 4 buffers and 1 GiB wait here; a released buffer pushes out the oldest waiting ones
// (a loop of one size always finds its buffer, whatever sizes came before). Outputs under 128 KiB bypass the
// pool (malloc serves them from its heap). A request takes a waiting buffer only if that is at most
// twice its size. One pool per process, never destroyed (deleters may run at interpreter exit, after any
// engine is gone).
#pragma once
#include <cstddef>

#include "engine/output_bytes.h"

namespace phv {

// The new arrays that allreduce, broadcast and reducescatter return come from the pool from this size up
// (a huge page). Smaller ones are numpy's own: malloc serves them from its heap, already faulted in, and
// the pool's bookkeeping cost more than it saved (an asynchronous 2-rank allreduce of 0.25-1 MiB: 1-7%
// slower pooled; 4-64 MiB: 6-49% faster; RESULTS.md, "Out of place without the copy").
constexpr size_t kPooledNewOutputBytes = size_t(2) << 20;

// bytes of output memory starting at offset `lead` within a 64-byte line (copy_phase of the request's
// input; 0-63): contents unspecified (a reused buffer keeps old bytes; the caller overwrites).
OutputBytes take_output_buffer(size_t bytes, size_t lead = 0);

}  // namespace phv
