// TcpStoreClient (tcp_store.h); the server is in tcp_store_server.cc.
#include "rendezvous/tcp_store.h"

#include "common/enforce.h"
#include "common/error.h"
#include "rendezvous/handshake.h"
#include "rendezvous/store_wire.h"

namespace phv {
namespace {
using namespace store_wire;

constexpr double kReplyGraceSeconds = 5;  // client waits this much longer than the server-side timeout

}  // namespace

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

TcpStoreClient::Reply TcpStoreClient::call(uint32_t op, const std::vector<std::string>& keys, const std::string& value,
                                           int64_t arg, Deadline deadline, const std::string& what) {
  std::string who = "store " + address();
  for (const auto& k : keys) PHV_CHECK_ARG(k.size() <= kStoreMaxKeyBytes, who, ": key too long (", k.size(), " bytes)");
  std::string body = encode_request_body(keys, value);
  PHV_CHECK_ARG(body.size() <= kStoreMaxBody && keys.size() <= kStoreMaxKeys, who, ": ", what, ": request too large");
  std::string frame = make_frame(kRequestMagic, op, static_cast<uint32_t>(keys.size()), arg, body);

  std::lock_guard<std::mutex> lock(mu_);
  Reply r;
  try {
    if (!fd_.valid()) connect_locked(deadline);
    send_all(fd_.get(), frame.data(), frame.size(), deadline, who);
    char h[kHeaderBytes];
    recv_all(fd_.get(), h, sizeof(h), deadline, who);
    FrameHeader head = decode_header(h);
    PHV_ENFORCE(head.magic == kResponseMagic && head.body_len <= kStoreMaxBody, who, " sent a malformed reply");
    r.status = head.code;
    r.value = head.arg;
    r.body.resize(head.body_len);
    recv_all(fd_.get(), &r.body[0], head.body_len, deadline, who);
  } catch (const HvdError& e) {
    fd_.reset();  // the stream position is unknown now; the next call reconnects
    throw_error(e.kind(), what, " failed: ", e.what());
  }
  // Over one of the server's memory limits: the writer's mistake (ValueError in Python); the body names it.
  if (r.status == ST_LIMIT) throw_error(ErrorKind::INVALID_ARGUMENT, what, " refused: ", r.body);
  return r;
}

void TcpStoreClient::set(const std::string& key, const std::string& value) {
  call(OP_SET, {key}, value, 0, deadline_after(timeout_s_), "store " + address() + ": set('" + key + "')");
}

std::string TcpStoreClient::get(const std::string& key, double timeout_s) {
  std::string what = "store " + address() + ": get('" + key + "')";
  Reply r = call(OP_GET, {key}, "", static_cast<int64_t>(timeout_s * 1000),
                 deadline_after(timeout_s + kReplyGraceSeconds), what);
  if (r.status == ST_TIMEOUT) throw_error(ErrorKind::TIMEOUT, what, " timed out after ", timeout_s, " s");
  PHV_ENFORCE(r.status == ST_OK, what, " failed: ", r.body);  // a get is answered OK, TIMEOUT or LIMIT
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
  PHV_ENFORCE(r.status == ST_OK, what, " failed: ", r.body);  // a wait is answered OK, TIMEOUT or LIMIT
}

int64_t TcpStoreClient::delete_prefix(const std::string& prefix) {
  Reply r = call(OP_DELETE_PREFIX, {prefix}, "", 0, deadline_after(timeout_s_),
                 "store " + address() + ": delete_prefix('" + prefix + "')");
  return r.value;
}

bool TcpStoreClient::check(const std::string& key) {
  Reply r = call(OP_CHECK, {key}, "", 0, deadline_after(timeout_s_), "store " + address() + ": check('" + key + "')");
  return r.value != 0;
}

}  // namespace phv
