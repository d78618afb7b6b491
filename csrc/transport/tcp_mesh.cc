#include "transport/tcp_mesh.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <thread>

#include "common/error.h"
#include "common/log_throttle.h"
#include "common/interrupt.h"
#include "common/logging.h"
#include "rendezvous/handshake.h"

namespace phv {
namespace {

std::string published_host(const std::string& bind_host) {
  if (!bind_host.empty() && bind_host != "0.0.0.0" && bind_host != "::") return bind_host;
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  return name;
}

// Accepts connections from ranks [0, me) until all have arrived or the deadline passes. Runs in its
// own thread while the caller connects outwards, so neither direction waits for the other.
struct Acceptor {
  const MeshOptions& opt;
  int listen_fd;
  Deadline deadline;
  std::vector<MeshConnection>* out;
  std::atomic<size_t>* rejected;
  std::string error;  // set on failure
  ErrorKind error_kind = ErrorKind::TIMEOUT;
  std::atomic<bool> cancel{false};  // the connecting side failed: give up early
  std::atomic<bool> finished{false};

  void run() {
    struct Pending {
      Fd fd;
      std::string addr;
      std::unique_ptr<ServerHandshake> hs;
      std::string in;
      Deadline until;
    };
    std::vector<Pending> pending;
    std::vector<std::string> peer_addr(opt.rank);  // where each connected rank came from
    int missing = opt.rank;
    std::string context = opt.store_prefix;
    LogThrottle warnings("rank " + std::to_string(opt.rank), 5, 10);  // strangers may connect by the thousand
    struct FlushAtExit {
      LogThrottle& w;
      ~FlushAtExit() { w.flush_pending(Clock::now()); }
    } flush_at_exit{warnings};
    auto refuse = [&](Pending& p, const std::string& why) {
      warnings.warn("refusing connection from " + p.addr + ": " + why);
      if (rejected) ++*rejected;
      p.fd.reset();
    };
    std::vector<pollfd> fds;
    while (missing > 0) {
      Deadline now = Clock::now();
      if (cancel) {
        error = "set-up abandoned";
        return;
      }
      if (now >= deadline) {
        std::string ranks;
        for (int r = 0; r < opt.rank; ++r)
          if (!(*out)[r].fd.valid()) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
        error = "timed out after " + std::to_string(opt.connect_timeout_s) + " s waiting for rank(s) " + ranks +
                " to connect";
        return;
      }
      fds.clear();
      fds.push_back({listen_fd, POLLIN, 0});
      Deadline next = deadline;
      for (auto& p : pending) {
        fds.push_back({p.fd.get(), POLLIN, 0});
        next = std::min(next, p.until);
      }
      ::poll(fds.data(), fds.size(), poll_timeout_ms(next, kInterruptSliceMs));
      now = Clock::now();
      warnings.flush(now);
      if (fds[0].revents & POLLIN) {
        for (;;) {
          Pending p;
          p.fd = accept_tcp(listen_fd, &p.addr, opt.socket_buffer_bytes);
          if (!p.fd.valid()) break;
          p.hs = std::make_unique<ServerHandshake>(opt.secret, context,
                                                   HandshakeIdentity{HandshakeRole::TRANSPORT, opt.rank});
          p.until = std::min(deadline, now + std::chrono::seconds(10));
          const std::string& hello = p.hs->hello();
          if (::send(p.fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(hello.size()))
            pending.push_back(std::move(p));
        }
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        Pending& p = pending[i - 1];
        if (fds[i].revents) {
          char buf[kClientHelloBytes];
          ssize_t n = ::recv(p.fd.get(), buf, kClientHelloBytes - p.in.size(), 0);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            refuse(p, "closed during the handshake");
            continue;
          }
          if (n > 0) p.in.append(buf, static_cast<size_t>(n));
          if (p.in.size() == kClientHelloBytes) {
            HandshakeIdentity peer{};
            std::string proof, why;
            if (!p.hs->verify(reinterpret_cast<const uint8_t*>(p.in.data()), &peer, &proof, &why)) {
              refuse(p, why);
            } else if (peer.role == HandshakeRole::TRANSPORT && peer.rank >= 0 && peer.rank < opt.rank &&
                       (*out)[peer.rank].fd.valid()) {
              // Both proved the secret: one of them is not the rank it claims. Which one cannot be told,
              // so the mesh is not trusted: the set-up fails here and, told why, on the second claimant.
              std::string notice = duplicate_rank_notice();
              (void)!::send(p.fd.get(), notice.data(), notice.size(), MSG_NOSIGNAL);
              error = "two connections claim to be rank " + std::to_string(peer.rank) + " (first from " +
                      peer_addr[peer.rank] + ", then from " + p.addr + "): " + kDuplicateRankHint;
              error_kind = ErrorKind::INTERNAL;
              log(LogLevel::ERROR, "rank ", opt.rank, ": ", error);
              return;
            } else if (peer.role != HandshakeRole::TRANSPORT || peer.rank < 0 || peer.rank >= opt.rank) {
              refuse(p, "unexpected peer (" + std::string(role_name(peer.role)) + " rank " + std::to_string(peer.rank) +
                            ")");
            } else {
              try {
                send_all(p.fd.get(), proof.data(), proof.size(), p.until, p.addr);
                peer_addr[peer.rank] = p.addr;
                (*out)[peer.rank] = MeshConnection{std::move(p.fd), p.addr};
                --missing;
              } catch (const HvdError& e) {
                refuse(p, e.what());
              }
            }
            continue;
          }
        }
        if (now >= p.until) refuse(p, "handshake not completed in time");
      }
      for (size_t i = 0; i < pending.size();) {
        if (!pending[i].fd.valid()) {
          pending[i] = std::move(pending.back());
          pending.pop_back();
        } else {
          ++i;
        }
      }
    }
  }
};

}  // namespace

std::vector<MeshConnection> connect_mesh(Store& store, const MeshOptions& opt, std::atomic<size_t>* rejected) {
  PHV_CHECK_ARG(opt.size >= 1 && opt.rank >= 0 && opt.rank < opt.size, "bad rank ", opt.rank, " / size ", opt.size);
  std::vector<MeshConnection> conns(opt.size);
  if (opt.size == 1) return conns;
  Deadline deadline = deadline_after(opt.connect_timeout_s);
  std::string key_base = opt.store_prefix + "/tcp/addr/";

  Fd listener;
  if (opt.rank > 0) {
    listener = listen_tcp(opt.bind_host, 0);
    set_buffer_sizes(listener.get(), opt.socket_buffer_bytes);  // inherited by accepted sockets
  }
  std::string my_addr = opt.rank > 0 ? join_host_port(published_host(opt.bind_host), local_port(listener.get())) : "";
  // Every rank claims its rank once per set-up: a second claim means two processes believe they are it.
  int64_t claims = store.add(opt.store_prefix + "/tcp/claim/" + std::to_string(opt.rank), 1);
  if (claims != 1)
    throw_error(ErrorKind::INTERNAL, "rank ", opt.rank, ": another process has already claimed rank ", opt.rank,
                " at the rendezvous (", claims, " claims): ", kDuplicateRankHint);
  store.set(key_base + std::to_string(opt.rank), my_addr);

  Acceptor acceptor{opt, listener.get(), deadline, &conns, rejected, "", ErrorKind::TIMEOUT, false, false};
  std::thread accept_thread;
  if (opt.rank > 0)
    accept_thread = std::thread([&] {
      acceptor.run();
      acceptor.finished = true;
    });

  std::string connect_error;
  ErrorKind connect_kind = ErrorKind::INTERNAL;
  int connect_peer = kNoPeer;
  for (int peer = opt.rank + 1; peer < opt.size && connect_error.empty(); ++peer) {
    std::string who = "rank " + std::to_string(peer);
    try {
      double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      std::string addr = store.get(key_base + std::to_string(peer), std::max(0.0, left));
      std::string host;
      int port = 0;
      if (!split_host_port(addr, &host, &port))
        throw_error(ErrorKind::INTERNAL, who, " published a bad address '", addr, "'");
      who += " (" + addr + ")";
      Fd fd = connect_tcp(host, port, deadline, opt.socket_buffer_bytes);
      connect_handshake(fd.get(), opt.secret, opt.store_prefix, HandshakeIdentity{HandshakeRole::TRANSPORT, opt.rank},
                        HandshakeRole::TRANSPORT, peer, deadline, who);
      conns[peer] = MeshConnection{std::move(fd), addr};
    } catch (const HvdError& e) {
      connect_kind = e.kind();
      connect_peer = peer;
      connect_error = "rank " + std::to_string(opt.rank) + ": cannot connect to " + who + ": " + e.what();
    }
  }
  if (accept_thread.joinable()) {
    if (!connect_error.empty()) acceptor.cancel = true;
    // The acceptor has no interrupt check of its own (a thread of ours): the caller asks its check while
    // it waits for the acceptor, and cancels it when told to stop.
    while (!acceptor.finished && !acceptor.cancel && interrupt_installed()) {
      if (interrupt_requested()) {
        acceptor.cancel = true;
        connect_kind = ErrorKind::INTERRUPTED;
        connect_peer = kNoPeer;
        connect_error = "rank " + std::to_string(opt.rank) + ": interrupted while waiting for connections";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    accept_thread.join();
  }
  if (!connect_error.empty()) throw HvdError(connect_kind, connect_error, connect_peer);
  if (!acceptor.error.empty())
    throw_error(acceptor.error_kind, "rank ", opt.rank, ": ", acceptor.error, " (listening on ", my_addr, ")");
  return conns;
}

}  // namespace phv
