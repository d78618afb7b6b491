#include "rendezvous/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "common/error.h"
#include "common/interrupt.h"

namespace phv {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string errno_text(int err) {
  char buf[128];
  // GNU strerror_r returns the message pointer (which may or may not be buf).
  const char* msg = strerror_r(err, buf, sizeof(buf));
  return std::string(msg);
}

std::string join_host_port(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

bool split_host_port(const std::string& addr, std::string* host, int* port) {
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon + 1 >= addr.size()) return false;
  std::string h = addr.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  char* end = nullptr;
  long p = std::strtol(addr.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || p < 0 || p > 65535) return false;
  *host = h;
  *port = static_cast<int>(p);
  return true;
}

namespace {

std::string sockaddr_text(const sockaddr_storage& ss) {
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    port = ntohs(a->sin6_port);
  } else {
    return "?";
  }
  return join_host_port(host, port);
}

struct AddrInfo {
  addrinfo* head = nullptr;
  ~AddrInfo() {
    if (head) freeaddrinfo(head);
  }
};

void resolve(const std::string& host, int port, bool passive, AddrInfo* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  std::string service = std::to_string(port);
  const char* node = host.empty() ? nullptr : host.c_str();
  int rc = getaddrinfo(node, service.c_str(), &hints, &out->head);
  if (rc != 0 || out->head == nullptr)
    throw_error(ErrorKind::INVALID_ARGUMENT, "cannot resolve address ", join_host_port(host, port), ": ",
                gai_strerror(rc));
}

}  // namespace

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw_error(ErrorKind::INTERNAL, "fcntl(O_NONBLOCK) failed: ", errno_text(errno));
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void set_buffer_sizes(int fd, int bytes) {
  if (bytes <= 0) return;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
}

Fd listen_tcp(const std::string& host, int port, int backlog) {
  AddrInfo ai;
  std::string h = (host == "0.0.0.0") ? "" : host;
  resolve(h, port, true, &ai);
  int last_err = 0;
  for (addrinfo* a = ai.head; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      last_err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), backlog) != 0) {
      last_err = errno;
      continue;
    }
    set_nonblocking(fd.get());
    return fd;
  }
  throw_error(ErrorKind::INTERNAL, "cannot listen on ", join_host_port(host, port), ": ", errno_text(last_err));
}

Fd connect_tcp(const std::string& host, int port, Deadline deadline, int buffer_bytes) {
  std::string where = join_host_port(host, port);
  int last_err = 0;
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    AddrInfo ai;
    resolve(host, port, false, &ai);
    for (addrinfo* a = ai.head; a; a = a->ai_next) {
      Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
      if (!fd.valid()) {
        last_err = errno;
        continue;
      }
      set_buffer_sizes(fd.get(), buffer_bytes);  // before connect, so the window scale is negotiated
      set_nonblocking(fd.get());
      int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno != EINPROGRESS) {
        last_err = errno;
        continue;
      }
      if (rc != 0) {
        if (!wait_fd(fd.get(), POLLOUT, deadline)) {
          last_err = ETIMEDOUT;
          break;
        }
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          last_err = err;
          continue;
        }
      }
      set_nodelay(fd.get());
      return fd;
    }
    if (Clock::now() + backoff >= deadline) break;
    // The back-off sleep, in interrupt slices (the schedule is the same with or without a check).
    for (Clock::time_point wake = Clock::now() + backoff, now = Clock::now(); now < wake; now = Clock::now()) {
      if (interrupt_requested()) throw_error(ErrorKind::INTERRUPTED, "interrupted while connecting to ", where);
      std::this_thread::sleep_for(std::min<Clock::duration>(wake - now, std::chrono::milliseconds(kInterruptSliceMs)));
    }
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  throw_error(ErrorKind::TIMEOUT, "could not connect to ", where,
              " before the deadline (last error: ", errno_text(last_err), ")");
}

Fd accept_tcp(int listen_fd, std::string* peer, int buffer_bytes) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  Fd fd(::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!fd.valid()) return fd;  // EAGAIN, or a connection that died while queued: the caller polls again
  set_nodelay(fd.get());
  set_buffer_sizes(fd.get(), buffer_bytes);
  if (peer) *peer = sockaddr_text(ss);
  return fd;
}

int local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return -1;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return -1;
}

std::string local_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return sockaddr_text(ss);
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return sockaddr_text(ss);
}

int poll_timeout_ms(Deadline deadline, int cap_ms) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1;
  return static_cast<int>(std::min<long long>(ms, cap_ms));
}

bool wait_fd(int fd, short events, Deadline deadline) {
  for (;;) {
    if (interrupt_requested()) throw_error(ErrorKind::INTERRUPTED, "interrupted while waiting for a socket");
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, interrupt_poll_ms(poll_timeout_ms(deadline)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // let the following I/O call report the error
    if (rc == 0 && Clock::now() >= deadline) return false;
  }
}

void send_all(int fd, const void* buf, size_t len, Deadline deadline, const std::string& who) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, deadline))
        throw_error(ErrorKind::TIMEOUT, "timed out sending to ", who, " (", len, " bytes left)");
      continue;
    }
    throw_error(ErrorKind::PEER_LOST, "connection to ", who, " failed while sending: ", errno_text(errno));
  }
}

void recv_all(int fd, void* buf, size_t len, Deadline deadline, const std::string& who) {
  char* p = static_cast<char*>(buf);
  while (len > 0) {
    ssize_t n = ::recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) throw_error(ErrorKind::PEER_LOST, "connection closed by ", who, " (", len, " bytes missing)");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd, POLLIN, deadline))
        throw_error(ErrorKind::TIMEOUT, "timed out receiving from ", who, " (", len, " bytes missing)");
      continue;
    }
    throw_error(ErrorKind::PEER_LOST, "connection to ", who, " failed while receiving: ", errno_text(errno));
  }
}

}  // namespace phv
