#include "transport/cross_memory.h"

#include <errno.h>
#include <sched.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/byte_codec.h"
#include "common/logging.h"
#include "rendezvous/handshake.h"
#include "rendezvous/socket.h"

namespace phv {
namespace {

// One process_vm_readv (or writev) call moves at most this much, so a huge read is a series of bounded system calls
// (the kernel pins the pages of each call) rather than one that pins gigabytes.
constexpr size_t kMaxReadBytes = size_t(64) << 20;
constexpr size_t kProbeBytes = 24;  // {pid u64, address u64, value u64}, little-endian
// {threshold u64, every pair of mine can read u8, this rank's CPU affinity mask}
constexpr size_t kMaskBytes = sizeof(cpu_set_t);
constexpr size_t kAgreeBytes = 9 + kMaskBytes;

}  // namespace

namespace {

// process_vm_readv (write false) or process_vm_writev (write true) of len bytes between `mine` and
// `remote` in pid, in bounded calls, continuing after partial transfers and retrying on EINTR.
int cross_memory_copy(pid_t pid, uint64_t remote, void* mine, size_t len, bool write) {
  size_t done = 0;
  while (done < len) {
    const size_t n = std::min(len - done, kMaxReadBytes);
    iovec local{static_cast<char*>(mine) + done, n};
    iovec far{reinterpret_cast<void*>(static_cast<uintptr_t>(remote + done)), n};
    ssize_t got = write ? process_vm_writev(pid, &local, 1, &far, 1, 0) : process_vm_readv(pid, &local, 1, &far, 1, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (got == 0) return EFAULT;  // a partial copy stops at the first inaccessible page: nothing moved here
    done += static_cast<size_t>(got);
  }
  return 0;
}

}  // namespace

int cross_memory_read(pid_t pid, uint64_t remote, void* dst, size_t len) {
  return cross_memory_copy(pid, remote, dst, len, false);
}

int cross_memory_write(pid_t pid, uint64_t remote, const void* src, size_t len) {
  // process_vm_writev only reads the local iovec; its type is just not const.
  return cross_memory_copy(pid, remote, const_cast<void*>(src), len, true);
}

CrossMemory setup_cross_memory(int rank, const std::vector<int>& fds, const std::vector<std::string>& addrs,
                               const std::vector<bool>& local, bool all_local, size_t want_bytes, bool refuse_probe,
                               Deadline deadline) {
  const int size = static_cast<int>(fds.size());
  CrossMemory out;
  out.pids.assign(static_cast<size_t>(size), 0);
  if (size <= 1 || !all_local) return out;
  auto who = [&](int p) { return "rank " + std::to_string(p) + " (" + addrs[p] + ")"; };
  // Round 1, same-host pairs: publish {pid, &word, word}; read the peer's word; tell the peer what we saw.
  // `word` stays on this stack until the peer's verdict arrives, i.e. after the peer has read it.
  uint64_t word = 0;
  random_bytes(&word, sizeof(word));
  uint8_t mine[kProbeBytes];
  store_le<uint64_t>(mine, static_cast<uint64_t>(getpid()));
  store_le<uint64_t>(mine + 8, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&word)));
  store_le<uint64_t>(mine + 16, word);
  for (int p = 0; p < size; ++p)
    if (p != rank && local[p]) send_all(fds[p], mine, sizeof(mine), deadline, who(p));
  std::vector<uint8_t> verdict(static_cast<size_t>(size), 0);
  int refused_errno = 0;
  for (int p = 0; p < size; ++p) {
    if (p == rank || !local[p]) continue;
    uint8_t theirs[kProbeBytes];
    recv_all(fds[p], theirs, sizeof(theirs), deadline, who(p));
    out.pids[p] = static_cast<pid_t>(load_le<uint64_t>(theirs));
    uint64_t seen = ~load_le<uint64_t>(theirs + 16);
    int err = refuse_probe ? EPERM : cross_memory_read(out.pids[p], load_le<uint64_t>(theirs + 8), &seen, 8);
    verdict[p] = err == 0 && seen == load_le<uint64_t>(theirs + 16);
    if (!verdict[p] && refused_errno == 0) refused_errno = err ? err : ESRCH;
  }
  for (int p = 0; p < size; ++p)
    if (p != rank && local[p]) send_all(fds[p], &verdict[p], 1, deadline, who(p));
  bool all_mine = true;  // every peer is on this host and we can read each other both ways
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    uint8_t theirs = 0;
    if (local[p]) recv_all(fds[p], &theirs, 1, deadline, who(p));
    all_mine = all_mine && local[p] && verdict[p] && theirs == 1;
  }
  // Round 2, every pair: {threshold, all_mine, CPU mask}. On only if every rank can and wants; the largest
  // threshold wins, an automatic one resolved from the union of the masks (the same on every rank).
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) CPU_ZERO(&cpus);  // unknown: counts as no CPU of its own
  uint8_t agree[kAgreeBytes];
  store_le<uint64_t>(agree, want_bytes);
  agree[8] = all_mine ? 1 : 0;
  std::memcpy(agree + 9, &cpus, kMaskBytes);
  for (int p = 0; p < size; ++p)
    if (p != rank) send_all(fds[p], agree, sizeof(agree), deadline, who(p));
  std::vector<uint64_t> wants{want_bytes};
  bool on = all_mine;
  cpu_set_t all = cpus;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    uint8_t theirs[kAgreeBytes];
    recv_all(fds[p], theirs, sizeof(theirs), deadline, who(p));
    wants.push_back(load_le<uint64_t>(theirs));
    on = on && theirs[8] == 1;
    cpu_set_t mask;
    std::memcpy(&mask, theirs + 9, kMaskBytes);
    CPU_OR(&all, &all, &mask);
  }
  const size_t automatic = size > CPU_COUNT(&all) ? kOversubscribedDirectBytes : kDefaultDirectBytes;
  size_t bytes = 0, broadcast_bytes = 0;
  for (uint64_t w : wants) {
    on = on && w > 0;
    bytes = std::max<size_t>(bytes, w == kDirectBytesAuto ? automatic : static_cast<size_t>(w));
    broadcast_bytes =
        std::max<size_t>(broadcast_bytes, w == kDirectBytesAuto ? kDefaultDirectBytes : static_cast<size_t>(w));
  }
  out.direct_bytes = on ? bytes : 0;
  out.broadcast_direct_bytes = on ? broadcast_bytes : 0;
  if (refused_errno != 0 && want_bytes > 0)
    log(LogLevel::WARNING, "rank ", rank, ": single-copy reads from peers on this host refused (",
        refuse_probe ? std::string("probe refused by the test hook") : errno_text(refused_errno),
        "); large messages keep the two-copy shared-memory path");
  return out;
}

}  // namespace phv
