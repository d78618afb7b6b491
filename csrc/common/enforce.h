// Checks of the core's own invariants: conditions that only a bug (here, or in a peer running this same
// code) can break. A failed check throws HvdError(INTERNAL) whose message ends with the source file and
// line, so that a report from a user points at the check without a debugger. Argument errors are the
// caller's mistake and keep PHV_CHECK_ARG (common/error.h), whose message needs no location.
//
//   PHV_ENFORCE(got == want, "corrupt message: bad magic ", got);
//   PHV_ENFORCE_FAIL("unknown item type ", int(type));   // for a branch that cannot be reached
#pragma once
#include "common/error.h"

namespace phv {

// The part of a __FILE__ path from its last "csrc/" on: the same text whatever folder the build ran in.
constexpr const char* source_path(const char* file) {
  const char* from = file;
  for (const char* p = file; *p != '\0'; ++p) {
    if (p[0] == 'c' && p[1] == 's' && p[2] == 'r' && p[3] == 'c' && p[4] == '/') from = p;
  }
  return from;
}

template <typename... Parts>
[[noreturn]] void throw_enforce(const char* file, int line, const Parts&... parts) {
  throw_error(ErrorKind::INTERNAL, parts..., " (internal check failed at ", source_path(file), ":", line, ")");
}

}  // namespace phv

#define PHV_ENFORCE(cond, ...)                                          \
  do {                                                                  \
    if (!(cond)) ::phv::throw_enforce(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#define PHV_ENFORCE_FAIL(...) ::phv::throw_enforce(__FILE__, __LINE__, __VA_ARGS__)
