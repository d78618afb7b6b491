// One link of TcpTransport: the way this rank exchanges messages with one peer. Three kinds, each its own
// object behind this interface: a TCP connection (socket_link.h), shared-memory rings whose socket only
// carries doorbells (shared_memory_link.h), and the rank itself (self_link.h). The transport's one poll
// loop (tcp_transport.cc) drives every link through the same steps -- pump, spin, prepare to sleep, poll
// events, react to what poll() saw -- and never asks which kind it holds.
//
// Network links frame every message with the same 16-byte header {magic "PHVM", sequence u32, length u64}
// (little-endian), checked against the posted receive, so a length or order mismatch is an error, not
// corruption.
#pragma once
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>

#include "common/error.h"
#include "common/types.h"
#include "transport/transport.h"

namespace phv {

constexpr size_t kMessageHeaderBytes = 16;

enum class Direction { SEND, RECEIVE };

// A posted send or receive.
struct Transfer {
  RequestId id;
  char* buf;
  size_t len;
  size_t done;  // bytes of framing + payload moved (shared memory: ring bytes of the message, padding included)
  uint32_t seq;
  RecvSink* sink;  // zero-copy receive (shared-memory links only); then buf is null
  size_t grain;    // sink pieces are multiples of this (but the last)
  uint8_t header[kMessageHeaderBytes];
  Clock::time_point posted;
};

// What a link reports to the transport that owns it.
class LinkHost {
 public:
  virtual void complete(const Transfer& t) = 0;  // the request is done: report it from progress()
  virtual void moved() = 0;                      // bytes moved (a system call or a ring publish/release)
  // Fails the whole transport (closing every link) and throws; the message gets our rank in front.
  // `peer` is the rank the failure is about (kNoPeer: none), carried by the error as a field.
  [[noreturn]] virtual void fail(ErrorKind kind, const std::string& message, int peer) = 0;

 protected:
  ~LinkHost() = default;
};

class Link {
 public:
  Link(int peer, std::string addr, LinkHost& host) : peer_(peer), addr_(std::move(addr)), host_(host) {}
  virtual ~Link() = default;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  virtual void post_send(Transfer t) = 0;
  virtual void post_recv(Transfer t) = 0;  // t.sink set: only where shares_memory()
  virtual bool shares_memory() const { return false; }

  // The steps of one turn of the poll loop, in this order:
  virtual void woke() {}  // the loop is awake again (after a poll() or a spin)
  virtual void pump() {}  // move whatever can move without waiting
  // Polls the link's memory for up to one turn of the transport's spin; true while it has work there.
  virtual bool spin_once() { return false; }
  // Before poll(): announce the sleep to the peer; false if something moved meanwhile (do not sleep).
  virtual bool prepare_sleep() { return true; }
  virtual short poll_events() = 0;  // what to wait for on fd() (0: nothing); fails if that cannot come
  virtual int fd() const { return -1; }
  virtual void on_poll(short revents) {}  // poll() saw revents on fd()

  // Appends the link's oldest pending requests (recv, then send) to `what`, while `shown` < `limit`.
  virtual void describe_waits(std::string& what, int& shown, int limit) const {}
  virtual bool waiting() const { return false; }  // requests are pending (a timeout blames this peer)
  // Drops every request and the link's resources; the object stays (describe() still works).
  virtual void close() = 0;

  // "rank 3 (10.0.0.2:41234)", with ", shared memory" for rings.
  std::string describe() const;

 protected:
  virtual const char* kind_note() const { return ""; }

  const int peer_;
  const std::string addr_;
  LinkHost& host_;
};

// The part that TCP and shared-memory links share: the two queues in posting order, per-direction
// sequence numbers, the message header, and the texts naming a request.
class PeerLink : public Link {
 public:
  using Link::Link;
  void post_send(Transfer t) override;
  void post_recv(Transfer t) override;
  void pump() override;
  void describe_waits(std::string& what, int& shown, int limit) const override;
  void close() override;

 protected:
  virtual void send_some() = 0;
  virtual void recv_some() = 0;
  virtual size_t framing_bytes() const = 0;  // bytes of a message before its payload
  void check_header(const Transfer& t);       // fails on a header that does not match the posted receive
  std::string text(const Transfer& t, Direction d) const;
  std::string front_text() const;  // the oldest receive, else the oldest send
  bool idle() const { return sends_.empty() && recvs_.empty(); }
  bool waiting() const override { return !idle(); }

  std::deque<Transfer> sends_, recvs_;
  uint32_t send_seq_ = 0, recv_seq_ = 0;
};

}  // namespace phv
