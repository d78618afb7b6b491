#include "rendezvous/tcp_store.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>

#include "common/error.h"
#include "common/logging.h"
#include "transport/handshake.h"

namespace phv {
namespace {

constexpr uint32_t kRequestMagic = 0x51564850;   // "PHVQ"
constexpr uint32_t kResponseMagic = 0x52564850;  // "PHVR"
constexpr size_t kHeaderBytes = 24;
constexpr size_t kMaxClients = 4096;
constexpr double kHandshakeSeconds = 10;
constexpr double kReplyGraceSeconds = 5;  // client waits this much longer than the server-side timeout

enum Op : uint32_t { OP_SET = 1, OP_GET = 2, OP_ADD = 3, OP_WAIT = 4, OP_CHECK = 5 };
enum Status : uint32_t { ST_OK = 0, ST_TIMEOUT = 1, ST_BAD_REQUEST = 2 };

void put_u32(std::string& s, uint32_t v) { for (int i = 0; i < 4; ++i) s.push_back(char(v >> (8 * i))); }
void put_i64(std::string& s, int64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(char(static_cast<uint64_t>(v) >> (8 * i)));
}
uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(p[i])) << (8 * i);
  return v;
}
int64_t get_i64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return static_cast<int64_t>(v);
}

std::string make_frame(uint32_t magic, uint32_t a, uint32_t c, int64_t arg, const std::string& body) {
  std::string out;
  out.reserve(kHeaderBytes + body.size());
  put_u32(out, magic);
  put_u32(out, a);
  put_u32(out, static_cast<uint32_t>(body.size()));
  put_u32(out, c);
  put_i64(out, arg);
  out += body;
  return out;
}

std::string quoted_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

bool parse_int(const std::string& s, int64_t* v) {
  if (s.empty() || s.size() > 20) return false;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *v = x;
  return true;
}

}  // namespace

// ------------------------------------------------------------------------------------------------ server

struct TcpStoreServer::State {
  struct Client {
    Fd fd;
    std::string addr;
    std::unique_ptr<ServerHandshake> hs;  // non-null until the handshake has succeeded
    Deadline hs_deadline;
    std::string in;   // bytes received and not yet consumed
    std::string out;  // reply bytes not yet sent
    size_t out_off = 0;
    bool waiting = false;  // a GET/WAIT is parked until its keys exist or wait_deadline
    uint32_t wait_op = 0;
    std::vector<std::string> wait_keys;
    Deadline wait_deadline;
    bool dead = false;
  };
  std::map<std::string, std::string> data;
  std::vector<std::unique_ptr<Client>> clients;
};

