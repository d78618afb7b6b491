// The link from a rank to itself: a send and a receive meet in memory (one copy) as soon as both are
// posted, in posting order; nothing is framed and nothing is polled.
#pragma once
#include "transport/link.h"

namespace phv {

class SelfLink : public Link {
 public:
  SelfLink(int rank, LinkHost& host) : Link(rank, "self", host) {}

  void post_send(Transfer t) override;
  void post_recv(Transfer t) override;
  short poll_events() override { return 0; }
  void close() override;
  // What an unmatched message to self lacks ("send" or "receive"): nothing on the network can bring it.
  const char* missing_half() const { return sends_.empty() ? "send" : "receive"; }

 private:
  void match();

  std::deque<Transfer> sends_, recvs_;
};

}  // namespace phv
