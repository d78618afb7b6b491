#include "rendezvous/handshake.h"

#include <errno.h>
#include <sys/random.h>

#include <cstring>

#include "common/byte_codec.h"
#include "common/error.h"
#include "common/sha256.h"
#include "rendezvous/socket.h"

namespace phv {
namespace {

// The common 32-byte prefix of ServerHello and ClientHello:
//   magic u32 | version u16 | role u16 | rank i32 | reserved u32 | nonce 16 bytes (little-endian).
std::string make_hello(HandshakeIdentity me) {
  uint8_t b[32] = {0};
  store_le<uint32_t>(b, kHandshakeMagic);
  store_le<uint16_t>(b + 4, kProtocolVersion);
  store_le<uint16_t>(b + 6, static_cast<uint16_t>(me.role));
  store_le<uint32_t>(b + 8, static_cast<uint32_t>(me.rank));
  random_bytes(b + 16, 16);
  return std::string(reinterpret_cast<char*>(b), 32);
}

// Checks magic and version of a hello prefix; fills *id.
bool parse_hello(const uint8_t* b, HandshakeIdentity* id, std::string* reason) {
  uint32_t magic = load_le<uint32_t>(b);
  if (magic != kHandshakeMagic) {
    *reason = "bad handshake magic 0x" + to_hex(b, 4);
    return false;
  }
  uint16_t version = load_le<uint16_t>(b + 4);
  if (version != kProtocolVersion) {
    *reason = "protocol version " + std::to_string(version) + " (we speak " + std::to_string(kProtocolVersion) + ")";
    return false;
  }
  uint16_t role = load_le<uint16_t>(b + 6);
  if (role < 1 || role > 3) {
    *reason = "unknown role " + std::to_string(role);
    return false;
  }
  id->role = static_cast<HandshakeRole>(role);
  id->rank = static_cast<int32_t>(load_le<uint32_t>(b + 8));
  return true;
}

std::string mac(const std::string& secret, const char* label, const std::string& context, const std::string& a,
                const std::string& b) {
  std::string msg;
  msg.reserve(16 + context.size() + a.size() + b.size());
  msg.append(label);
  msg.push_back('\0');
  msg.append(std::to_string(context.size()));
  msg.push_back('\0');
  msg.append(context);
  msg.append(a);
  msg.append(b);
  Digest d = hmac_sha256(secret, msg);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

}  // namespace

void random_bytes(void* out, size_t len) {
  uint8_t* p = static_cast<uint8_t*>(out);
  while (len > 0) {
    ssize_t n = getrandom(p, len, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_error(ErrorKind::INTERNAL, "getrandom failed: ", errno_text(errno));
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
}

const char* const kDuplicateRankHint =
    "another process holds the job secret and claims that rank: the same rank started twice, or, with "
    "torchrun and no PYHOROVOD_SECRET, any local process (that secret derives from MASTER_ADDR:MASTER_PORT); "
    "give every rank a real secret with PYHOROVOD_SECRET or PYHOROVOD_SECRET_FILE";

std::string duplicate_rank_notice() {
  std::string notice(kServerProofBytes, '\0');
  store_le<uint32_t>(&notice[0], kDuplicateRankMagic);
  return notice;
}

const char* role_name(HandshakeRole role) {
  switch (role) {
    case HandshakeRole::STORE_SERVER: return "store server";
    case HandshakeRole::STORE_CLIENT: return "store client";
    case HandshakeRole::TRANSPORT: return "transport";
  }
  return "?";
}

ServerHandshake::ServerHandshake(const std::string& secret, const std::string& context, HandshakeIdentity me)
    : secret_(secret), context_(context), hello_(make_hello(me)) {}

bool ServerHandshake::verify(const uint8_t* client_hello, HandshakeIdentity* peer, std::string* proof,
                             std::string* reason) const {
  if (!parse_hello(client_hello, peer, reason)) return false;
  std::string prefix(reinterpret_cast<const char*>(client_hello), 32);
  std::string expect = mac(secret_, "phv-client", context_, hello_, prefix);
  if (!digest_equal(reinterpret_cast<const uint8_t*>(expect.data()), client_hello + 32, 32)) {
    *reason = "wrong secret (handshake proof does not match)";
    return false;
  }
  std::string full(reinterpret_cast<const char*>(client_hello), kClientHelloBytes);
  *proof = mac(secret_, "phv-server", context_, hello_, full);
  return true;
}

HandshakeIdentity accept_handshake(int fd, const std::string& secret, const std::string& context, HandshakeIdentity me,
                                   Deadline deadline, const std::string& who) {
  ServerHandshake hs(secret, context, me);
  send_all(fd, hs.hello().data(), hs.hello().size(), deadline, who);
  uint8_t client[kClientHelloBytes];
  recv_all(fd, client, sizeof(client), deadline, who);
  HandshakeIdentity peer{};
  std::string proof, reason;
  if (!hs.verify(client, &peer, &proof, &reason))
    throw_error(ErrorKind::INTERNAL, "handshake with ", who, " rejected: ", reason);
  send_all(fd, proof.data(), proof.size(), deadline, who);
  return peer;
}

HandshakeIdentity connect_handshake(int fd, const std::string& secret, const std::string& context, HandshakeIdentity me,
                                    HandshakeRole expected_role, int expected_rank, Deadline deadline,
                                    const std::string& who) {
  uint8_t server[kServerHelloBytes];
  recv_all(fd, server, sizeof(server), deadline, who);
  HandshakeIdentity peer{};
  std::string reason;
  if (!parse_hello(server, &peer, &reason))
    throw_error(ErrorKind::INTERNAL, "handshake with ", who, " failed: ", reason);
  if (peer.role != expected_role)
    throw_error(ErrorKind::INTERNAL, "handshake with ", who, " failed: it is a ", role_name(peer.role), ", expected a ",
                role_name(expected_role));
  if (expected_rank != -2 && peer.rank != expected_rank)
    throw_error(ErrorKind::INTERNAL, "handshake with ", who, " failed: it says it is rank ", peer.rank,
                ", expected rank ", expected_rank);
  std::string server_hello(reinterpret_cast<char*>(server), sizeof(server));
  std::string prefix = make_hello(me);
  std::string client_hello = prefix + mac(secret, "phv-client", context, server_hello, prefix);
  send_all(fd, client_hello.data(), client_hello.size(), deadline, who);
  uint8_t proof[kServerProofBytes];
  try {
    recv_all(fd, proof, sizeof(proof), deadline, who);
  } catch (const HvdError& e) {
    // An acceptor that rejects our proof just closes the connection.
    if (e.kind() != ErrorKind::PEER_LOST) throw;
    throw_error(ErrorKind::INTERNAL, "handshake with ", who,
                " failed: the peer closed the connection after our proof (different job secret?)");
  }
  std::string expect = mac(secret, "phv-server", context, server_hello, client_hello);
  if (!digest_equal(reinterpret_cast<const uint8_t*>(expect.data()), proof, 32)) {
    if (std::string(reinterpret_cast<char*>(proof), sizeof(proof)) == duplicate_rank_notice())
      throw_error(ErrorKind::INTERNAL, "handshake with ", who,
                  " failed: it already has a connection from a "
                  "process claiming to be rank ",
                  me.rank, ", which is us: two processes claim rank ", me.rank, "; ", kDuplicateRankHint);
    throw_error(ErrorKind::INTERNAL, "handshake with ", who, " failed: its proof does not match our secret");
  }
  return peer;
}

}  // namespace phv
