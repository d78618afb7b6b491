#include "transport/memory_transport.h"

#include <condition_variable>
#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>

#include "common/error.h"

namespace phv {

namespace {
struct PendingSend {
  RequestId id;
  const void* buf;
  size_t len;
};
struct PendingRecv {
  RequestId id;
  void* buf;
  size_t len;
  RecvSink* sink;  // zero-copy receive; then buf is null
  size_t grain;
};
struct SinkMatch {  // a matched zero-copy receive, waiting for its receiver's progress()
  PendingSend send;
  PendingRecv recv;
  int src;
};
}  // namespace

struct MemoryWorld {
  MemoryWorld(int n, bool in_place_)
      : size(n),
        in_place(in_place_),
        sends(static_cast<size_t>(n * n)),
        recvs(static_cast<size_t>(n * n)),
        matched(static_cast<size_t>(n)),
        completed(static_cast<size_t>(n)),
        pending(static_cast<size_t>(n), 0),
        next_id(static_cast<size_t>(n), 1),
        failure(static_cast<size_t>(n)),
        failure_peer(static_cast<size_t>(n), kNoPeer) {}

  int size;
  bool in_place;
  std::mutex mu;
  std::condition_variable cv;
  // Indexed by src * size + dst: unmatched posts of that ordered pair, oldest first.
  std::vector<std::deque<PendingSend>> sends;
  std::vector<std::deque<PendingRecv>> recvs;
  std::vector<std::deque<SinkMatch>> matched;     // per receiving rank
  std::vector<std::vector<RequestId>> completed;  // per rank: done, not yet reported by progress()
  std::vector<size_t> pending;                    // per rank: posted, not yet done
  std::vector<RequestId> next_id;
  std::vector<std::string> failure;               // per rank: error to throw from progress()
  std::vector<int> failure_peer;                  // per rank: the peer that error is about
  std::string abort_reason;

