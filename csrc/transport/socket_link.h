// A link over the pair's TCP connection: every message is its header followed by the payload, written
// straight from / read straight into the caller's buffer with sendmsg/readv, the rest of several queued
// messages gathered into one system call. Nothing is ever allocated from a length read off the network.
// Before poll() sleeps, SO_RCVLOWAT makes the socket wake it only once a useful amount has arrived.
#pragma once
#include "transport/link.h"
#include "rendezvous/socket.h"

namespace phv {

class SocketLink : public PeerLink {
 public:
  // lowat_max: the most a poll() waits for before waking (0: every packet wakes it).
  SocketLink(int peer, std::string addr, Fd fd, size_t lowat_max, LinkHost& host)
      : PeerLink(peer, std::move(addr), host), fd_(std::move(fd)), lowat_max_(lowat_max) {}

  short poll_events() override;
  int fd() const override { return fd_.get(); }
  void on_poll(short revents) override;
  void close() override;

 protected:
  void send_some() override { move_some(sends_, Direction::SEND); }
  void recv_some() override { move_some(recvs_, Direction::RECEIVE); }
  size_t framing_bytes() const override { return kMessageHeaderBytes; }

 private:
  void set_lowat();  // SO_RCVLOWAT for the head receive
  // Sends (receives) the queue's messages until it is empty or the socket would block.
  void move_some(std::deque<Transfer>& queue, Direction d);

  Fd fd_;
  size_t lowat_max_;
  int lowat_ = 1;  // SO_RCVLOWAT currently set on fd_
};

}  // namespace phv
