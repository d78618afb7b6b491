// Minimal leveled logging to stderr, prefixed with the rank: "[pyhorovod rank 2 WARNING] ...".
// The level comes from the engine options (HOROVOD_LOG_LEVEL, parsed in pyhorovod/_config.py).
#pragma once
#include <sstream>
#include <string>

namespace phv {

enum class LogLevel : int { TRACE = 0, DEBUG = 1, INFO = 2, WARNING = 3, ERROR = 4, FATAL = 5 };

void set_log_level(LogLevel level);
void set_log_rank(int rank);
LogLevel log_level();
void log_line(LogLevel level, const std::string& text);

template <typename... Parts>
void log(LogLevel level, const Parts&... parts) {
  if (level < log_level()) return;
  std::ostringstream out;
  (out << ... << parts);
  log_line(level, out.str());
}

}  // namespace phv
