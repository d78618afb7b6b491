// TcpStoreServer (tcp_store.h): one background thread, one poll loop over every connection. This file
// moves bytes -- accepting, the handshake, framing, refusing what is over the limits -- and leaves what
// the requests mean to StoreState (store_state.h).
#include <errno.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <unordered_map>

#include "common/error.h"
#include "common/log_throttle.h"
#include "common/logging.h"
#include "rendezvous/store_state.h"
#include "rendezvous/store_wire.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/handshake.h"

namespace phv {
namespace {
using namespace store_wire;

constexpr auto kAcceptPause = std::chrono::milliseconds(200);  // after accept() ran out of descriptors
constexpr size_t kWarningBurst = 5;        // refusal warnings logged in full per window...
constexpr double kWarningWindowSeconds = 10;  // ...then one summary line per window
constexpr size_t kAcceptsPerTurn = 64;

// The connection cap: the configured one, but never more than a quarter of the descriptors this process
// may open (read each time: the script may raise its limit).
size_t connection_cap(size_t configured) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return configured;
  return std::min<size_t>(configured, std::max<size_t>(4, rl.rlim_cur / 4));
}

}  // namespace

// The poll loop's state: the connections and their buffers; the keys live in `kv`.
struct TcpStoreServer::State {
  struct Client {
    StoreClientId id = 0;
    Fd fd;
    std::string addr;
    std::unique_ptr<ServerHandshake> hs;  // non-null until the handshake has succeeded
    Deadline hs_deadline;
    std::string in;   // bytes received and not yet consumed
    std::string out;  // reply bytes not yet sent
    size_t out_off = 0;
    bool admitted = false;  // the request at the front of `in` passed StoreState::admit
    size_t discard = 0;     // bytes of a refused request still to be read and dropped
    bool waiting = false;   // a GET/WAIT is parked in `kv`
    bool dead = false;
  };

  explicit State(TcpStoreServer& s)
      : server(s),
        kv(s.limits_),
        where(join_host_port(s.host_, s.port_)),
        warnings("store " + where, kWarningBurst, kWarningWindowSeconds) {}

  void run();
  void accept_clients(Deadline now, size_t cap);
  void serve(Client& c, short revents, Deadline now);
  void finish_handshake(Client& c);
  bool take_request(Client& c);  // false: incomplete, or the connection was rejected
  void deliver_finished_waits(Deadline now);
  void remove_dead();
  void reject(Client& c, const std::string& why) {
    warnings.warn("closing connection from " + c.addr + ": " + why);
    ++server.rejected_;
    c.dead = true;
  }
  static void send_reply(Client& c, const StoreReply& r) { c.out += encode_reply(r.status, r.value, r.body); }

  TcpStoreServer& server;
  StoreState kv;
  std::string where;
  LogThrottle warnings;
  std::vector<std::unique_ptr<Client>> clients;
  std::unordered_map<StoreClientId, Client*> by_id;
  StoreClientId next_id = 1;
  std::vector<pollfd> fds;
  char chunk[65536];
  Deadline accept_paused_until{};  // accept() ran out of descriptors: leave the listening socket until then
  bool at_cap = false;
};

TcpStoreServer::TcpStoreServer(const std::string& host, int port, const std::string& secret, StoreLimits limits)
    : host_(host), secret_(secret), limits_(limits) {
  PHV_CHECK_ARG(limits.max_value_bytes <= kStoreMaxBody, "the store's value limit ", limits.max_value_bytes,
                " exceeds the wire format's cap of ", kStoreMaxBody, " bytes");
  PHV_CHECK_ARG(limits.handshake_s > 0 && limits.max_connections > 0, "bad store limits");
  listen_fd_ = listen_tcp(host, port);
  port_ = local_port(listen_fd_.get());
  wake_fd_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake_fd_.valid()) throw_error(ErrorKind::INTERNAL, "eventfd failed: ", errno_text(errno));
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::~TcpStoreServer() { close(); }

void TcpStoreServer::close() {
  std::lock_guard<std::mutex> lock(close_mu_);
  if (!thread_.joinable()) return;
  stop_ = true;
  uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof(one));
  thread_.join();
  listen_fd_.reset();
}

