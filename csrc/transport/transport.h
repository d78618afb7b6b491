// Point-to-point byte movement between the ranks of one job.
//
// Model: non-blocking posts plus an explicit progress call, so one thread can keep a send to the right
// neighbour and a receive from the left neighbour moving at the same time (a blocking send deadlocks a
// ring as soon as a segment exceeds the socket buffer).
//
// Ordering: messages between one ordered pair (me -> peer) complete in the order they were posted, and a
// posted receive matches the next message from that peer. Lengths are known to both sides; every message
// carries a small header (magic, length, sequence number) so a length mismatch is an error, not corruption.
//
// Zero-copy receive (optional): where a peer's bytes already lie in memory we can read -- a shared-memory
// ring -- the transport can hand them to a RecvSink in place instead of copying them into a buffer, so
// the caller reduces straight from the ring (one copy per byte into shared memory, none out of it).
// Callers ask recv_in_place(peer) first and fall back to post_recv() where it is false (TCP peers).
//
// Errors: progress() throws HvdError with kind TIMEOUT when the deadline passes, PEER_LOST when a peer's
// connection closes or fails, naming our rank, the peer rank and its address.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include "common/types.h"

namespace phv {

using RequestId = uint64_t;

// Receives a message in pieces, in order: consume(data, offset, len) says that payload bytes
// [offset, offset + len) are at `data`, valid only during the call. Every piece but the last is a
// multiple of the `grain` given to post_recv_sink (an element size, so a piece never splits an element);
// pieces are called from inside progress(), on the calling thread. The message's receive completes after
// its last piece has been consumed.
class RecvSink {
 public:
  virtual ~RecvSink() = default;
  virtual void consume(const void* data, size_t offset, size_t len) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;  // global rank
  virtual int size() const = 0;  // global size

  // buf must stay valid (and untouched) until the request completes. len may be 0.
  virtual RequestId post_send(int peer, const void* buf, size_t len) = 0;
  virtual RequestId post_recv(int peer, void* buf, size_t len) = 0;

  // Zero-copy receive of a len-byte message from peer into `sink` (see RecvSink), which must stay valid
  // until the request completes. Only where recv_in_place(peer) is true; grain must divide 64. The
  // default implementation (transports without in-place peers) throws INTERNAL.
  virtual bool recv_in_place(int /*peer*/) const { return false; }
  virtual RequestId post_recv_sink(int peer, size_t len, size_t grain, RecvSink* sink);

  // True when every pair of ranks exchanges data through shared memory (all on one host), with the
  // same answer on every rank: algorithms may choose parameters that both ends of a message must agree
  // on (segment sizes, small-message thresholds) by it -- never by recv_in_place(), which is per link.
  virtual bool shared_memory_everywhere() const { return false; }

  // Single-copy reads from a peer's memory (cross_memory.h). direct_bytes(): copies of at least this many
  // bytes may read the peer's buffer in place, with the same answer on every rank; 0 (the default) where
  // some pair of ranks cannot. read_direct() copies len bytes at `addr` in peer's address space (an address
  // the peer published, and keeps valid until we tell it we are done) into dst; throws HvdError naming our
  // rank, the peer and `op`.
  // write_direct() is the other way: len bytes of src into peer's memory at `addr` (a range the peer
  // published for that, and does not touch until we tell it we are done).
  virtual size_t direct_bytes() const { return 0; }
  // The same for a broadcast, which compares the root's 1/p share of a buffer with it: above
  // direct_bytes() where the host is oversubscribed (cross_memory.h), where its chain still wins.
  virtual size_t broadcast_direct_bytes() const { return direct_bytes(); }
  // The negotiation's copy-path mode (engine/copy_path_vote.h), the same on every rank between rounds: while
  // wide, direct_bytes() is the lower of its threshold and kWideDirectBytes (cross_memory.h); nothing
  // changes where single copies are off. direct_bytes_in(wide): the threshold in either mode.
  virtual void set_wide_direct(bool /*wide*/) {}
  virtual bool wide_direct() const { return false; }
  virtual size_t direct_bytes_in(bool /*wide*/) const { return direct_bytes(); }
  // The negotiation's allreduce mode (engine/copy_path_vote.h), the same on every rank between rounds: while
  // on, the allreduces algorithms/direct_copy.h admits run as single copies instead of the ring.
  virtual void set_single_copy_allreduce(bool /*on*/) {}
  virtual bool single_copy_allreduce() const { return false; }
  virtual void read_direct(int peer, uint64_t addr, void* dst, size_t len, const char* op);
  virtual void write_direct(int peer, uint64_t addr, const void* src, size_t len, const char* op);

  // Moves what the posted requests can move right now, without waiting (sends go into rings and
  // sockets as far as they have room); their completions are reported by progress() as usual. Posting
  // only queues a request, so a collective that posts small messages (single-copy descriptors) and then
  // copies locally for a while calls this in between: otherwise its peers would wait for its messages
  // until its copy ended. The default, for transports whose progress() does all the work, is a no-op.
  virtual void start_posted() {}

  // Until called again with 0: waits poll for up to `us` microseconds before sleeping, where the
  // transport's own setting (PYHOROVOD_SHM_SPIN_US) is shorter. For a wait that is known to end soon:
  // a peer copying into our buffer as much as we just copied into its. Sleeping there cost a wake-up of
  // 50-70 us after the peer's last byte, while the memory the copies share stood idle. A transport that
  // never spins (the setting is 0) ignores it.
  virtual void set_wait_spin_us(long /*us*/) {}

  // Drives I/O. Returns once at least one posted request has completed (appending the ids of all that
  // completed since the last call to `completed`), or when nothing is pending. Throws on deadline/failure.
  virtual void progress(std::vector<RequestId>& completed, Deadline deadline) = 0;

  // Number of posted requests not yet completed.
  virtual size_t pending() const = 0;

  // Human-readable peer description for error messages, e.g. "rank 3 (127.0.0.1:41234)".
  virtual std::string describe_peer(int peer) const = 0;

  // Blocks until every id in `ids` has completed (ids not yet reported by an earlier progress() call).
  // Implemented on top of progress().
  void wait_all(const std::vector<RequestId>& ids, Deadline deadline);
};

// A group of ranks that run collectives together: the global set or a process set. Algorithms speak in
// set ranks 0..size()-1; global() maps them to transport ranks.
struct Comm {
  Transport* transport = nullptr;
  std::vector<int> members;  // global ranks, ascending
  int my_index = 0;          // my position in members

  int size() const { return static_cast<int>(members.size()); }
  int rank() const { return my_index; }
  int global(int set_rank) const { return members[set_rank]; }
};

}  // namespace phv
