// The rendezvous key/value store over TCP: a server (background thread, one poll loop over all clients)
// and a client implementing phv::Store. Every connection starts with the secret handshake
// (rendezvous/handshake.h); only then are requests parsed.
//
// Wire format after the handshake (little-endian):
//   request  = magic "PHVQ" u32 | op u32 | body_len u32 | nkeys u32 | arg i64 | body
//              body = nkeys x (key_len u32 | key bytes) followed by the value bytes
//              arg  = delta for ADD, timeout in ms for GET/WAIT
//   response = magic "PHVR" u32 | status u32 | body_len u32 | 0 u32 | value i64 | body
// body_len, nkeys and every key length are checked against fixed caps before anything is allocated.
// get and wait block in the server (the reply is deferred) until the keys exist or the timeout passes.
//
// Under pressure (StoreLimits): the server holds at most min(max_connections, a quarter of the
// process's RLIMIT_NOFILE soft limit) connections -- the store often lives in rank 0's training
// process, whose files and sockets need the other three quarters; beyond that, new connections wait in
// the kernel's backlog. A connection that has not completed the handshake within handshake_s is closed.
// When accept() runs out of descriptors (EMFILE, ENFILE) the listening socket is left alone for a short
// pause instead of being polled in a busy loop. A SET whose value exceeds max_value_bytes, a SET or ADD
// that would take the stored keys and values (plus requests in transit) beyond max_total_bytes, or a read
// whose keys do not fit beside the requests in transit, is answered with an error naming the limit and
// is read and discarded, never buffered.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/socket.h"
#include "rendezvous/store.h"

namespace phv {

constexpr uint32_t kStoreMaxBody = 64u << 20;  // caps a value (plus keys) at 64 MiB
constexpr uint32_t kStoreMaxKeys = 4096;
constexpr uint32_t kStoreMaxKeyBytes = 4096;
constexpr const char* kStoreContext = "phv-store";

// Defaults equal pyhorovod/_config.py's (PYHOROVOD_STORE_* variables).
struct StoreLimits {
  size_t max_connections = 4096;
  double handshake_s = 2;               // PYHOROVOD_STORE_HANDSHAKE_SECONDS
  size_t max_value_bytes = 1u << 20;    // PYHOROVOD_STORE_MAX_VALUE_BYTES (at most kStoreMaxBody)
  size_t max_total_bytes = 64u << 20;   // PYHOROVOD_STORE_MAX_BYTES: keys + values + 64 bytes per key
};

class TcpStoreServer {
 public:
  // Listens on host:port (0: any free port) and serves from a background thread until close().
  TcpStoreServer(const std::string& host, int port, const std::string& secret, StoreLimits limits = {});
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  void close();  // idempotent; joins the thread
  size_t rejected_connections() const { return rejected_.load(); }  // failed handshakes and bad frames

 private:
  struct State;
  void run();

  std::string host_;
  int port_ = 0;
  std::string secret_;
  StoreLimits limits_;
  Fd listen_fd_;
  Fd wake_fd_;  // eventfd: close() wakes the poll loop
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> rejected_{0};
  std::mutex close_mu_;
};

class TcpStoreClient : public Store {
 public:
  // Connects (retrying until timeout_s: the server may not be up yet) and runs the handshake.
  // timeout_s also bounds set/add/check; get/wait take their own timeout.
  TcpStoreClient(const std::string& host, int port, const std::string& secret, double timeout_s);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, double timeout_s) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void wait(const std::vector<std::string>& keys, double timeout_s) override;
  bool check(const std::string& key) override;
  // Removes every key beginning with prefix (a finished generation's keys); returns how many.
  int64_t delete_prefix(const std::string& prefix);

  std::string address() const { return join_host_port(host_, port_); }

 private:
  struct Reply {
    uint32_t status = 0;
    int64_t value = 0;
    std::string body;
  };
  Reply call(uint32_t op, const std::vector<std::string>& keys, const std::string& value, int64_t arg,
             Deadline deadline, const std::string& what);
  void connect_locked(Deadline deadline);

  std::string host_;
  int port_;
  std::string secret_;
  double timeout_s_;
  std::mutex mu_;  // one request at a time on the connection
  Fd fd_;
};

}  // namespace phv
