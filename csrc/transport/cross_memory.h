// Single copies between ranks of one host. Cross-memory attach (CMA): process_vm_readv(2) copies bytes
// straight from another process's address space into ours, process_vm_writev(2) from ours into another's:
// one copy where a shared-memory ring costs two (into the ring, out of it). The owner publishes a buffer's
// address and length (a small message over the transport); the peer copies from or into it; the owner
// keeps the buffer for it until the peer says it is done (algorithms/direct_copy.h).
//
// Permission: the kernel lets a process read another's memory only where it could ptrace it, which a
// Yama ptrace_scope, a container's seccomp profile or separate pid namespaces can refuse even for the same
// user. So it is probed at connect on every same-host pair, for real: each rank sends its pid and the
// address of a word holding a random value, reads the peer's word and reports whether it found the value
// (a wrong pid -- another pid namespace -- reads something else or fails). A second exchange gives every
// rank the same answer: single copies are on only if every pair of the job can read each other, and all
// ranks asked for them; otherwise every rank keeps the rings (a clean fallback, logged once).
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/types.h"

namespace phv {

// PYHOROVOD_SHM_DIRECT_BYTES unset: single copies move pieces of at least kDefaultDirectBytes, or of at
// least kOversubscribedDirectBytes where the host runs more ranks than the CPUs they may run on
// (benchmarks/RESULTS.md, "The single-copy threshold" and "The threshold where a host has more ranks than
// CPUs"). With the engine's outputs on whole huge pages, paired against
// the two-copy rings: from 1 MiB pieces the single copy was as fast or faster; at 512 KiB the ring still
// won at 2 ranks (43 against 58 us). With 4 ranks on 2 cores the ring's hand-offs wait for the peer to be
// scheduled, and single copies won from 256 KiB pieces (a 1 MiB alltoall: 452 -> 241 us; a 2 MiB
// allgather: 1184 -> 443 us). The single copy also escapes this machine's slow state, which slows every
// ring hand-off. A broadcast keeps kDefaultDirectBytes there: its chain beat single copies of 1 and
// 2 MiB at 4 ranks on 2 cores (93 against 178 us, 187 against 327).
constexpr size_t kDefaultDirectBytes = size_t(1) << 20;
constexpr size_t kOversubscribedDirectBytes = size_t(256) << 10;
// A threshold asking for that choice (ConnectOptions' default): resolved at connect, the same on every rank.
constexpr size_t kDirectBytesAuto = ~size_t(0);
// The threshold while the negotiation has widened single copies (engine/copy_path_vote.h): in the slow state
// single copies of 64 KiB pieces took 10 us against the ring's 20, of 256 KiB 22 against 69 (2 ranks).
constexpr size_t kWideDirectBytes = size_t(64) << 10;

// The kernel's copy (copy_user: `rep movsb` on CPUs with fast strings) slows down 1.5-5x when source and
// destination do not start at the same offset within a 32-byte block, a misalignment that glibc's memcpy
// in user space handles at no cost: 64 MiB through process_vm_writev in 4.0 ms with both at offset 0 or
// both at 16, 7.0 ms from offset 16 into offset 0 (benchmarks/RESULTS.md, "Where the kernel's copy
// slows"). Memory we allocate for a peer to copy into or out of therefore starts at the same offset
// within a 64-byte line as the far side's buffer (or, unknown, as our own input: peers run the same
// program and place their buffers alike).
constexpr size_t kCopyLineBytes = 64;

// Where `address` lies within its 64-byte line, rounded down to a multiple of item_bytes (a power of two):
// memory placed by it holds elements of that size, aligned as an element-aligned address leaves them.
inline size_t copy_phase(uint64_t address, size_t item_bytes) {
  return static_cast<size_t>(address % kCopyLineBytes) & ~(item_bytes - 1);
}

// The first address at or after `base` whose copy phase is `phase`: a buffer of kCopyLineBytes more than it
// holds can start anywhere a copy needs it to.
inline char* at_copy_phase(char* base, size_t phase) {
  const size_t now = static_cast<size_t>(reinterpret_cast<uintptr_t>(base) % kCopyLineBytes);
  return base + (phase + kCopyLineBytes - now) % kCopyLineBytes;
}

struct CrossMemory {
  size_t direct_bytes = 0;    // agreed threshold, the same on every rank; 0: off
  size_t broadcast_direct_bytes = 0;  // the same for a broadcast (Transport::broadcast_direct_bytes)
  std::vector<pid_t> pids;    // index: rank; the peers' process ids (0 where unknown)
};

// Collective over every connected pair (fds[p] valid for p != rank), after setup_shm_links: local[p] says
// that the pair shares a ring (the same on both ends); all_local is setup_shm_links' answer (the same on
// every rank): without it nothing is exchanged and the result is off. want_bytes: this rank's threshold
// (0: off; kDirectBytesAuto: chosen from the ranks and CPUs of the host). refuse_probe (a test hook):
// report the probe as refused without trying it. Small fixed-size messages; throws HvdError on a broken
// connection.
CrossMemory setup_cross_memory(int rank, const std::vector<int>& fds, const std::vector<std::string>& addrs,
                               const std::vector<bool>& local, bool all_local, size_t want_bytes, bool refuse_probe,
                               Deadline deadline);

// Copies len bytes at address `remote` of process pid into dst, continuing after partial reads and
// retrying on EINTR. Returns 0, or the errno of the failure (EFAULT for a read that stopped short).
int cross_memory_read(pid_t pid, uint64_t remote, void* dst, size_t len);
// The other way (process_vm_writev): len bytes of src into process pid at `remote`. The kernel checks the
// same permission for writes as for reads, so the connect-time probe of reads covers both.
int cross_memory_write(pid_t pid, uint64_t remote, const void* src, size_t len);

}  // namespace phv