TcpStoreServer::TcpStoreServer(const std::string& host, int port, const std::string& secret)
    : host_(host), secret_(secret) {
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

  auto reject = [&](State::Client& c, const std::string& why) {
    log(LogLevel::WARNING, "store ", where, ": closing connection from ", c.addr, ": ", why);
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
  };
  // Parses and executes one complete request at the front of c.in. Returns false if incomplete.
  auto handle_request = [&](State::Client& c) -> bool {
    if (c.in.size() < kHeaderBytes) return false;
    const char* h = c.in.data();
    uint32_t magic = get_u32(h), op = get_u32(h + 4), body_len = get_u32(h + 8), nkeys = get_u32(h + 12);
    int64_t arg = get_i64(h + 16);
    if (magic != kRequestMagic) { reject(c, "bad request magic"); return false; }
    if (body_len > kStoreMaxBody) { reject(c, "request body of " + std::to_string(body_len) + " bytes exceeds the cap"); return false; }
    if (nkeys > kStoreMaxKeys) { reject(c, "too many keys in one request"); return false; }
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
    bool one_key = keys.size() == 1;
    switch (op) {
      case OP_SET:
        if (!one_key) { reject(c, "SET needs one key"); return false; }
        st.data[keys[0]] = std::move(value);
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
        st.data[keys[0]] = std::to_string(v);
        reply(c, ST_OK, v, "");
        break;
      }
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
  while (!stop_) {
    Deadline now = Clock::now();
    Deadline next = now + std::chrono::seconds(1);
    fds.clear();
    fds.push_back({wake_fd_.get(), POLLIN, 0});
    fds.push_back({listen_fd_.get(), POLLIN, 0});
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
    if (fds[1].revents & POLLIN) {
      for (int i = 0; i < 64; ++i) {
        std::string addr;
        Fd fd = accept_tcp(listen_fd_.get(), &addr);
        if (!fd.valid()) break;
        if (st.clients.size() >= kMaxClients) {
          log(LogLevel::WARNING, "store ", where, ": too many connections, refusing ", addr);
          continue;
        }
        auto c = std::make_unique<State::Client>();
        c->addr = addr;
        c->hs = std::make_unique<ServerHandshake>(secret_, kStoreContext,
                                                  HandshakeIdentity{HandshakeRole::STORE_SERVER, -1});
        c->hs_deadline = deadline_after(kHandshakeSeconds);
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
        st.clients[i] = std::move(st.clients.back());
        st.clients.pop_back();
      } else {
        ++i;
      }
    }
  }
}

// ------------------------------------------------------------------------------------------------ client

TcpStoreClient::TcpStoreClient(const std::string& host, int port, const std::string& secret, double timeout_s)
    : host_(host), port_(port), secret_(secret), timeout_s_(timeout_s) {
  std::lock_guard<std::mutex> lock(mu_);
  connect_locked(deadline_after(timeout_s_));
}

void TcpStoreClient::connect_locked(Deadline deadline) {
  std::string who = "store " + address();
  try {
    Fd fd = connect_tcp(host_, port_, deadline);
    connect_handshake(fd.get(), secret_, kStoreContext, HandshakeIdentity{HandshakeRole::STORE_CLIENT, -1},
                      HandshakeRole::STORE_SERVER, -2, deadline, who);
    fd_ = std::move(fd);
  } catch (const HvdError& e) {
    throw_error(e.kind(), "cannot connect to the rendezvous ", who, ": ", e.what());
  }
}

TcpStoreClient::Reply TcpStoreClient::call(uint32_t op, const std::vector<std::string>& keys,
                                           const std::string& value, int64_t arg, Deadline deadline,
                                           const std::string& what) {
  std::string who = "store " + address();
  std::string body;
  for (const auto& k : keys) {
    PHV_CHECK_ARG(k.size() <= kStoreMaxKeyBytes, who, ": key too long (", k.size(), " bytes)");
    put_u32(body, static_cast<uint32_t>(k.size()));
    body += k;
  }
  body += value;
  PHV_CHECK_ARG(body.size() <= kStoreMaxBody && keys.size() <= kStoreMaxKeys, who, ": ", what,
                ": request too large");
  std::string frame = make_frame(kRequestMagic, op, static_cast<uint32_t>(keys.size()), arg, body);

  std::lock_guard<std::mutex> lock(mu_);
  try {
    if (!fd_.valid()) connect_locked(deadline);
    send_all(fd_.get(), frame.data(), frame.size(), deadline, who);
    char h[kHeaderBytes];
    recv_all(fd_.get(), h, sizeof(h), deadline, who);
    Reply r;
    uint32_t body_len = get_u32(h + 8);
    if (get_u32(h) != kResponseMagic || body_len > kStoreMaxBody)
      throw_error(ErrorKind::INTERNAL, who, " sent a malformed reply");
    r.status = get_u32(h + 4);
    r.value = get_i64(h + 16);
    r.body.resize(body_len);
    recv_all(fd_.get(), &r.body[0], body_len, deadline, who);
    return r;
  } catch (const HvdError& e) {
    fd_.reset();  // the stream position is unknown now; the next call reconnects
    throw_error(e.kind(), what, " failed: ", e.what());
  }
}

void TcpStoreClient::set(const std::string& key, const std::string& value) {
  call(OP_SET, {key}, value, 0, deadline_after(timeout_s_), "store " + address() + ": set('" + key + "')");
}

std::string TcpStoreClient::get(const std::string& key, double timeout_s) {
  std::string what = "store " + address() + ": get('" + key + "')";
  Reply r = call(OP_GET, {key}, "", static_cast<int64_t>(timeout_s * 1000), deadline_after(timeout_s + kReplyGraceSeconds),
                 what);
  if (r.status == ST_TIMEOUT) throw_error(ErrorKind::TIMEOUT, what, " timed out after ", timeout_s, " s");
  if (r.status != ST_OK) throw_error(ErrorKind::INTERNAL, what, " failed: ", r.body);
  return r.body;
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  std::string what = "store " + address() + ": add('" + key + "')";
  Reply r = call(OP_ADD, {key}, "", delta, deadline_after(timeout_s_), what);
  if (r.status != ST_OK) throw_error(ErrorKind::INTERNAL, what, " failed: ", r.body);
  return r.value;
}

void TcpStoreClient::wait(const std::vector<std::string>& keys, double timeout_s) {
  if (keys.empty()) return;
  std::string what = "store " + address() + ": wait(" + quoted_keys(keys) + ")";
  Reply r = call(OP_WAIT, keys, "", static_cast<int64_t>(timeout_s * 1000),
                 deadline_after(timeout_s + kReplyGraceSeconds), what);
  if (r.status == ST_TIMEOUT)
    throw_error(ErrorKind::TIMEOUT, what, " timed out after ", timeout_s, " s; keys still missing: ", r.body);
  if (r.status != ST_OK) throw_error(ErrorKind::INTERNAL, what, " failed: ", r.body);
}

bool TcpStoreClient::check(const std::string& key) {
  Reply r = call(OP_CHECK, {key}, "", 0, deadline_after(timeout_s_), "store " + address() + ": check('" + key + "')");
  return r.value != 0;
}

}  // namespace phv
