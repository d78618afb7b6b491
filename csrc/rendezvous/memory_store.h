// In-process Store for unit tests: the same semantics as the TCP store (blocking get/wait with a
// timeout that throws TIMEOUT naming the missing keys), shared by threads of one process.
#pragma once
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/types.h"
#include "rendezvous/store.h"

namespace phv {

class MemoryStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
    cv_.notify_all();
  }

  std::string get(const std::string& key, double timeout_s) override {
    std::unique_lock<std::mutex> lock(mu_);
    wait_locked(lock, {key}, timeout_s, "get");
    return data_[key];
  }

  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    int64_t v = (it == data_.end()) ? 0 : std::stoll(it->second);
    v += delta;
    data_[key] = std::to_string(v);
    cv_.notify_all();
    return v;
  }

  void wait(const std::vector<std::string>& keys, double timeout_s) override {
    std::unique_lock<std::mutex> lock(mu_);
    wait_locked(lock, keys, timeout_s, "wait");
  }

  bool check(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return data_.count(key) > 0;
  }

 private:
  std::string missing(const std::vector<std::string>& keys) const {
    std::string out;
    for (const auto& k : keys)
      if (!data_.count(k)) out += (out.empty() ? "'" : ", '") + k + "'";
    return out;
  }

  void wait_locked(std::unique_lock<std::mutex>& lock, const std::vector<std::string>& keys, double timeout_s,
                   const char* op) {
    Deadline deadline = deadline_after(timeout_s);
    while (!missing(keys).empty()) {
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !missing(keys).empty())
        throw_error(ErrorKind::TIMEOUT, "memory store: ", op, " timed out after ", timeout_s,
                    " s; keys still missing: ", missing(keys));
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
};

}  // namespace phv
