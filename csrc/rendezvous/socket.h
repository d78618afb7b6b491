// Thin, deadline-aware helpers over BSD sockets. Every socket the core creates is non-blocking and
// every wait is a poll() bounded by a Deadline, so nothing here can block forever; on a thread with an
// interrupt check (common/interrupt.h) the waits ask it every slice and throw INTERRUPTED when it says
// stop. Errors are HvdError whose text names the remote address ("host:port").
#pragma once
#include <poll.h>

#include <cstddef>
#include <string>

#include "common/types.h"

namespace phv {

// Owns one file descriptor; closes it on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Socket buffer size requested for data connections. The kernel caps it at net.core.{r,w}mem_max.
constexpr int kDefaultSocketBufferBytes = 4 << 20;

// Listens on host:port (port 0: the kernel picks a free one). host is a numeric address or a name;
// "" or "0.0.0.0" means every interface (only when the caller was asked for it).
Fd listen_tcp(const std::string& host, int port, int backlog = 128);

// Connects to host:port, retrying refused/unreachable attempts until the deadline (the peer may not be
// listening yet). Returns a non-blocking socket with TCP_NODELAY set. Throws TIMEOUT naming host:port.
Fd connect_tcp(const std::string& host, int port, Deadline deadline, int buffer_bytes = 0);

// Accepts one pending connection (non-blocking listener); returns an invalid Fd when none is pending.
// The accepted socket is non-blocking with TCP_NODELAY. *peer receives "host:port".
Fd accept_tcp(int listen_fd, std::string* peer, int buffer_bytes = 0);

void set_nonblocking(int fd);
void set_nodelay(int fd);
void set_buffer_sizes(int fd, int bytes);  // SO_SNDBUF and SO_RCVBUF; 0 keeps kernel autotuning

int local_port(int fd);
std::string local_address(int fd);  // "host:port"
std::string peer_address(int fd);   // "host:port", or "?" when unknown

// Waits until fd reports one of `events` (or an error/hangup). Returns false when the deadline passes.
bool wait_fd(int fd, short events, Deadline deadline);

// Milliseconds until the deadline, rounded up and clamped to [0, cap_ms]: a poll() timeout.
int poll_timeout_ms(Deadline deadline, int cap_ms = 1 << 30);

// Sends / receives exactly len bytes on a non-blocking socket, waiting with poll() until the deadline.
// `who` names the other side in errors ("store 127.0.0.1:2900"). EOF or a socket error -> PEER_LOST;
// deadline -> TIMEOUT.
void send_all(int fd, const void* buf, size_t len, Deadline deadline, const std::string& who);
void recv_all(int fd, void* buf, size_t len, Deadline deadline, const std::string& who);

// "host:port" split at the last ':' (IPv6 literals may be given as [addr]:port).
bool split_host_port(const std::string& addr, std::string* host, int* port);
std::string join_host_port(const std::string& host, int port);

std::string errno_text(int err);

}  // namespace phv