void TcpStoreServer::run() {
  State st(*this);
  st.run();
}

void TcpStoreServer::State::run() {
  const StoreLimits& limits = server.limits_;
  while (!server.stop_) {
    Deadline now = Clock::now();
    Deadline next = now + std::chrono::seconds(1);
    size_t cap = connection_cap(limits.max_connections);
    if (clients.size() >= cap && !at_cap)
      warnings.warn("holding " + std::to_string(clients.size()) + " connections, the cap (min of " +
                    std::to_string(limits.max_connections) +
                    " and a quarter of RLIMIT_NOFILE); new ones wait until some close");
    at_cap = clients.size() >= cap;
    bool paused = now < accept_paused_until;
    if (paused) next = std::min(next, accept_paused_until);
    fds.clear();
    fds.push_back({server.wake_fd_.get(), POLLIN, 0});
    fds.push_back({at_cap || paused ? -1 : server.listen_fd_.get(), POLLIN, 0});  // poll skips a negative fd
    for (auto& c : clients) {
      short ev = POLLRDHUP;
      if (!c->out.empty()) ev |= POLLOUT;
      else if (!c->waiting) ev |= POLLIN;
      if (c->hs) next = std::min(next, c->hs_deadline);
      fds.push_back({c->fd.get(), ev, 0});
    }
    next = kv.next_deadline(next);
    int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms(next, 1000));
    if (rc < 0 && errno != EINTR) {
      log(LogLevel::ERROR, "store ", where, ": poll failed: ", errno_text(errno));
      break;
    }
    now = Clock::now();
    warnings.flush(now);
    if (fds[1].revents & POLLIN) accept_clients(now, cap);
    // (Clients accepted just now lie beyond fds: they are served from the next turn.)
    for (size_t i = 2; i < fds.size(); ++i) serve(*clients[i - 2], fds[i].revents, now);
    remove_dead();
    // Keys may have appeared (or deadlines passed) for parked requests.
    deliver_finished_waits(now);
  }
  warnings.flush_pending(Clock::now());
}

void TcpStoreServer::State::accept_clients(Deadline now, size_t cap) {
  for (size_t i = 0; i < kAcceptsPerTurn && clients.size() < cap; ++i) {
    std::string addr;
    Fd fd = accept_tcp(server.listen_fd_.get(), &addr);
    if (!fd.valid()) {
      int err = errno;
      if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
        accept_paused_until = now + kAcceptPause;
        warnings.warn("cannot accept connections (" + errno_text(err) + "); pausing for 200 ms");
      }
      break;
    }
    auto c = std::make_unique<Client>();
    c->addr = addr;
    c->hs = std::make_unique<ServerHandshake>(server.secret_, kStoreContext,
                                              HandshakeIdentity{HandshakeRole::STORE_SERVER, -1});
    c->hs_deadline = deadline_after(server.limits_.handshake_s);
    // 32 bytes on a fresh socket always fit its send buffer.
    if (::send(fd.get(), c->hs->hello().data(), c->hs->hello().size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(c->hs->hello().size()))
      continue;
    c->fd = std::move(fd);
    c->id = next_id++;
    by_id[c->id] = c.get();
    clients.push_back(std::move(c));
  }
}

void TcpStoreServer::State::serve(Client& c, short re, Deadline now) {
  if (re & (POLLERR | POLLHUP | POLLNVAL)) {
    c.dead = true;
    return;
  }
  if (c.hs && now >= c.hs_deadline) {
    reject(c, "handshake not completed in time");
    return;
  }
  if ((re & POLLOUT) && !c.out.empty()) {
    ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      c.dead = true;
      return;
    }
    if (n > 0) c.out_off += static_cast<size_t>(n);
    if (c.out_off == c.out.size()) {
      c.out.clear();
      c.out_off = 0;
    }
  }
  if (!(re & (POLLIN | POLLRDHUP))) return;
  if (c.waiting || !c.out.empty()) {
    // A client parked in GET/WAIT sends nothing more; RDHUP means it went away.
    if (re & POLLRDHUP) c.dead = true;
    return;
  }
  // Read no further than the handshake or the largest allowed request needs.
  size_t want = c.hs ? kClientHelloBytes - c.in.size() : sizeof(chunk);
  ssize_t n = ::recv(c.fd.get(), chunk, std::min(want, sizeof(chunk)), 0);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
    c.dead = true;
    return;
  }
  if (n > 0) c.in.append(chunk, static_cast<size_t>(n));
  if (c.hs) {
    finish_handshake(c);
    return;
  }
  while (!c.dead && !c.waiting && c.out.empty() && take_request(c)) {
  }
}

