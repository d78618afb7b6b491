// The coordinator's explanation of a timeout: what the ranks that never submitted a request have
// pending instead. The common cause of such a timeout is a difference in the ranks' sequences of calls,
// and the pending names show it at once (for automatic names, the numbers that differ).
#include <sstream>

#include "engine/auto_name.h"
#include "engine/negotiation.h"

namespace phv {

namespace {

constexpr size_t kNamesShown = 4;

}  // namespace

std::vector<std::string> Coordinator::pending_names(int rank, const std::vector<RankMessage>& msgs) const {
  std::vector<std::string> names;
  size_t r = static_cast<size_t>(rank);
  for (const auto& kv : table_) {
    if (kv.second.have[r]) names.push_back(kv.first.name);
  }
  const RankMessage& m = msgs[r];
  for (size_t w = 0; w < m.bits.size(); ++w) {
    for (uint64_t word = m.bits[w]; word != 0; word &= word - 1) {
      int pos = static_cast<int>(w * 64 + static_cast<size_t>(__builtin_ctzll(word)));
      if (cache_.valid(pos)) names.push_back(cache_.entry(pos).desc.name);
    }
  }
  return names;
}

std::string Coordinator::explain_missing(const Key& key, const std::vector<int>& missing,
                                         const std::vector<RankMessage>& msgs) const {
  std::string prefix, other_prefix;
  int64_t n = 0, other_n = 0;
  bool automatic = split_auto_name(key.name, prefix, n);
  bool names_differ = false;
  std::ostringstream out;
  size_t shown_ranks = 0;
  for (int m : missing) {
    if (shown_ranks++ == kNamesShown) {
      out << "; ...";
      break;
    }
    std::vector<std::string> names = pending_names(m, msgs);
    out << "; rank " << m << (names.empty() ? " had nothing pending" : " had pending: ");
    for (size_t i = 0; i < names.size() && i < kNamesShown; ++i) out << (i ? ", " : "") << "'" << names[i] << "'";
    if (names.size() > kNamesShown) out << " (+" << names.size() - kNamesShown << " more)";
    for (const std::string& name : names) {
      names_differ = names_differ || (automatic && split_auto_name(name, other_prefix, other_n) &&
                                      other_prefix == prefix && other_n != n);
    }
  }
  if (names_differ) {
    out << ". The automatic names differ: the ranks made different sequences of unnamed calls (a call "
           "that failed or was skipped on some ranks only, or unnamed calls from several threads); name "
           "the collectives (name=) that not every rank makes in the same order";
  }
  return out.str();
}

}  // namespace phv
