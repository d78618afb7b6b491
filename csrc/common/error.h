// The one exception type of the core. Its kind decides the Python class it becomes
// (pyhorovod/errors.py): INVALID_ARGUMENT -> ValueError, everything else -> HorovodInternalError
// (TIMEOUT -> HorovodTimeoutError, a subclass). INTERRUPTED: an interrupt check of the waiting thread
// said stop (common/interrupt.h); the Python bindings raise the signal handler's exception in its place.
// The message carries the context: our rank, the peer rank and address, the op, the tensor name and the
// sequence number, as far as the thrower knows them. An error about one peer (a lost connection, a
// receive that timed out, a protocol error from it) also carries that peer's rank as `peer()`, so that
// whoever explains the failure (engine/failure_board.h) never has to read it back out of the text.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace phv {

enum class ErrorKind : int {
  INTERNAL = 0,
  INVALID_ARGUMENT = 1,
  TIMEOUT = 2,
  PEER_LOST = 3,
  SHUTDOWN = 4,
  INTERRUPTED = 5
};

// The peer of an error that blames no peer in particular (a bad argument, an interrupt, a poll failure).
constexpr int kNoPeer = -1;

class HvdError : public std::runtime_error {
 public:
  HvdError(ErrorKind kind, const std::string& what, int peer = kNoPeer)
      : std::runtime_error(what), kind_(kind), peer_(peer) {}
  ErrorKind kind() const { return kind_; }
  int peer() const { return peer_; }  // the rank whose connection or message failed; kNoPeer if none

 private:
  ErrorKind kind_;
  int peer_;
};

template <typename... Parts>
std::string error_text(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

// Builds a message from stream pieces: throw_error(ErrorKind::TIMEOUT, "rank ", r, ": recv from ", p).
template <typename... Parts>
[[noreturn]] void throw_error(ErrorKind kind, const Parts&... parts) {
  throw HvdError(kind, error_text(parts...));
}

// The same for an error about one peer: throw_peer_error(ErrorKind::PEER_LOST, p, "rank ", r, ": ...").
template <typename... Parts>
[[noreturn]] void throw_peer_error(ErrorKind kind, int peer, const Parts&... parts) {
  throw HvdError(kind, error_text(parts...), peer);
}

#define PHV_CHECK_ARG(cond, ...)                                                      \
  do {                                                                                \
    if (!(cond)) ::phv::throw_error(::phv::ErrorKind::INVALID_ARGUMENT, __VA_ARGS__); \
  } while (0)

}  // namespace phv