void TcpStoreServer::State::finish_handshake(Client& c) {
  if (c.in.size() < kClientHelloBytes) return;
  HandshakeIdentity peer{};
  std::string proof, why;
  if (!c.hs->verify(reinterpret_cast<const uint8_t*>(c.in.data()), &peer, &proof, &why)) {
    reject(c, "handshake failed: " + why);
    return;
  }
  if (peer.role != HandshakeRole::STORE_CLIENT) {
    reject(c, "handshake from a non-store client");
    return;
  }
  c.hs.reset();
  c.in.clear();
  c.out += proof;
}

bool TcpStoreServer::State::take_request(Client& c) {
  if (c.discard > 0) {
    size_t n = std::min(c.discard, c.in.size());
    c.in.erase(0, n);
    c.discard -= n;
    if (c.discard > 0) return false;
  }
  if (c.in.size() < kHeaderBytes) return false;
  const FrameHeader h = decode_header(c.in.data());
  if (h.magic != kRequestMagic) {
    reject(c, "bad request magic");
    return false;
  }
  if (h.body_len > kStoreMaxBody) {
    reject(c, "request body of " + std::to_string(h.body_len) + " bytes exceeds the cap");
    return false;
  }
  if (h.count > kStoreMaxKeys) {
    reject(c, "too many keys in one request");
    return false;
  }
  if (!c.admitted) {
    // A SET's value size is known once its key length has arrived.
    bool sized_set = h.code == OP_SET && h.count == 1 && h.body_len >= 4;
    if (sized_set && c.in.size() < kHeaderBytes + 4) return false;
    uint32_t key_bytes = sized_set ? first_key_bytes(c.in.data() + kHeaderBytes) : 0;
    std::string why = kv.admit(c.id, h.code, h.count, h.body_len, key_bytes);
    if (!why.empty()) {
      c.in.erase(0, kHeaderBytes);
      c.discard = h.body_len;
      send_reply(c, StoreReply{ST_LIMIT, 0, why});
      return true;
    }
    c.admitted = true;
  }
  if (c.in.size() < kHeaderBytes + h.body_len) return false;
  StoreRequest request;
  request.op = h.code;
  request.arg = h.arg;
  std::string bad = decode_request_body(c.in.data() + kHeaderBytes, h.body_len, h.count, kStoreMaxKeyBytes,
                                        &request.keys, &request.value);
  if (!bad.empty()) {
    reject(c, bad);
    return false;
  }
  c.in.erase(0, kHeaderBytes + h.body_len);
  c.admitted = false;
  StoreOutcome out = kv.handle(c.id, std::move(request), Clock::now());
  switch (out.kind) {
    case StoreOutcome::Kind::REPLY: send_reply(c, out.reply); return true;
    case StoreOutcome::Kind::PARKED: c.waiting = true; return true;
    case StoreOutcome::Kind::REJECT: break;
  }
  reject(c, out.reason);
  return false;
}

void TcpStoreServer::State::deliver_finished_waits(Deadline now) {
  for (auto& done : kv.finish_waits(now)) {
    auto it = by_id.find(done.first);
    if (it == by_id.end()) continue;
    it->second->waiting = false;
    send_reply(*it->second, done.second);
  }
}

void TcpStoreServer::State::remove_dead() {
  for (size_t i = 0; i < clients.size();) {
    if (clients[i]->dead) {
      kv.drop(clients[i]->id);
      by_id.erase(clients[i]->id);
      clients[i] = std::move(clients.back());
      clients.pop_back();
    } else {
      ++i;
    }
  }
}

}  // namespace phv
