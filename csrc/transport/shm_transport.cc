#include "transport/shm_transport.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "common/error.h"
#include "common/logging.h"
#include "common/sha256.h"
#include "rendezvous/handshake.h"
#include "rendezvous/socket.h"

namespace phv {

// The control block of one direction. head: bytes ever published (only the producer stores it); tail:
// bytes ever released (only the consumer). Each field has its own cache line so the two sides do not
// false-share. The mapping is [ring 0 | ring 1 | pad to kCtlBytes | data 0 | data 1]; the creator
// produces into ring 0.
struct ShmLink::Ring {
  alignas(64) std::atomic<uint64_t> head;
  alignas(64) std::atomic<uint64_t> tail;
  alignas(64) std::atomic<uint32_t> reader_sleeping;
  alignas(64) std::atomic<uint32_t> writer_sleeping;
};

namespace {

constexpr size_t kCtlBytes = 4096;  // control blocks; the data starts page-aligned after them
constexpr size_t kMinRing = size_t(64) << 10;
constexpr size_t kMaxRing = size_t(256) << 20;
constexpr size_t kNameBytes = 64;
static_assert(2 * sizeof(ShmLink::Ring) <= kCtlBytes, "control blocks must fit their page");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "rings need address-free atomics");

size_t map_bytes_for(size_t ring_bytes) { return kCtlBytes + 2 * ring_bytes; }

size_t round_ring(size_t want) {
  size_t r = kMinRing;
  while (r < want && r < kMaxRing) r *= 2;
  return r;
}

// Names are /phv-<creator pid>-<random>-<lower rank>-<higher rank>. The creator unlinks its name as soon
// as the peer has mapped it (or on any error), so a name outlives set-up only if the creator was killed
// inside that window; such names are removed by the next set-up on this host (the name only: live
// mappings stay valid, and a peer that has not opened it yet falls back to TCP).
void remove_stale_names() {
  DIR* dir = opendir("/dev/shm");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, "phv-", 4) != 0) continue;
    long pid = std::strtol(e->d_name + 4, nullptr, 10);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      shm_unlink((std::string("/") + e->d_name).c_str());
  }
  closedir(dir);
}

