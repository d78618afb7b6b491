// The connection handshake shared by the rendezvous store and the transport. It runs before anything
// else is parsed on a connection and proves, in both directions, knowledge of the per-job secret:
//
//   acceptor  -> connector : ServerHello  {magic, version, role, rank, nonce_s}              32 bytes
//   connector -> acceptor  : ClientHello  {magic, version, role, rank, nonce_c, mac_c}       64 bytes
//   acceptor  -> connector : ServerProof  {mac_s}                                            32 bytes
//
//   mac_c = HMAC(secret, "phv-client" || context || ServerHello || ClientHello[0:32])
//   mac_s = HMAC(secret, "phv-server" || context || ServerHello || ClientHello)
//
// Both nonces are fresh random bytes, so a recorded exchange cannot be replayed. `context` (e.g. the
// store prefix) binds the proof to one group of ranks. Every message has a fixed size: no length is
// ever read from the network here, so a stranger can make us allocate nothing.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/types.h"

namespace phv {

constexpr uint32_t kHandshakeMagic = 0x50485648;  // "PHVH"
constexpr uint16_t kProtocolVersion = 1;
constexpr size_t kServerHelloBytes = 32;
constexpr size_t kClientHelloBytes = 64;
constexpr size_t kServerProofBytes = 32;

enum class HandshakeRole : uint16_t { STORE_SERVER = 1, STORE_CLIENT = 2, TRANSPORT = 3 };

struct HandshakeIdentity {
  HandshakeRole role;
  int32_t rank;  // -1 where not meaningful (store)
};

// The acceptor's side as a small state machine, so a poll loop can run many handshakes at once and a
// silent stranger never stalls anyone.
class ServerHandshake {
 public:
  ServerHandshake(const std::string& secret, const std::string& context, HandshakeIdentity me);
  const std::string& hello() const { return hello_; }  // send this first
  // Checks a complete ClientHello. On success fills *peer and returns true; *proof is what to send back.
  // On failure returns false with *reason saying why (bad magic, version, proof).
  bool verify(const uint8_t* client_hello, HandshakeIdentity* peer, std::string* proof, std::string* reason) const;

 private:
  std::string secret_, context_, hello_;
};

// Runs the acceptor's side on one non-blocking socket, blocking until the deadline. Throws HvdError
// (INTERNAL for a bad peer, TIMEOUT, PEER_LOST) naming `who`.
HandshakeIdentity accept_handshake(int fd, const std::string& secret, const std::string& context, HandshakeIdentity me,
                                   Deadline deadline, const std::string& who);

// Runs the connector's side. Checks the acceptor's role (and rank, unless expected_rank is -2). Throws
// HvdError naming `who` on any failure, including a wrong secret.
HandshakeIdentity connect_handshake(int fd, const std::string& secret, const std::string& context, HandshakeIdentity me,
                                    HandshakeRole expected_role, int expected_rank, Deadline deadline,
                                    const std::string& who);

// What an acceptor sends instead of its ServerProof when the connector proved the secret but claims a
// rank that is already connected: "PHVD" and zeros (a proof that matches it is a 2^-256 chance). The
// connector then fails saying that two processes claim its rank, not that the secrets differ.
constexpr uint32_t kDuplicateRankMagic = 0x44564850;  // "PHVD"
std::string duplicate_rank_notice();

// Says how an impostor could hold the secret: the first thing to check when two processes claim a rank.
extern const char* const kDuplicateRankHint;

// Fresh random bytes from the kernel (getrandom).
void random_bytes(void* out, size_t len);

const char* role_name(HandshakeRole role);

}  // namespace phv
