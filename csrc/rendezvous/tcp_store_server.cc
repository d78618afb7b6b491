// TcpStoreServer (tcp_store.h): one background thread, one poll loop over every connection.
#include <errno.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "common/error.h"
#include "common/log_throttle.h"
#include "common/logging.h"
#include "rendezvous/store_wire.h"
#include "rendezvous/tcp_store.h"
#include "transport/handshake.h"

namespace phv {
namespace {
using namespace store_wire;

constexpr size_t kEntryOverhead = 64;  // bytes charged per stored key for the map's own bookkeeping
constexpr auto kAcceptPause = std::chrono::milliseconds(200);  // after accept() ran out of descriptors
constexpr size_t kWarningBurst = 5;        // refusal warnings logged in full per window...
constexpr double kWarningWindowSeconds = 10;  // ...then one summary line per window

bool parse_int(const std::string& s, int64_t* v) {
  if (s.empty() || s.size() > 20) return false;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *v = x;
  return true;
}

// The connection cap: the configured one, but never more than a quarter of the descriptors this process
// may open (read each time: the script may raise its limit).
size_t connection_cap(size_t configured) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return configured;
  return std::min<size_t>(configured, std::max<size_t>(4, rl.rlim_cur / 4));
}

}  // namespace

struct TcpStoreServer::State {
  struct Client {
    Fd fd;
    std::string addr;
    std::unique_ptr<ServerHandshake> hs;  // non-null until the handshake has succeeded
    Deadline hs_deadline;
    std::string in;   // bytes received and not yet consumed
    std::string out;  // reply bytes not yet sent
    size_t out_off = 0;
    bool admitted = false;  // the request at the front of `in` passed the limits; `reserved` bytes held
    size_t reserved = 0;    // counted in State::in_transit until the request (or its parked wait) ends
    size_t discard = 0;     // bytes of a refused request still to be read and dropped
    bool waiting = false;   // a GET/WAIT is parked until its keys exist or wait_deadline
    uint32_t wait_op = 0;
    std::vector<std::string> wait_keys;
    Deadline wait_deadline;
    bool dead = false;
  };
  std::map<std::string, std::string> data;
  size_t stored = 0;      // keys + values + kEntryOverhead per key
  size_t in_transit = 0;  // bodies of admitted requests being received or parked
  std::vector<std::unique_ptr<Client>> clients;

  void put(const std::string& key, std::string value) {
    auto it = data.find(key);
    if (it != data.end()) {
      stored -= it->second.size();
      it->second = std::move(value);
      stored += it->second.size();
    } else {
      stored += key.size() + value.size() + kEntryOverhead;
      data.emplace(key, std::move(value));
    }
  }
  size_t erase_prefix(const std::string& prefix) {
    size_t n = 0;
    for (auto it = data.lower_bound(prefix); it != data.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
      stored -= it->first.size() + it->second.size() + kEntryOverhead;
      it = data.erase(it);
      ++n;
    }
    return n;
  }
  void release(Client& c) {
    in_transit -= c.reserved;
    c.reserved = 0;
    c.admitted = false;
  }
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
  State st;
  std::string where = join_host_port(host_, port_);
  LogThrottle warnings("store " + where, kWarningBurst, kWarningWindowSeconds);

