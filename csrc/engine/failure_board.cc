#include "engine/failure_board.h"

#include <cctype>
#include <set>

#include "common/interrupt.h"

namespace phv {

int blamed_peer(const std::string& message, int me) {
  static const std::string kWord = "rank ";
  for (size_t pos = message.find(kWord); pos != std::string::npos; pos = message.find(kWord, pos + 1)) {
    // "rank" must be a word of its own (not the end of "ranks" or "thisrank").
    if (pos > 0 && std::isalnum(static_cast<unsigned char>(message[pos - 1]))) continue;
    size_t i = pos + kWord.size();
    if (i >= message.size() || !std::isdigit(static_cast<unsigned char>(message[i]))) continue;
    long value = 0;
    while (i < message.size() && std::isdigit(static_cast<unsigned char>(message[i])) && value < (1L << 30)) {
      value = value * 10 + (message[i] - '0');
      ++i;
    }
    if (value != me) return static_cast<int>(value);
  }
  return -1;
}

std::string explain_failure(Store& store, const FailureBoardOptions& o, const std::string& my_error) {
  auto key = [&](int r) { return o.prefix + "/failure/" + std::to_string(r); };
  try {
    store.set(key(o.rank), my_error);
  } catch (const std::exception&) {
    return "";  // no store (it may have been hosted by the dead rank): nothing to compare with
  }
  std::set<int> visited{o.rank};
  std::vector<std::pair<int, std::string>> chain;  // (rank, its report), in blame order
  int peer = blamed_peer(my_error, o.rank);
  while (peer >= 0 && peer < o.size && visited.insert(peer).second) {
    std::string report;
    try {
      report = store.get(key(peer), o.wait_s);
    } catch (const std::exception&) {
      std::string out = " [first failure: rank " + std::to_string(peer) +
                        " reported no error (it died, is stopped, or lost its network)";
      for (const auto& link : chain) out += "; rank " + std::to_string(link.first) + " reported: " + link.second;
      return out + "]";
    }
    chain.emplace_back(peer, report);
    peer = blamed_peer(report, peer);
  }
  if (chain.empty()) return "";
  std::string out;
  if (peer >= 0 && visited.count(peer)) {
    // A cycle: ranks that lost each other (a cut link, or both sides timing out on one another).
    out = " [rank " + std::to_string(chain.back().first) + " lost contact too: " + chain.back().second;
  } else {
    out = " [first failure reported by rank " + std::to_string(chain.back().first) + ": " + chain.back().second;
  }
  for (size_t i = chain.size() - 1; i-- > 0;)
    out += "; rank " + std::to_string(chain[i].first) + " reported: " + chain[i].second;
  return out + "]";
}

void ExplainingTransport::rethrow(const HvdError& e) {
  if (e.kind() == ErrorKind::SHUTDOWN || e.kind() == ErrorKind::INVALID_ARGUMENT) throw e;
  std::lock_guard<std::mutex> lock(mu_);
  if (original_.empty()) {
    original_ = e.what();
    std::string extra;
    try {
      InterruptMask mask;  // an interrupted rank still publishes why it stopped
      extra = explain_ ? explain_(original_) : std::string();
    } catch (const std::exception&) {
      extra.clear();
    }
    explained_ = original_ + extra;
  }
  if (original_ == e.what()) throw HvdError(e.kind(), explained_);
  throw e;
}

RequestId ExplainingTransport::post_send(int peer, const void* buf, size_t len) {
  try {
    return inner_.post_send(peer, buf, len);
  } catch (const HvdError& e) {
    rethrow(e);
  }
}

RequestId ExplainingTransport::post_recv(int peer, void* buf, size_t len) {
  try {
    return inner_.post_recv(peer, buf, len);
  } catch (const HvdError& e) {
    rethrow(e);
  }
}

RequestId ExplainingTransport::post_recv_sink(int peer, size_t len, size_t grain, RecvSink* sink) {
  try {
    return inner_.post_recv_sink(peer, len, grain, sink);
  } catch (const HvdError& e) {
    rethrow(e);
  }
}

void ExplainingTransport::progress(std::vector<RequestId>& completed, Deadline deadline) {
  try {
    inner_.progress(completed, deadline);
  } catch (const HvdError& e) {
    rethrow(e);
  }
}

}  // namespace phv
