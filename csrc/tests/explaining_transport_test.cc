// The failure-explaining transport wrapper (transport/explaining_transport.h): it asks its explainer once,
// with the failure itself (text and peer), appends the answer, repeats it for every later re-throw of the
// same failure, keeps the error's peer, and lets SHUTDOWN through unexplained.
#include <functional>
#include <string>
#include <vector>

#include "common/error.h"
#include "tests/check.h"
#include "transport/explaining_transport.h"

using phv::testing::expect;

namespace {
// Throws `error` from every call (as a failed TcpTransport re-throws its first failure).
class FailedTransport : public phv::Transport {
 public:
  explicit FailedTransport(phv::HvdError error) : error_(std::move(error)) {}
  int rank() const override { return 1; }
  int size() const override { return 3; }
  phv::RequestId post_send(int, const void*, size_t) override { throw error_; }
  phv::RequestId post_recv(int, void*, size_t) override { throw error_; }
  void progress(std::vector<phv::RequestId>&, phv::Deadline) override { throw error_; }
  size_t pending() const override { return 1; }
  std::string describe_peer(int peer) const override { return "rank " + std::to_string(peer); }
  phv::HvdError error_;
};

// The text and peer of what `fn` throws.
std::pair<std::string, int> thrown_by(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const phv::HvdError& e) {
    return {e.what(), e.peer()};
  }
  return {"(nothing thrown)", phv::kNoPeer};
}
}  // namespace

int main() {
  {
    int calls = 0, asked_peer = phv::kNoPeer;
    FailedTransport inner(phv::HvdError(phv::ErrorKind::PEER_LOST, "rank 1: connection closed by rank 0", 0));
    phv::ExplainingTransport t(inner, [&](const phv::HvdError& e) {
      ++calls;
      asked_peer = e.peer();
      return " [because " + std::string(e.what()).substr(0, 6) + "]";
    });
    std::vector<phv::RequestId> done;
    auto a = thrown_by([&] { t.progress(done, phv::Clock::now()); });
    auto b = thrown_by([&] { t.post_send(0, nullptr, 0); });
    expect(a.first == "rank 1: connection closed by rank 0 [because rank 1]" && a == b && calls == 1,
           "explained once, repeated for later re-throws", a.first + " | " + b.first);
    expect(asked_peer == 0 && a.second == 0, "the explainer sees the peer, and the explained error keeps it");
    inner.error_ = phv::HvdError(phv::ErrorKind::SHUTDOWN, "rank 1: transport closed");
    auto c = thrown_by([&] { t.post_recv(0, nullptr, 0); });
    expect(c.first == "rank 1: transport closed" && calls == 1, "SHUTDOWN passes through unexplained", c.first);
  }
  {
    FailedTransport inner(phv::HvdError(phv::ErrorKind::TIMEOUT, "rank 1: deadline passed", 2));
    phv::ExplainingTransport t(inner, [](const phv::HvdError&) -> std::string { throw std::runtime_error("no"); });
    auto a = thrown_by([&] { t.post_send(2, nullptr, 0); });
    expect(a.first == "rank 1: deadline passed" && a.second == 2, "an explainer that throws adds nothing", a.first);
  }
  return phv::testing::finish("explaining_transport_test");
}
