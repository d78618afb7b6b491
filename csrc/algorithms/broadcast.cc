// Broadcast from any root. Ranks are renumbered relative to the root: v = (r - root) mod p.
//  - small (below the allreduce small-message threshold): binomial tree. v receives from v - 2^k where
//    2^k is v's lowest set bit, then sends to v + 2^j for every 2^j below that bit (and v + 2^j < p):
//    ceil(log2 p) rounds of the whole message.
//  - large: a pipelined chain v = 0 -> 1 -> ... -> p-1, the message cut into segments; each rank forwards
//    segment k as soon as it has arrived, with up to max_segments_in_flight segments posted each way.
//    Time ~ (p - 2 + number of segments) segment times: the bandwidth term does not grow with p.
// Every rank receives straight into buf: no copies besides the transport's. A root with a separate input
// (out of place) sends from it and copies it into its own buf while its sends are under way, instead of
// first: the copy then overlaps the transfers (a 16 MiB broadcast at 2 ranks: see RESULTS.md).
//  - a root's share of at least Transport::broadcast_direct_bytes(): every rank reads the root's buffer in
//    place, the root writing its share (direct_copy.h).
#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/direct_copy.h"
#include "algorithms/ring_schedule.h"
#include "common/error.h"

namespace phv {

namespace {

// The root's own copy, out of place: after its sends are posted and on their way.
void root_copy(Transport* tr, char* buf, const char* src, size_t bytes) {
  if (src == buf) return;
  tr->start_posted();
  std::memcpy(buf, src, bytes);
}

void binomial(const Comm& comm, char* buf, const char* src, size_t bytes, int root, Deadline deadline) {
  const int p = comm.size();
  const int v = (comm.rank() - root + p) % p;
  auto real = [&](int vr) { return comm.global((vr + root) % p); };
  Transport* tr = comm.transport;
  int mask = 1;
  while (mask < p) {
    if (v & mask) {
      tr->wait_all({tr->post_recv(real(v - mask), buf, bytes)}, deadline);
      break;
    }
    mask <<= 1;
  }
  const char* from = v == 0 ? src : buf;
  std::vector<RequestId> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < p) sends.push_back(tr->post_send(real(v + mask), from, bytes));
  }
  if (v == 0) root_copy(tr, buf, src, bytes);
  tr->wait_all(sends, deadline);
}

void chain(const Comm& comm, char* buf, const char* src, size_t bytes, int root, const Tuning& tuning,
           Deadline deadline) {
  const int p = comm.size();
  const int v = (comm.rank() - root + p) % p;
  const bool has_prev = v > 0, has_next = v + 1 < p;
  const int prev = comm.global((comm.rank() + p - 1) % p), next = comm.global((comm.rank() + 1) % p);
  const size_t seg = std::max<size_t>(1, segment_size(tuning, bytes));
  const size_t nseg = segment_count(bytes, seg);
  const size_t window = static_cast<size_t>(std::max(1, tuning.max_segments_in_flight));
  const Range whole{0, bytes};
  Transport* tr = comm.transport;
  const char* from = v == 0 ? src : buf;
  bool copied = v != 0;  // the root's own copy (root_copy), once its first window of sends is posted

  // Segment k may be sent once it is here (the root has everything).
  size_t recvs_posted = 0, recvs_done = has_prev ? 0 : nseg;
  size_t sends_posted = 0, sends_done = has_next ? 0 : nseg;
  std::vector<char> recv_flag(nseg, 0), send_flag(nseg, 0);
  std::unordered_map<RequestId, long> ids;  // >= 0: send k; < 0: recv -(k) - 1
  std::vector<RequestId> completed;
  while (recvs_done < nseg || sends_done < nseg) {
    while (has_prev && recvs_posted < nseg && recvs_posted - recvs_done < window) {
      Range s = segment_of(whole, seg, recvs_posted);
      ids[tr->post_recv(prev, buf + s.offset, s.count)] = -static_cast<long>(recvs_posted) - 1;
      ++recvs_posted;
    }
    while (has_next && sends_posted < nseg && sends_posted < recvs_done && sends_posted - sends_done < window) {
      Range s = segment_of(whole, seg, sends_posted);
      ids[tr->post_send(next, from + s.offset, s.count)] = static_cast<long>(sends_posted);
      ++sends_posted;
    }
    if (!copied) {
      root_copy(tr, buf, src, bytes);
      copied = true;
    }
    completed.clear();
    tr->progress(completed, deadline);
    for (RequestId id : completed) {
      auto it = ids.find(id);
      if (it == ids.end()) continue;
      if (it->second >= 0) send_flag[static_cast<size_t>(it->second)] = 1;
      else recv_flag[static_cast<size_t>(-it->second - 1)] = 1;
      ids.erase(it);
    }
    while (has_prev && recvs_done < nseg && recv_flag[recvs_done]) ++recvs_done;
    while (has_next && sends_done < nseg && send_flag[sends_done]) ++sends_done;
  }
}

}  // namespace

void broadcast(const Comm& comm, void* buf, size_t bytes, int root, const Tuning& tuning, Deadline deadline,
               const void* input) {
  const int p = comm.size();
  PHV_CHECK_ARG(root >= 0 && root < p, "broadcast: root rank ", root, " out of range [0, ", p, ")");
  const char* src = comm.rank() == root && input != nullptr ? static_cast<const char*>(input) : static_cast<char*>(buf);
  PHV_CHECK_ARG(src == buf || !ranges_overlap(src, bytes, buf, bytes), "broadcast: the input overlaps the output");
  if (bytes == 0) return;
  if (p <= 1) return root_copy(comm.transport, static_cast<char*>(buf), src, bytes);
  // The single-copy decision looks at the root's share of each reader's buffer, the 1/p it writes (a
  // reader reads the rest); at 2 ranks that is what a reader reads. With 4 ranks on 2 cores the chain
  // beat single copies of 1 and 2 MiB (93 against 178 us, 187 against 327), where what a reader reads
  // (768 KiB, 1.5 MiB) would have sent the 2 MiB one to single copies at a 1 MiB threshold.
  if (use_direct_broadcast(comm, bytes / static_cast<size_t>(p))) {
    direct_broadcast(comm, buf, bytes, root, deadline, src);
  } else if (bytes < small_message_threshold(tuning, p) || p == 2) {
    binomial(comm, static_cast<char*>(buf), src, bytes, root, deadline);
  } else {
    chain(comm, static_cast<char*>(buf), src, bytes, root, tuning, deadline);
  }
}

}  // namespace phv
