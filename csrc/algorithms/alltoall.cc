// alltoallv by pairwise exchange: p-1 steps; at step s rank r sends its block for r+s and receives the
// block from r-s (mod p), both posted together so the transport moves them at once. Every pair exchanges
// exactly once, and at each step every rank sends one block and receives one block, so no rank is a hot
// spot. Zero-length blocks are still exchanged: the transport's length check then catches callers that
// disagree on the splits. My own block is a local copy.
//
// Single copies (direct_copy.h): a block of at least Transport::direct_bytes() -- a size both its sender
// and its receiver know -- travels as its 16-byte address instead, all of them posted first, and the
// receiver reads it straight from the sender's input; then every reader tells its sender it is done, and a
// sender waits for that before returning (its input must stay as it was while read). Each direction of a
// pair carries one message (address or block) either way, so the reordering keeps every pair's order.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/direct_copy.h"
#include "common/error.h"

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
  std::vector<char> copy;  // peers read our input while we write our output: publish a copy if they overlap
  bool any_direct = false;
  for (int i = 0; i < p; ++i)
    any_direct = any_direct || (i != r && use_direct(comm, send_bytes[static_cast<size_t>(i)]));
  if (any_direct && ranges_overlap(send, soff.back(), recv, roff.back())) {
    copy.assign(s, s + soff.back());
    s = copy.data();
  }
  Transport* tr = comm.transport;
  DirectExchange x(comm, "alltoall", deadline);
  std::vector<int> readers, sources;  // set ranks that read from us / that we read from
  // Every descriptor goes out before anything else, so that peers can start reading from us while we copy
  // our own block: with more ranks than cores, a step-by-step exchange of descriptors left cores idle.
  for (int step = 1; step < p; ++step) {
    const int from = (r - step + p) % p, to = (r + step) % p;
    if (use_direct(comm, recv_bytes[static_cast<size_t>(from)])) {
      x.post_expect(from);
      sources.push_back(from);
    }
    if (use_direct(comm, send_bytes[static_cast<size_t>(to)])) {
      x.post_publish(to, s + soff[static_cast<size_t>(to)], send_bytes[static_cast<size_t>(to)]);
      readers.push_back(to);
    }
  }
  if (send_bytes[ur] > 0) std::memmove(d + roff[ur], s + soff[ur], send_bytes[ur]);
  for (int step = 1; step < p; ++step) {  // the blocks that travel through the transport, pairwise
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
    if (posted) x.wait();
  }
  x.wait();  // the descriptors, where no step waited for them
  for (int from : sources) x.read(from, d + roff[static_cast<size_t>(from)], recv_bytes[static_cast<size_t>(from)]);
  for (int from : sources) x.post_done(from);
  for (int to : readers) x.post_wait_done(to);
  x.wait();
}

}  // namespace phv
