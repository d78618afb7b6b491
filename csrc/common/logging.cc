// Process-wide log settings. Level and rank are atomics (read on every log call from any thread);
// one mutex serialises whole lines so that lines from the engine thread and the caller never interleave.
#include "common/logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace phv {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::WARNING)};
std::atomic<int> g_rank{-1};  // -1: not known yet (before init)
std::mutex g_write_mutex;

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::TRACE: return "TRACE";
    case LogLevel::DEBUG: return "DEBUG";
    case LogLevel::INFO: return "INFO";
    case LogLevel::WARNING: return "WARNING";
    case LogLevel::ERROR: return "ERROR";
    case LogLevel::FATAL: return "FATAL";
  }
  return "?";
}

}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }
void set_log_rank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

void log_line(LogLevel level, const std::string& text) {
  int rank = g_rank.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(g_write_mutex);
  if (rank >= 0) {
    std::fprintf(stderr, "[pyhorovod rank %d %s] %s\n", rank, level_name(level), text.c_str());
  } else {
    std::fprintf(stderr, "[pyhorovod %s] %s\n", level_name(level), text.c_str());
  }
  std::fflush(stderr);
}

}  // namespace phv
