#include "engine/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace phv {

namespace {

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

void write_all(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // a full disk must not take the job down; the trace just ends here
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::string span_name(const char* prefix, DescKind kind) {
  std::string name = prefix;
  for (const char* p = kind_name(kind); *p; ++p)
    name += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
  return name;
}

Timeline::~Timeline() { stop(); }

void Timeline::start(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ >= 0) {
    write_all(fd_, pending_ + "\n]\n");
    ::close(fd_);
  }
  pending_.clear();
  tracks_.clear();
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    active_ = false;
    throw_error(ErrorKind::INVALID_ARGUMENT, "cannot write the timeline to '", path, "': ", std::strerror(errno));
  }
  mark_cycles_ = mark_cycles;
  first_ = true;
  origin_ = Clock::now();
  pending_ = "[";
  event("M", "process_name", 0, origin_, "{\"name\":\"pyhorovod\"}");
  event("M", "thread_name", 0, origin_, "{\"name\":\"cycles\"}");
  write_all(fd_, pending_);
  pending_.clear();
  active_ = true;
}

void Timeline::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  active_ = false;
  if (fd_ < 0) return;
  write_all(fd_, pending_ + "\n]\n");
  pending_.clear();
  ::close(fd_);
  fd_ = -1;
}

int Timeline::track(const Key& key) {
  auto it = tracks_.find(key);
  if (it != tracks_.end()) return it->second;
  int tid = static_cast<int>(tracks_.size()) + 1;
  tracks_.emplace(key, tid);
  std::string label = key.set == 0 ? key.name : key.name + " (process set " + std::to_string(key.set) + ")";
  event("M", "thread_name", tid, origin_, "{\"name\":\"" + json_escape(label) + "\"}");
  event("M", "thread_sort_index", tid, origin_, "{\"sort_index\":" + std::to_string(tid) + "}");
  return tid;
}

void Timeline::event(const char* ph, const std::string& name, int tid, Clock::time_point t, const std::string& args) {
  double us = std::chrono::duration<double, std::micro>(t - origin_).count();
  char ts[32];
  std::snprintf(ts, sizeof(ts), "%.3f", us < 0 ? 0.0 : us);
  pending_ += first_ ? "\n" : ",\n";
  first_ = false;
  pending_ += "{\"name\":\"" + json_escape(name) + "\",\"ph\":\"" + ph + "\",\"ts\":" + ts +
              ",\"pid\":0,\"tid\":" + std::to_string(tid);
  if (ph[0] == 'i') pending_ += ",\"s\":\"t\"";
  if (!args.empty()) pending_ += ",\"args\":" + args;
  pending_ += "}";
}

void Timeline::begin(const Key& key, const std::string& span, Clock::time_point t) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  event("B", span, track(key), t, "");
}

void Timeline::end(const Key& key, const std::string& span, Clock::time_point t, const std::string& error) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  event("E", span, track(key), t, error.empty() ? "" : "{\"error\":\"" + json_escape(error) + "\"}");
}

void Timeline::mark(const Key& key, const std::string& what, Clock::time_point t) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  event("i", what, track(key), t, "");
}

void Timeline::cycle(Clock::time_point t) {
  if (!active() || !mark_cycles_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  event("i", "CYCLE_START", 0, t, "");
}

void Timeline::flush() {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0 || pending_.empty()) return;
  write_all(fd_, pending_);
  pending_.clear();
}

}  // namespace phv
