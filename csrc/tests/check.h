// The checks shared by every C++ unit test (csrc/tests/*_test.cc): CHECK, expect, expect_error, and
// finish() for main's summary line and exit code.
//
// A failed check does NOT abort: it prints one line and counts a failure, and the test goes on, so
// one run shows every broken case (a kernel wrong for one dtype at one length, say) instead of the
// first. main() ends with `return finish("name_test");`: exit code 1 when anything failed, else 0.
// Everything here is thread-safe (ranks run as threads): atomic counters, one lock around printing.
#pragma once
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"

namespace phv {
namespace testing {

inline std::atomic<int> failures{0};
inline std::atomic<long> checks{0};
inline std::mutex print_mu;
// Only the first failures are printed (a wrong kernel fails thousands of elements); all are counted.
constexpr int kMaxPrinted = 30;

// Counts a failure; prints "FAIL file:line: expression  message" (message: printf format + values).
__attribute__((format(printf, 4, 5))) inline void fail(const char* file, int line, const char* expr, const char* fmt,
                                                       ...) {
  if (failures.fetch_add(1) >= kMaxPrinted) return;
  std::lock_guard<std::mutex> lock(print_mu);
  std::printf("FAIL %s:%d: %s", file, line, expr);
  if (std::strcmp(fmt, "  ") != 0) {  // CHECK prefixes the caller's format with two spaces
    va_list args;
    va_start(args, fmt);
    std::vprintf(fmt, args);
    va_end(args);
  }
  std::printf("\n");
}

// CHECK(cond) or CHECK(cond, "printf format", values...): counts a check, and a failure when cond is
// false; the message and its values are evaluated only then. (A lone CHECK(cond) leaves `...` empty,
// which GCC and Clang accept in C++17 and C++20 makes standard.)
#define CHECK(cond, ...)                                                            \
  do {                                                                              \
    ++::phv::testing::checks;                                                       \
    if (!(cond)) ::phv::testing::fail(__FILE__, __LINE__, #cond, "  " __VA_ARGS__); \
  } while (0)

// A named check that prints a line either way: "ok   what", or "FAIL what" and the detail (got: ...).
inline void expect(bool ok, const std::string& what, const std::string& detail = "") {
  ++checks;
  if (!ok) ++failures;
  std::lock_guard<std::mutex> lock(print_mu);
  std::printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what.c_str(),
              ok || detail.empty() ? "" : "\n     got: ", ok ? "" : detail.c_str());
}

// Runs fn and expects an HvdError of `kind` whose message contains every needle; prints the error.
template <class F>
void expect_error(const char* what, ErrorKind kind, const std::vector<std::string>& needles, F fn) {
  try {
    fn();
    expect(false, what, "no error");
  } catch (const HvdError& e) {
    bool ok = e.kind() == kind;
    for (const auto& n : needles) ok = ok && std::string(e.what()).find(n) != std::string::npos;
    expect(ok, std::string(what) + ": [kind " + std::to_string(int(e.kind())) + "] " + e.what());
  }
}
template <class F>
void expect_error(const char* what, ErrorKind kind, F fn) {
  expect_error(what, kind, {}, fn);
}

// The peer() of the HvdError fn throws (kNoPeer when it throws none): a failed transport re-throws its
// first failure from every later call, so this reads the peer of an error expect_error just checked.
template <class F>
int thrown_peer(F fn) {
  try {
    fn();
  } catch (const HvdError& e) {
    return e.peer();
  }
  return kNoPeer;
}

// Prints "<name>: PASSED|FAILED, N checks, N failures" and returns main's exit code (0 = all passed).
inline int finish(const char* name) {
  int f = failures.load();
  std::printf("%s: %s, %ld checks, %d failures%s\n", name, f ? "FAILED" : "PASSED", checks.load(), f,
              f > kMaxPrinted ? " (only the first ones printed)" : "");
  return f ? 1 : 0;
}

}  // namespace testing
}  // namespace phv