void* map_fd(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

ShmLink::ShmLink(void* base, size_t map_bytes, size_t ring_bytes, End end)
    : base_(base), map_bytes_(map_bytes), ring_bytes_(ring_bytes) {
  Ring* rings = static_cast<Ring*>(base);
  char* data = static_cast<char*>(base) + kCtlBytes;
  const bool creator = end == End::CREATOR;
  out_ = creator ? &rings[0] : &rings[1];
  in_ = creator ? &rings[1] : &rings[0];
  out_data_ = creator ? data : data + ring_bytes;
  in_data_ = creator ? data + ring_bytes : data;
  // A fresh mapping is zero-filled: both positions start at 0 on both sides.
  head_ = out_->head.load(std::memory_order_relaxed);
  tail_ = in_->tail.load(std::memory_order_relaxed);
  seen_tail_ = out_->tail.load(std::memory_order_relaxed);
  seen_head_ = in_->head.load(std::memory_order_relaxed);
}

ShmLink::~ShmLink() { munmap(base_, map_bytes_); }

size_t ShmLink::free_space() {
  seen_tail_ = out_->tail.load(std::memory_order_acquire);
  return ring_bytes_ - static_cast<size_t>(head_ - seen_tail_);
}

void ShmLink::put(size_t at, const void* src, size_t len) {
  const size_t mask = ring_bytes_ - 1;
  size_t off = (head_ + at) & mask, first = std::min(len, ring_bytes_ - off);
  std::memcpy(out_data_ + off, src, first);
  if (len > first) std::memcpy(out_data_, static_cast<const char*>(src) + first, len - first);
}

void ShmLink::publish(size_t n) {
  head_ += n;
  out_->head.store(head_, std::memory_order_seq_cst);
}

size_t ShmLink::available() {
  seen_head_ = in_->head.load(std::memory_order_acquire);
  return static_cast<size_t>(seen_head_ - tail_);
}

void ShmLink::get(size_t at, void* dst, size_t len) const {
  const size_t mask = ring_bytes_ - 1;
  size_t off = (tail_ + at) & mask, first = std::min(len, ring_bytes_ - off);
  std::memcpy(dst, in_data_ + off, first);
  if (len > first) std::memcpy(static_cast<char*>(dst) + first, in_data_, len - first);
}

const char* ShmLink::view(size_t at, size_t* contiguous) const {
  size_t off = (tail_ + at) & (ring_bytes_ - 1);
  *contiguous = ring_bytes_ - off;
  return in_data_ + off;
}

void ShmLink::release(size_t n) {
  tail_ += n;
  in_->tail.store(tail_, std::memory_order_seq_cst);
}

bool ShmLink::tail_moved() const { return out_->tail.load(std::memory_order_relaxed) != seen_tail_; }
bool ShmLink::head_moved() const { return in_->head.load(std::memory_order_relaxed) != seen_head_; }

bool ShmLink::sleep_until_readable() {
  in_->reader_sleeping.store(1, std::memory_order_seq_cst);
  if (in_->head.load(std::memory_order_seq_cst) != seen_head_) {
    in_->reader_sleeping.store(0, std::memory_order_relaxed);
    return false;
  }
  return true;
}

bool ShmLink::sleep_until_writable() {
  out_->writer_sleeping.store(1, std::memory_order_seq_cst);
  if (out_->tail.load(std::memory_order_seq_cst) != seen_tail_) {
    out_->writer_sleeping.store(0, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void ShmLink::clear_sleep_flags() {
  in_->reader_sleeping.store(0, std::memory_order_relaxed);
  out_->writer_sleeping.store(0, std::memory_order_relaxed);
}

bool ShmLink::peer_wants_data() {
  return out_->reader_sleeping.load(std::memory_order_seq_cst) != 0 && out_->reader_sleeping.exchange(0) != 0;
}

bool ShmLink::peer_wants_space() {
  return in_->writer_sleeping.load(std::memory_order_seq_cst) != 0 && in_->writer_sleeping.exchange(0) != 0;
}

std::string shm_host_id() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat st{};
  stat("/dev/shm", &st);
  return std::string(host) + "|" + boot + "|" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

std::vector<std::unique_ptr<ShmLink>> setup_shm_links(int rank, const std::vector<int>& fds,
                                                      const std::vector<std::string>& addrs, bool enable,
                                                      size_t ring_bytes, Deadline deadline, bool* all_local) {
  const int size = static_cast<int>(fds.size());
  std::vector<std::unique_ptr<ShmLink>> links(size);
  auto who = [&](int p) { return "rank " + std::to_string(p) + " (" + addrs[p] + ")"; };
  // Phase 1-2: every rank tells every peer {enabled, hash of host id}; each side decides the same way.
  std::string id = shm_host_id();
  Digest id_hash = sha256(id.data(), id.size());
  uint8_t mine[33];
  mine[0] = enable ? 1 : 0;
  std::memcpy(mine + 1, id_hash.data(), 32);
  for (int p = 0; p < size; ++p)
    if (p != rank) send_all(fds[p], mine, sizeof(mine), deadline, who(p));
  std::vector<char> same(size, 0);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    uint8_t theirs[33];
    recv_all(fds[p], theirs, sizeof(theirs), deadline, who(p));
    same[p] = enable && theirs[0] == 1 && std::memcmp(theirs + 1, mine + 1, 32) == 0;
  }
  if (all_local) {
    *all_local = enable && size > 1;
    for (int p = 0; p < size; ++p)
      if (p != rank && !same[p]) *all_local = false;
  }
  // Phase 3: the lower rank of each same-host pair creates the mapping and sends its name ("" = failed).
  std::vector<std::string> names(size);
  std::vector<void*> maps(size, nullptr);
  std::vector<size_t> map_sizes(size, 0);
  const size_t my_ring = round_ring(ring_bytes);
  if (enable) remove_stale_names();
  try {
    for (int p = rank + 1; p < size; ++p) {
      if (!same[p]) continue;
      uint8_t rnd[12];
      random_bytes(rnd, sizeof(rnd));
      std::string name = "/phv-" + std::to_string(getpid()) + "-" + to_hex(rnd, sizeof(rnd)) + "-" +
                         std::to_string(rank) + "-" + std::to_string(p);
      int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
      if (fd >= 0) {
        map_sizes[p] = map_bytes_for(my_ring);
        if (ftruncate(fd, static_cast<off_t>(map_sizes[p])) == 0) maps[p] = map_fd(fd, map_sizes[p]);
        ::close(fd);
        if (maps[p]) names[p] = name;
        else shm_unlink(name.c_str());
      }
      if (names[p].empty())
        log(LogLevel::WARNING, "rank ", rank, ": shared memory with ", who(p), " unavailable (", errno_text(errno),
            "); using TCP");
      char msg[kNameBytes] = {0};
      std::memcpy(msg, names[p].data(), names[p].size());
      send_all(fds[p], msg, sizeof(msg), deadline, who(p));
    }
    // Phase 4: the higher rank maps it and acknowledges (1) or declines (0).
    for (int p = 0; p < rank; ++p) {
      if (!same[p]) continue;
      char msg[kNameBytes];
      recv_all(fds[p], msg, sizeof(msg), deadline, who(p));
      msg[kNameBytes - 1] = 0;
      std::string name(msg);
      uint8_t ack = 0;
      if (!name.empty() && name.rfind("/phv-", 0) == 0) {
        int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
        struct stat st{};
        size_t ring = 0;
        if (fd >= 0 && fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) > kCtlBytes) {
          ring = (static_cast<size_t>(st.st_size) - kCtlBytes) / 2;
          bool ok = ring >= kMinRing && ring <= kMaxRing && (ring & (ring - 1)) == 0 &&
                    map_bytes_for(ring) == static_cast<size_t>(st.st_size);
          if (ok) {
            map_sizes[p] = map_bytes_for(ring);
            maps[p] = map_fd(fd, map_sizes[p]);
          }
        }
        if (fd >= 0) ::close(fd);
        if (maps[p]) {
          links[p] = std::make_unique<ShmLink>(maps[p], map_sizes[p], ring, ShmLink::End::ATTACHED);
          ack = 1;
        }
      }
      send_all(fds[p], &ack, 1, deadline, who(p));
    }
    // Phase 5: the creator unlinks the name (both sides hold the mapping now) and keeps the link if acked.
    for (int p = rank + 1; p < size; ++p) {
      if (!same[p]) continue;
      uint8_t ack = 0;
      recv_all(fds[p], &ack, 1, deadline, who(p));
      if (!names[p].empty()) shm_unlink(names[p].c_str());
      names[p].clear();
      if (ack == 1 && maps[p])
        links[p] = std::make_unique<ShmLink>(maps[p], map_sizes[p], my_ring, ShmLink::End::CREATOR);
      else if (maps[p]) munmap(maps[p], map_sizes[p]);
      maps[p] = nullptr;
    }
  } catch (...) {
    // A peer died or timed out mid-way: leave no name behind and no mapping that no link owns.
    for (int p = 0; p < size; ++p) {
      if (!names[p].empty()) shm_unlink(names[p].c_str());
      if (maps[p] && !links[p]) munmap(maps[p], map_sizes[p]);
    }
    throw;
  }
  return links;
}

}  // namespace phv
