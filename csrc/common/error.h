// The one exception type of the core. Its kind decides the Python class it becomes
// (pyhorovod/errors.py): INVALID_ARGUMENT -> ValueError, everything else -> HorovodInternalError
// (TIMEOUT -> HorovodTimeoutError, a subclass). INTERRUPTED: an interrupt check of the waiting thread
// said stop (common/interrupt.h); the Python bindings raise the signal handler's exception in its place.
// The message carries the context: our rank, the peer rank and address, the op, the tensor name and the
// sequence number, as far as the thrower knows them.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace phv {

enum class ErrorKind : int {
  INTERNAL = 0, INVALID_ARGUMENT = 1, TIMEOUT = 2, PEER_LOST = 3, SHUTDOWN = 4, INTERRUPTED = 5
};

class HvdError : public std::runtime_error {
 public:
  HvdError(ErrorKind kind, const std::string& what) : std::runtime_error(what), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

// Builds a message from stream pieces: throw_error(ErrorKind::TIMEOUT, "rank ", r, ": recv from ", p).
template <typename... Parts>
[[noreturn]] void throw_error(ErrorKind kind, const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  throw HvdError(kind, out.str());
}

#define PHV_CHECK_ARG(cond, ...) \
  do { if (!(cond)) ::phv::throw_error(::phv::ErrorKind::INVALID_ARGUMENT, __VA_ARGS__); } while (0)

}  // namespace phv
