// Automatic names: a request submitted without a name is called "<op>[.ps<set>].noname.<n>" by the
// Python layer, n counting that rank's unnamed calls of one op type on one process set. Ranks that make
// the same sequence of unnamed calls therefore agree on every name. When a rank's sequence runs ahead
// (its call timed out because the others never made it), the others learn of it from the timeout's error
// response and skip that number (Engine::auto_name_floor), so the counters meet again afterwards.
#pragma once
#include <cstdint>
#include <string>

namespace phv {

// Splits "<prefix>.noname.<n>" into ("<prefix>.noname.", n); false for any other name.
inline bool split_auto_name(const std::string& name, std::string& prefix, int64_t& n) {
  static const std::string kMark = ".noname.";
  size_t at = name.rfind(kMark);
  if (at == std::string::npos) return false;
  size_t digits = at + kMark.size();
  if (digits == name.size() || name.size() - digits > 18) return false;
  int64_t value = 0;
  for (size_t i = digits; i < name.size(); ++i) {
    char c = name[i];
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  prefix = name.substr(0, digits);
  n = value;
  return true;
}

}  // namespace phv
