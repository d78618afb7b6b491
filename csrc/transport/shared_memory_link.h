// A link through the shared-memory rings of a same-host pair (shm_transport.h). Message layout in a ring:
// a kShmAlign-byte slot whose first bytes are the message header, the payload, padding up to a multiple of
// kShmAlign, so every payload starts aligned and a payload split by the ring's end splits at a multiple of
// kShmAlign. Receives may hand the payload to a RecvSink where it lies (zero-copy).
//
// The pair's TCP connection carries no data here: only one-byte doorbells, rung after a publish or a
// release when the peer raised its sleep flag, and its end tells us that the peer is gone.
#pragma once
#include <memory>

#include "transport/link.h"
#include "transport/shm_transport.h"
#include "rendezvous/socket.h"

namespace phv {

class SharedMemoryLink : public PeerLink {
 public:
  // publish_bytes: publish (release) at least every this many bytes inside a long message.
  SharedMemoryLink(int peer, std::string addr, Fd fd, std::unique_ptr<ShmLink> rings, size_t publish_bytes,
                   LinkHost& host)
      : PeerLink(peer, std::move(addr), host),
        fd_(std::move(fd)),
        rings_(std::move(rings)),
        publish_bytes_(publish_bytes) {}

  bool shares_memory() const override { return rings_ != nullptr; }
  void woke() override;
  bool spin_once() override;
  bool prepare_sleep() override;
  short poll_events() override;
  int fd() const override { return fd_.get(); }
  void on_poll(short revents) override;
  void close() override;

 protected:
  void send_some() override;  // copies into the ring as far as it has room
  void recv_some() override;  // copies (or hands to the sink) what the ring holds
  size_t framing_bytes() const override { return kShmAlign; }
  const char* kind_note() const override { return rings_ ? ", shared memory" : ""; }

 private:
  void ring_doorbell();
  void drain_doorbell();

  Fd fd_;
  std::unique_ptr<ShmLink> rings_;
  size_t publish_bytes_;
  bool sleeping_ = false;  // raised sleep flags before the last poll()
  bool closed_ = false;    // the socket reached EOF (bytes may remain in the ring)
};

}  // namespace phv