  // Pairs up the heads of the (src -> dst) queues. Caller holds mu.
  void match(int src, int dst) {
    size_t k = static_cast<size_t>(src * size + dst);
    auto& sq = sends[k];
    auto& rq = recvs[k];
    while (!sq.empty() && !rq.empty()) {
      PendingSend s = sq.front();
      PendingRecv r = rq.front();
      sq.pop_front();
      rq.pop_front();
      if (s.len != r.len) {
        std::string msg = "memory transport: rank " + std::to_string(dst) + " posted a receive of " +
                          std::to_string(r.len) + " bytes from rank " + std::to_string(src) + " but the message has " +
                          std::to_string(s.len) + " bytes";
        // Both requests stay pending, so both ranks reach progress(), which throws.
        failure[static_cast<size_t>(src)] = msg;
        failure[static_cast<size_t>(dst)] = msg;
        failure_peer[static_cast<size_t>(src)] = dst;
        failure_peer[static_cast<size_t>(dst)] = src;
        continue;
      }
      if (r.sink) {
        matched[static_cast<size_t>(dst)].push_back(SinkMatch{s, r, src});
        continue;
      }
      if (s.len > 0) std::memcpy(r.buf, s.buf, s.len);
      completed[static_cast<size_t>(src)].push_back(s.id);
      completed[static_cast<size_t>(dst)].push_back(r.id);
      --pending[static_cast<size_t>(src)];
      --pending[static_cast<size_t>(dst)];
    }
    cv.notify_all();
  }
};

MemoryTransport::MemoryTransport(std::shared_ptr<MemoryWorld> world, int rank)
    : world_(std::move(world)), rank_(rank) {}

MemoryTransport::~MemoryTransport() = default;

int MemoryTransport::size() const { return world_->size; }

RequestId MemoryTransport::post_send(int peer, const void* buf, size_t len) {
  PHV_CHECK_ARG(peer >= 0 && peer < world_->size, "memory transport: bad peer ", peer);
  std::lock_guard<std::mutex> lock(world_->mu);
  RequestId id = world_->next_id[static_cast<size_t>(rank_)]++;
  ++world_->pending[static_cast<size_t>(rank_)];
  world_->sends[static_cast<size_t>(rank_ * world_->size + peer)].push_back(PendingSend{id, buf, len});
  world_->match(rank_, peer);
  return id;
}

RequestId MemoryTransport::post_recv(int peer, void* buf, size_t len) {
  PHV_CHECK_ARG(peer >= 0 && peer < world_->size, "memory transport: bad peer ", peer);
  std::lock_guard<std::mutex> lock(world_->mu);
  RequestId id = world_->next_id[static_cast<size_t>(rank_)]++;
  ++world_->pending[static_cast<size_t>(rank_)];
  world_->recvs[static_cast<size_t>(peer * world_->size + rank_)].push_back(PendingRecv{id, buf, len, nullptr, 1});
  world_->match(peer, rank_);
  return id;
}

bool MemoryTransport::recv_in_place(int peer) const { return world_->in_place && peer != rank_; }

bool MemoryTransport::shared_memory_everywhere() const { return world_->in_place && world_->size > 1; }

RequestId MemoryTransport::post_recv_sink(int peer, size_t len, size_t grain, RecvSink* sink) {
  if (!recv_in_place(peer)) return Transport::post_recv_sink(peer, len, grain, sink);  // throws
  PHV_CHECK_ARG(sink != nullptr && grain >= 1 && 64 % grain == 0, "memory transport: bad sink or grain ", grain);
  std::lock_guard<std::mutex> lock(world_->mu);
  RequestId id = world_->next_id[static_cast<size_t>(rank_)]++;
  ++world_->pending[static_cast<size_t>(rank_)];
  world_->recvs[static_cast<size_t>(peer * world_->size + rank_)].push_back(PendingRecv{id, nullptr, len, sink, grain});
  world_->match(peer, rank_);
  return id;
}

void MemoryTransport::progress(std::vector<RequestId>& completed, Deadline deadline) {
  std::unique_lock<std::mutex> lock(world_->mu);
  auto me = static_cast<size_t>(rank_);
  for (;;) {
    if (!world_->failure[me].empty())
      throw HvdError(ErrorKind::INTERNAL, world_->failure[me], world_->failure_peer[me]);
    if (!world_->abort_reason.empty())
      throw_error(ErrorKind::PEER_LOST, "rank ", rank_, ": memory world aborted: ", world_->abort_reason);
    // Zero-copy receives matched for me: the sender's buffer is still pinned by its pending send.
    auto& ready = world_->matched[me];
    while (!ready.empty()) {
      SinkMatch m = ready.front();
      ready.pop_front();
      const size_t piece = 3 * m.recv.grain;
      for (size_t off = 0; off < m.send.len; off += piece)
        m.recv.sink->consume(static_cast<const char*>(m.send.buf) + off, off, std::min(piece, m.send.len - off));
      world_->completed[static_cast<size_t>(m.src)].push_back(m.send.id);
      world_->completed[me].push_back(m.recv.id);
      --world_->pending[static_cast<size_t>(m.src)];
      --world_->pending[me];
      world_->cv.notify_all();
    }
    auto& done = world_->completed[me];
    if (!done.empty()) {
      completed.insert(completed.end(), done.begin(), done.end());
      done.clear();
      return;
    }
    if (world_->pending[me] == 0) return;
    if (world_->cv.wait_until(lock, deadline) == std::cv_status::timeout && world_->completed[me].empty() &&
        world_->pending[me] > 0 && world_->failure[me].empty() && world_->abort_reason.empty()) {
      throw_error(ErrorKind::TIMEOUT, "rank ", rank_, ": memory transport deadline passed with ", world_->pending[me],
                  " requests pending");
    }
  }
}

size_t MemoryTransport::pending() const {
  std::lock_guard<std::mutex> lock(world_->mu);
  return world_->pending[static_cast<size_t>(rank_)];
}

std::string MemoryTransport::describe_peer(int peer) const { return "rank " + std::to_string(peer) + " (memory)"; }

void MemoryTransport::abort_world(const std::string& why) {
  std::lock_guard<std::mutex> lock(world_->mu);
  if (world_->abort_reason.empty()) world_->abort_reason = why.empty() ? "aborted" : why;
  world_->cv.notify_all();
}

std::vector<std::unique_ptr<Transport>> make_memory_transports(int size, bool in_place) {
  PHV_CHECK_ARG(size >= 1, "make_memory_transports: size must be >= 1, got ", size);
  auto world = std::make_shared<MemoryWorld>(size, in_place);
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < size; ++r) out.push_back(std::make_unique<MemoryTransport>(world, r));
  return out;
}

}  // namespace phv
