// alltoallv by pairwise exchange: p-1 steps; at step s rank r sends its block for r+s and receives the
// block from r-s (mod p), both posted together so the transport moves them at once. Every pair exchanges
// exactly once, and at each step every rank sends one block and receives one block, so no rank is a hot
// spot. Between hosts the steps run one after another; within one host (every pair has its own
// shared-memory ring, so nothing contends) all are posted at once: waiting step by step cost a wake-up
// per step, which with more ranks than cores was most of a 16 KiB alltoall (16 -> 9 us at 4 ranks on 2
// cores, RESULTS.md). Zero-length blocks are still exchanged: the transport's length check then catches
// callers that disagree on the splits. My own block is a local copy (streamed past the cache when large:
// common/stream_copy.h).
//
// Single copies (direct_copy.h): for a block of at least Transport::direct_bytes() -- a size both its
// sender and its receiver know -- the receiver publishes where the block goes in its output (a 16-byte
// address), all of them posted first, and the sender writes it there straight from its input (writes:
// the far side is then the output, on huge pages when the engine allocated it; see direct_copy.cc); then
// every sender tells its receiver it is done, and a receiver waits for that before returning. Each
// direction of a pair carries one message (address or block) either way, so the reordering keeps every
// pair's order.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/direct_copy.h"
#include "common/error.h"
#include "common/stream_copy.h"

namespace phv {

void alltoallv(const Comm& comm, const void* send, const std::vector<size_t>& send_bytes, void* recv,
               const std::vector<size_t>& recv_bytes, Deadline deadline) {
  const int p = comm.size();
  const int r = comm.rank();
  PHV_CHECK_ARG(send_bytes.size() == static_cast<size_t>(p) && recv_bytes.size() == static_cast<size_t>(p),
                "alltoall: ", send_bytes.size(), " send splits and ", recv_bytes.size(), " receive splits for ", p,
                " ranks");
  std::vector<size_t> soff(static_cast<size_t>(p) + 1, 0), roff(static_cast<size_t>(p) + 1, 0);
  for (int i = 0; i < p; ++i) {
    soff[static_cast<size_t>(i) + 1] = soff[static_cast<size_t>(i)] + send_bytes[static_cast<size_t>(i)];
    roff[static_cast<size_t>(i) + 1] = roff[static_cast<size_t>(i)] + recv_bytes[static_cast<size_t>(i)];
  }
  const char* s = static_cast<const char*>(send);
  char* d = static_cast<char*>(recv);
  const auto ur = static_cast<size_t>(r);
  PHV_CHECK_ARG(send_bytes[ur] == recv_bytes[ur], "alltoall: rank ", r, " sends ", send_bytes[ur],
                " bytes to itself but expects ", recv_bytes[ur]);
  std::vector<char> copy;  // peers write our output while we read our input: send from a copy if they overlap
  bool any_direct = false;
  for (int i = 0; i < p; ++i)
    any_direct = any_direct || (i != r && use_direct(comm, send_bytes[static_cast<size_t>(i)]));
  if (any_direct && ranges_overlap(send, soff.back(), recv, roff.back())) {
    copy.assign(s, s + soff.back());
    s = copy.data();
  }
  Transport* tr = comm.transport;
  DirectExchange x(comm, "alltoall", deadline);
  std::vector<int> writers, targets;  // set ranks that write to us / that we write to
  // Every descriptor goes out before anything else, so that peers can start writing to us while we copy
  // our own block: with more ranks than cores, a step-by-step exchange of descriptors left cores idle.
  for (int step = 1; step < p; ++step) {
    const int from = (r - step + p) % p, to = (r + step) % p;
    if (use_direct(comm, recv_bytes[static_cast<size_t>(from)])) {
      x.post_publish(from, d + roff[static_cast<size_t>(from)], recv_bytes[static_cast<size_t>(from)]);
      writers.push_back(from);
    }
    if (use_direct(comm, send_bytes[static_cast<size_t>(to)])) {
      x.post_expect(to);
      targets.push_back(to);
    }
  }
  tr->start_posted();  // on their way now, not once our copy is done
  const Clock::time_point copying = Clock::now();
  if (send_bytes[ur] > 0) copy_streaming(d + roff[ur], s + soff[ur], send_bytes[ur]);
  // The blocks that travel through the transport: all steps in flight within one host, one otherwise.
  const bool all_at_once = tr->shared_memory_everywhere();
  for (int step = 1; step < p; ++step) {
    const auto to = static_cast<size_t>((r + step) % p);
    const auto from = static_cast<size_t>((r - step + p) % p);
    bool posted = false;
    if (!use_direct(comm, recv_bytes[from])) {
      x.wait_for(tr->post_recv(comm.global(static_cast<int>(from)), d + roff[from], recv_bytes[from]));
      posted = true;
    }
    if (!use_direct(comm, send_bytes[to])) {
      x.wait_for(tr->post_send(comm.global(static_cast<int>(to)), s + soff[to], send_bytes[to]));
      posted = true;
    }
    if (posted && !all_at_once) x.wait();
  }
  x.wait();  // the descriptors, where no step waited for them
  for (int to : targets) {
    const auto t = static_cast<size_t>(to);
    x.write(to, send_bytes[t], 0, s + soff[t], send_bytes[t]);
    x.post_done(to);
  }
  for (int from : writers) x.post_wait_done(from);  // until then `from` may still be writing to us
  x.wait_spinning(Clock::now() - copying);
}

}  // namespace phv
