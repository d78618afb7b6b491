#include "transport/tcp_transport.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>

#include <algorithm>

#include "common/logging.h"
#include "transport/shared_memory_link.h"
#include "transport/shm_transport.h"
#include "transport/socket_link.h"

namespace phv {
namespace {

// Default spin before sleeping when shm peers have work: 4 B at n=4 on 2 cores under load took 228 us
// with 0 (sleep at once), 89 us with 20, 108 us with 50, 83 us with 200 (RESULTS.md) --
// of which the first kPauseNs spin with the pause instruction, then every turn yields (spin()).
constexpr int kSpinUs = 50;
constexpr long kPauseNs = 2000;

}  // namespace

TcpTransport::TcpTransport(Store& store, const MeshOptions& options)
    : rank_(options.rank),
      size_(options.size),
      spin_us_(options.shm_spin_us),
      pause_ns_(options.shm_yield > 0 ? 0 : kPauseNs),
      in_place_(options.shm_in_place),
      links_(options.size) {
  const size_t publish_bytes = std::max(
      kShmAlign, (options.shm_publish_bytes ? options.shm_publish_bytes : kShmPublishBytes) / kShmAlign * kShmAlign);
  std::vector<MeshConnection> conns = connect_mesh(store, options, &rejected_);
  std::vector<std::unique_ptr<ShmLink>> rings(size_);
  if (size_ > 1) {
    std::vector<int> fds(size_, -1);
    std::vector<std::string> addrs(size_);
    for (int p = 0; p < size_; ++p) {
      fds[p] = conns[p].fd.get();
      addrs[p] = p == rank_ ? "self" : conns[p].addr;
    }
    rings = setup_shm_links(rank_, fds, addrs, options.shm_enable,
                            options.shm_ring_bytes ? options.shm_ring_bytes : kShmDefaultRingBytes,
                            deadline_after(options.connect_timeout_s), &all_local_);
    int local = 1;
    std::vector<bool> shares(size_, false);
    for (int p = 0; p < size_; ++p) {
      local += rings[p] ? 1 : 0;
      shares[p] = rings[p] != nullptr;
    }
    direct_ = setup_cross_memory(rank_, fds, addrs, shares, all_local_, options.shm_direct_bytes,
                                 options.shm_direct_refuse_probe, deadline_after(options.connect_timeout_s));
    // More ranks sharing memory than CPUs (4 ranks on 2 cores): the peer we wait for is most likely
    // waiting for our CPU, so yield from the first turn (4 B at n=4: 15 us against 24 us with the pause
    // phase; Open MPI 22 us).
    cpu_set_t cpus;
    int ncpu = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    if (options.shm_yield < 0 && local > ncpu) pause_ns_ = 0;
  }
  for (int p = 0; p < size_; ++p) {
    LinkHost& host = *this;
    if (p == rank_) {
      auto self = std::make_unique<SelfLink>(p, host);
      self_ = self.get();
      links_[p] = std::move(self);
    } else if (rings[p]) {
      links_[p] = std::make_unique<SharedMemoryLink>(p, conns[p].addr, std::move(conns[p].fd), std::move(rings[p]),
                                                     publish_bytes, host);
    } else {
      links_[p] =
          std::make_unique<SocketLink>(p, conns[p].addr, std::move(conns[p].fd), options.recv_lowat_bytes, host);
    }
  }
  if (spin_us_ < 0) spin_us_ = kSpinUs;
  if (options.shm_yield == 0) pause_ns_ = 1000L * spin_us_;  // never yield: pause for the whole spin
}

TcpTransport::~TcpTransport() { close(); }

void TcpTransport::close() {
  for (auto& link : links_) link->close();
  pending_ = 0;
  if (!failure_)
    failure_ = std::make_unique<HvdError>(ErrorKind::SHUTDOWN,
                                          "rank " + std::to_string(rank_) + ": the transport has been shut down");
}

void TcpTransport::read_direct(int peer, uint64_t addr, void* dst, size_t len, const char* op) {
  copy_direct(peer, addr, dst, len, false, op);
}

void TcpTransport::write_direct(int peer, uint64_t addr, const void* src, size_t len, const char* op) {
  copy_direct(peer, addr, const_cast<void*>(src), len, true, op);
}

void TcpTransport::copy_direct(int peer, uint64_t addr, void* mine, size_t len, bool write, const char* op) {
  const char* what = write ? "write" : "read";
  check_usable(peer, op);
  if (len == 0) return;
  if (direct_.direct_bytes == 0 || peer == rank_)
    throw_peer_error(ErrorKind::INTERNAL, peer, "rank ", rank_, ": ", op, ": single-copy ", what,
                     write ? " to " : " from ", describe_peer(peer), " without an agreed cross-memory link");
  const int err = write ? cross_memory_write(direct_.pids[peer], addr, mine, len)
                        : cross_memory_read(direct_.pids[peer], addr, mine, len);
  if (err == 0) return;
  // ESRCH: the process is gone. Anything else (EFAULT, EPERM) means the published range was not accessible.
  // Either way the transport fails as a whole, so the peer waiting for our "done" fails at once too.
  fail(err == ESRCH ? ErrorKind::PEER_LOST : ErrorKind::INTERNAL,
       std::string(op) + ": single-copy " + what + " of " + std::to_string(len) + " bytes" +
           (write ? " to " : " from ") + describe_peer(peer) + " failed: " + errno_text(err),
       peer);
}

std::string TcpTransport::describe_peer(int peer) const {
  if (peer < 0 || peer >= size_) return "rank " + std::to_string(peer) + " (no such rank)";
  return links_[peer]->describe();
}

void TcpTransport::check_usable(int peer, const char* what) const {
  if (failure_) throw *failure_;
  PHV_CHECK_ARG(peer >= 0 && peer < size_, "rank ", rank_, ": ", what, " to/from rank ", peer, " which is not in [0, ",
                size_, ")");
}

void TcpTransport::fail(ErrorKind kind, const std::string& message, int peer) {
  std::string text = "rank " + std::to_string(rank_) + ": " + message;
  log(LogLevel::DEBUG, "transport failing: ", text);
  close();  // drops every request (the caller's buffers are no longer referenced) and wakes the peers
  failure_ = std::make_unique<HvdError>(kind, text, peer);
  throw *failure_;
}

Transfer TcpTransport::new_transfer(char* buf, size_t len, RecvSink* sink, size_t grain) {
  ++pending_;
  return Transfer{next_id_++, buf, len, 0, 0, sink, grain, {}, Clock::now()};
}

RequestId TcpTransport::post_send(int peer, const void* buf, size_t len) {
  check_usable(peer, "send");
  PHV_CHECK_ARG(buf != nullptr || len == 0, "rank ", rank_, ": send of ", len, " bytes from a null buffer");
  Transfer t = new_transfer(static_cast<char*>(const_cast<void*>(buf)), len, nullptr, 1);
  links_[peer]->post_send(t);
  return t.id;
}

RequestId TcpTransport::post_recv(int peer, void* buf, size_t len) {
  check_usable(peer, "receive");
  PHV_CHECK_ARG(buf != nullptr || len == 0, "rank ", rank_, ": receive of ", len, " bytes into a null buffer");
  Transfer t = new_transfer(static_cast<char*>(buf), len, nullptr, 1);
  links_[peer]->post_recv(t);
  return t.id;
}

RequestId TcpTransport::post_recv_sink(int peer, size_t len, size_t grain, RecvSink* sink) {
  check_usable(peer, "receive");
  if (!recv_in_place(peer)) return Transport::post_recv_sink(peer, len, grain, sink);  // throws
  PHV_CHECK_ARG(sink != nullptr && grain >= 1 && kShmAlign % grain == 0, "rank ", rank_,
                ": zero-copy receive needs a sink and a grain dividing ", kShmAlign, " (got ", grain, ")");
  Transfer t = new_transfer(nullptr, len, sink, grain);
  links_[peer]->post_recv(t);
  return t.id;
}

void TcpTransport::complete(const Transfer& t) {
  done_.push_back(t.id);
  --pending_;
}

void TcpTransport::start_posted() {
  if (failure_) throw *failure_;
  for (auto& link : links_) link->pump();
}

void TcpTransport::progress(std::vector<RequestId>& completed, Deadline deadline) {
  if (failure_) throw *failure_;
  bool first = true;
  Idle idle;
  begin_idle(idle);
  for (;;) {
    // I/O phase: on the first pass every link moves what it can (data may already be there); later
    // only the links whose sockets poll() reported.
    for (auto& link : links_) link->woke();
    if (first) {
      for (auto& link : links_) link->pump();
    } else {
      for (size_t i = 0; i < pollfds_.size(); ++i)
        if (pollfds_[i].revents) poll_links_[i]->on_poll(pollfds_[i].revents);
    }
    first = false;
    if (!done_.empty()) {
      completed.insert(completed.end(), done_.begin(), done_.end());
      done_.clear();
      return;
    }
    if (pending_ == 0) return;
    if (spin() || !prepare_sleep()) {
      first = true;  // a ring moved: go round again without sleeping
      continue;
    }

    pollfds_.clear();
    poll_links_.clear();
    for (auto& link : links_) {
      short ev = link->poll_events();
      if (!ev) continue;
      pollfds_.push_back({link->fd(), ev, 0});
      poll_links_.push_back(link.get());
    }
    // Only unmatched messages to self are pending: nothing on the network can complete them.
    if (pollfds_.empty())
      fail(ErrorKind::INTERNAL, std::string("a message to self is pending with no matching ") + self_->missing_half());
    int rc = ::poll(pollfds_.data(), pollfds_.size(), before_sleep(idle, deadline));
    if (rc < 0 && errno != EINTR) fail(ErrorKind::INTERNAL, std::string("poll failed: ") + errno_text(errno));
    if (rc == 0 && Clock::now() >= deadline)
      fail(ErrorKind::TIMEOUT, "deadline passed while waiting for " + waiting_for(), first_waiting_peer());
  }
}

bool TcpTransport::spin() {
  // Before sleeping in poll(), poll the rings for up to spin_us_ (or a collective's longer
  // set_wait_spin_us): a peer that is a few microseconds behind answers without a doorbell or a
  // wake-up (~30 us each on loopback). The first pause_ns_ spin with the pause instruction: a peer
  // running on another core answers within that (a 4-byte allreduce at n=2 took 0.9 us pause-spinning,
  // as Open MPI, and 1.2 us yielding on every turn). After that every turn yields the CPU, so a peer
  // that waits for our core (more ranks than cores, or other jobs on the machine) runs meanwhile: under
  // load, yielding took 12 us where pause-spinning took 237 us (RESULTS.md). With nothing else runnable
  // sched_yield() returns at once.
  if (spin_us_ <= 0) return false;
  const Clock::time_point start = Clock::now();
  const auto limit = std::chrono::microseconds(std::max<long>(spin_us_, wait_spin_us_));
  const auto pause_for = std::chrono::nanoseconds(pause_ns_);
  bool any = false;
  Clock::duration elapsed{};
  do {
    any = false;
    for (auto& link : links_) any |= link->spin_once();
    if (!done_.empty()) return true;
    if (elapsed < pause_for) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    } else {
      sched_yield();
    }
    elapsed = Clock::now() - start;
  } while (any && elapsed < limit);
  return false;
}

bool TcpTransport::prepare_sleep() {
  for (auto& link : links_)
    if (!link->prepare_sleep()) return false;
  return true;
}

}  // namespace phv
