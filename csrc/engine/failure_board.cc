#include "engine/failure_board.h"

#include <cstdlib>
#include <set>
#include <utility>
#include <vector>

namespace phv {

std::string encode_failure_report(const FailureReport& report) {
  return std::to_string(report.blamed) + "\n" + report.text;
}

FailureReport decode_failure_report(const std::string& value) {
  size_t newline = value.find('\n');
  // Nine characters at most: any rank fits, and strtol cannot overflow an int.
  if (newline == std::string::npos || newline == 0 || newline > 9) return FailureReport{kNoPeer, value};
  char* end = nullptr;
  long blamed = std::strtol(value.c_str(), &end, 10);
  if (end != value.c_str() + newline) return FailureReport{kNoPeer, value};
  return FailureReport{static_cast<int>(blamed), value.substr(newline + 1)};
}

std::string explain_failure(Store& store, const FailureBoardOptions& o, const HvdError& my_error) {
  auto key = [&](int r) { return o.prefix + "/failure/" + std::to_string(r); };
  try {
    store.set(key(o.rank), encode_failure_report(FailureReport{my_error.peer(), my_error.what()}));
  } catch (const std::exception&) {
    return "";  // no store (it may have been hosted by the dead rank): nothing to compare with
  }
  std::set<int> visited{o.rank};
  std::vector<std::pair<int, std::string>> chain;  // (rank, its report), in blame order
  int peer = my_error.peer();
  while (peer >= 0 && peer < o.size && visited.insert(peer).second) {
    FailureReport report;
    try {
      report = decode_failure_report(store.get(key(peer), o.wait_s));
    } catch (const std::exception&) {
      std::string out = " [first failure: rank " + std::to_string(peer) +
                        " reported no error (it died, is stopped, or lost its network)";
      for (const auto& link : chain) out += "; rank " + std::to_string(link.first) + " reported: " + link.second;
      return out + "]";
    }
    chain.emplace_back(peer, report.text);
    peer = report.blamed;
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

}  // namespace phv
