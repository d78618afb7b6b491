// Key/value store used only for bootstrap: ranks publish their listening addresses, the NCCL unique id,
// and wait for each other. Values are opaque bytes. Every call that can block takes a timeout and throws
// HvdError(TIMEOUT) naming the keys still missing.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace phv {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until the key exists, then returns its value.
  virtual std::string get(const std::string& key, double timeout_s) = 0;
  // Atomically adds delta to an integer counter (missing key counts as 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Waits until every key exists.
  virtual void wait(const std::vector<std::string>& keys, double timeout_s) = 0;
  virtual bool check(const std::string& key) = 0;  // exists now? never blocks
};

}  // namespace phv