  auto reject = [&](State::Client& c, const std::string& why) {
    warnings.warn("closing connection from " + c.addr + ": " + why);
    ++rejected_;
    c.dead = true;
  };
  auto reply = [&](State::Client& c, uint32_t status, int64_t value, const std::string& body) {
    c.out += make_frame(kResponseMagic, status, 0, value, body);
  };
  auto missing = [&](const std::vector<std::string>& keys) {
    std::vector<std::string> out;
    for (const auto& k : keys)
      if (!st.data.count(k)) out.push_back(k);
    return out;
  };
  // Answers a parked GET/WAIT when its keys exist, or with TIMEOUT once its deadline passed.
  auto try_finish_wait = [&](State::Client& c, Deadline now) {
    std::vector<std::string> miss = missing(c.wait_keys);
    if (miss.empty()) {
      reply(c, ST_OK, 0, c.wait_op == OP_GET ? st.data[c.wait_keys[0]] : std::string());
    } else if (now >= c.wait_deadline) {
      reply(c, ST_TIMEOUT, 0, quoted_keys(miss));
    } else {
      return;
    }
    c.waiting = false;
    c.wait_keys.clear();
    st.release(c);
  };
  // Why a request of body_len bytes may not be buffered ("" if it may). For a SET, `c.in` holds the key
  // length already (the caller waits for it).
  auto over_limit = [&](const State::Client& c, uint32_t op, uint32_t nkeys, uint32_t body_len) -> std::string {
    if (op == OP_SET && nkeys == 1 && body_len >= 4) {
      size_t key_len = std::min<size_t>(get_u32(c.in.data() + kHeaderBytes), body_len - 4);
      size_t value_len = body_len - 4 - key_len;
      if (value_len > limits_.max_value_bytes)
        return "a value of " + std::to_string(value_len) + " bytes exceeds the store's limit of " +
               std::to_string(limits_.max_value_bytes) + " bytes per value (PYHOROVOD_STORE_MAX_VALUE_BYTES)";
    }
    // Reads store nothing: a full store still answers them, as long as their keys fit beside the rest.
    bool writes = op == OP_SET || op == OP_ADD;
    size_t after = (writes ? st.stored + kEntryOverhead : 0) + st.in_transit + body_len;
    if (after > limits_.max_total_bytes)
      return "the store holds " + std::to_string(st.stored) + " bytes (" + std::to_string(st.in_transit) +
             " more in transit); " + std::to_string(body_len) + " more would exceed its limit of " +
             std::to_string(limits_.max_total_bytes) + " bytes in total (PYHOROVOD_STORE_MAX_BYTES)";
    return "";
  };
  // Parses and executes one complete request at the front of c.in. Returns false if incomplete.
  auto handle_request = [&](State::Client& c) -> bool {
    if (c.discard > 0) {
      size_t n = std::min(c.discard, c.in.size());
      c.in.erase(0, n);
      c.discard -= n;
      if (c.discard > 0) return false;
    }
    if (c.in.size() < kHeaderBytes) return false;
    const char* h = c.in.data();
    uint32_t magic = get_u32(h), op = get_u32(h + 4), body_len = get_u32(h + 8), nkeys = get_u32(h + 12);
    int64_t arg = get_i64(h + 16);
    if (magic != kRequestMagic) { reject(c, "bad request magic"); return false; }
    if (body_len > kStoreMaxBody) { reject(c, "request body of " + std::to_string(body_len) + " bytes exceeds the cap"); return false; }
    if (nkeys > kStoreMaxKeys) { reject(c, "too many keys in one request"); return false; }
    if (!c.admitted) {
      if (op == OP_SET && nkeys == 1 && body_len >= 4 && c.in.size() < kHeaderBytes + 4) return false;
      std::string why = over_limit(c, op, nkeys, body_len);
      if (!why.empty()) {
        c.in.erase(0, kHeaderBytes);
        c.discard = body_len;
        reply(c, ST_LIMIT, 0, why);
        return true;
      }
      c.admitted = true;
      c.reserved = body_len;
      st.in_transit += body_len;
    }
    if (c.in.size() < kHeaderBytes + body_len) return false;
    std::vector<std::string> keys;
    size_t off = kHeaderBytes, end = kHeaderBytes + body_len;
    for (uint32_t i = 0; i < nkeys; ++i) {
      if (end - off < 4) { reject(c, "truncated key"); return false; }
      uint32_t klen = get_u32(c.in.data() + off);
      off += 4;
      if (klen > kStoreMaxKeyBytes || klen > end - off) { reject(c, "bad key length"); return false; }
      keys.emplace_back(c.in.data() + off, klen);
      off += klen;
    }
    std::string value(c.in.data() + off, end - off);
    c.in.erase(0, end);
    if (op != OP_GET && op != OP_WAIT) st.release(c);  // a parked wait keeps its keys, and its reservation
    bool one_key = keys.size() == 1;
    switch (op) {
      case OP_SET:
        if (!one_key) { reject(c, "SET needs one key"); return false; }
        st.put(keys[0], std::move(value));
        reply(c, ST_OK, 0, "");
        break;
      case OP_CHECK:
        if (!one_key) { reject(c, "CHECK needs one key"); return false; }
        reply(c, ST_OK, st.data.count(keys[0]) ? 1 : 0, "");
        break;
      case OP_ADD: {
        if (!one_key) { reject(c, "ADD needs one key"); return false; }
        int64_t v = 0;
        auto it = st.data.find(keys[0]);
        if (it != st.data.end() && !parse_int(it->second, &v)) {
          reply(c, ST_BAD_REQUEST, 0, "value of '" + keys[0] + "' is not an integer");
          break;
        }
        v = static_cast<int64_t>(static_cast<uint64_t>(v) + static_cast<uint64_t>(arg));
        st.put(keys[0], std::to_string(v));
        reply(c, ST_OK, v, "");
        break;
      }
      case OP_DELETE_PREFIX:
        if (!one_key) { reject(c, "DELETE_PREFIX needs one key"); return false; }
        reply(c, ST_OK, static_cast<int64_t>(st.erase_prefix(keys[0])), "");
        break;
      case OP_GET:
      case OP_WAIT:
        if (op == OP_GET && !one_key) { reject(c, "GET needs one key"); return false; }
        c.waiting = true;
        c.wait_op = op;
        c.wait_keys = std::move(keys);
        c.wait_deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(0, arg));
        try_finish_wait(c, Clock::now());
        break;
      default:
        reject(c, "unknown op " + std::to_string(op));
        return false;
    }
    return true;
  };

  std::vector<pollfd> fds;
  char chunk[65536];
  Deadline accept_paused_until{};  // accept() ran out of descriptors: leave the listening socket until then
  bool at_cap = false;
  while (!stop_) {
    Deadline now = Clock::now();
    Deadline next = now + std::chrono::seconds(1);
    size_t cap = connection_cap(limits_.max_connections);
    if (st.clients.size() >= cap && !at_cap)
      warnings.warn("holding " + std::to_string(st.clients.size()) + " connections, the cap (min of " +
                    std::to_string(limits_.max_connections) +
                    " and a quarter of RLIMIT_NOFILE); new ones wait until some close");
    at_cap = st.clients.size() >= cap;
    bool paused = now < accept_paused_until;
    if (paused) next = std::min(next, accept_paused_until);
    fds.clear();
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    fds.push_back({at_cap || paused ? -1 : listen_fd_.get(), POLLIN, 0});  // poll skips a negative fd
    for (auto& c : st.clients) {
      short ev = POLLRDHUP;
      if (!c->out.empty()) ev |= POLLOUT;
      else if (!c->waiting) ev |= POLLIN;
      if (c->hs) next = std::min(next, c->hs_deadline);
      if (c->waiting) next = std::min(next, c->wait_deadline);
      fds.push_back({c->fd.get(), ev, 0});
    }
    int rc = ::poll(fds.data(), fds.size(), poll_timeout_ms(next, 1000));
    if (rc < 0 && errno != EINTR) {
      log(LogLevel::ERROR, "store ", where, ": poll failed: ", errno_text(errno));
      break;
    }
    now = Clock::now();
    warnings.flush(now);
    if (fds[1].revents & POLLIN) {
      for (int i = 0; i < 64 && st.clients.size() < cap; ++i) {
        std::string addr;
        Fd fd = accept_tcp(listen_fd_.get(), &addr);
        if (!fd.valid()) {
          int err = errno;
          if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
            accept_paused_until = now + kAcceptPause;
            warnings.warn("cannot accept connections (" + errno_text(err) + "); pausing for 200 ms");
          }
          break;
        }
        auto c = std::make_unique<State::Client>();
        c->addr = addr;
        c->hs = std::make_unique<ServerHandshake>(secret_, kStoreContext,
                                                  HandshakeIdentity{HandshakeRole::STORE_SERVER, -1});
        c->hs_deadline = deadline_after(limits_.handshake_s);
        // 32 bytes on a fresh socket always fit its send buffer.
        if (::send(fd.get(), c->hs->hello().data(), c->hs->hello().size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(c->hs->hello().size()))
          continue;
        c->fd = std::move(fd);
        st.clients.push_back(std::move(c));
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      State::Client& c = *st.clients[i - 2];
      short re = fds[i].revents;
      if (re & (POLLERR | POLLHUP | POLLNVAL)) { c.dead = true; continue; }
      if (c.hs && now >= c.hs_deadline) { reject(c, "handshake not completed in time"); continue; }
      if ((re & POLLOUT) && !c.out.empty()) {
        ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN && errno != EINTR) { c.dead = true; continue; }
        if (n > 0) c.out_off += static_cast<size_t>(n);
        if (c.out_off == c.out.size()) { c.out.clear(); c.out_off = 0; }
      }
      if (re & (POLLIN | POLLRDHUP)) {
        if (c.waiting || !c.out.empty()) {
          // A client parked in GET/WAIT sends nothing more; RDHUP means it went away.
          if (re & POLLRDHUP) c.dead = true;
          continue;
        }
        // Read no further than the handshake or the largest allowed request needs.
        size_t want = c.hs ? kClientHelloBytes - c.in.size() : sizeof(chunk);
        ssize_t n = ::recv(c.fd.get(), chunk, std::min(want, sizeof(chunk)), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) { c.dead = true; continue; }
        if (n > 0) c.in.append(chunk, static_cast<size_t>(n));
        if (c.hs) {
          if (c.in.size() < kClientHelloBytes) continue;
          HandshakeIdentity peer{};
          std::string proof, why;
          if (!c.hs->verify(reinterpret_cast<const uint8_t*>(c.in.data()), &peer, &proof, &why)) {
            reject(c, "handshake failed: " + why);
            continue;
          }
          if (peer.role != HandshakeRole::STORE_CLIENT) { reject(c, "handshake from a non-store client"); continue; }
          c.hs.reset();
          c.in.clear();
          c.out += proof;
          continue;
        }
        while (!c.dead && !c.waiting && c.out.empty() && handle_request(c)) {
        }
      }
    }
    // Keys may have appeared (or deadlines passed) for parked requests.
    for (auto& c : st.clients)
      if (c->waiting && !c->dead) try_finish_wait(*c, now);
    for (size_t i = 0; i < st.clients.size();) {
      if (st.clients[i]->dead) {
        st.release(*st.clients[i]);
        st.clients[i] = std::move(st.clients.back());
        st.clients.pop_back();
      } else {
        ++i;
      }
    }
  }
  warnings.flush_pending(Clock::now());
}

}  // namespace phv
