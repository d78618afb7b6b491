#include "engine/process_set.h"

#include <algorithm>

#include "common/error.h"
#include "engine/descriptor.h"

namespace phv {

namespace {
std::string ranks_str(const std::vector<int>& ranks) {
  std::vector<int64_t> wide(ranks.begin(), ranks.end());
  return shape_str(wide);
}
}  // namespace

ProcessSetRegistry::ProcessSetRegistry(Transport* transport, int world_size, int my_rank)
    : transport_(transport), world_size_(world_size), my_rank_(my_rank) {
  std::vector<int> all(static_cast<size_t>(world_size));
  for (int r = 0; r < world_size; ++r) all[static_cast<size_t>(r)] = r;
  auto global = std::make_unique<ProcessSet>();
  global->id = 0;
  global->comm.transport = transport;
  global->comm.members = all;
  global->comm.my_index = my_rank;
  global->member = true;
  sets_[0] = std::move(global);
}

std::vector<int> ProcessSetRegistry::normalise(const std::vector<int>& ranks) const {
  PHV_CHECK_ARG(!ranks.empty(), "a process set needs at least one rank");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    PHV_CHECK_ARG(sorted[i] >= 0 && sorted[i] < world_size_, "process set ranks ", ranks_str(ranks), ": rank ",
                  sorted[i], " is out of range [0, ", world_size_, ")");
    PHV_CHECK_ARG(i == 0 || sorted[i] != sorted[i - 1], "process set ranks ", ranks_str(ranks), ": rank ", sorted[i],
                  " appears twice");
  }
  return sorted;
}

int ProcessSetRegistry::add(const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& kv : sets_) {
    PHV_CHECK_ARG(kv.second->comm.members != ranks, "a process set with ranks ", ranks_str(ranks),
                  " already exists (id ", kv.first, ")");
  }
  auto set = std::make_unique<ProcessSet>();
  set->id = next_id_++;
  set->comm.transport = transport_;
  set->comm.members = ranks;
  auto it = std::find(ranks.begin(), ranks.end(), my_rank_);
  set->member = it != ranks.end();
  set->comm.my_index = set->member ? static_cast<int>(it - ranks.begin()) : -1;
  int id = set->id;
  sets_[id] = std::move(set);
  return id;
}

void ProcessSetRegistry::remove(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  PHV_CHECK_ARG(id != 0, "the global process set (id 0) cannot be removed");
  PHV_CHECK_ARG(sets_.count(id) != 0, "no process set with id ", id);
  sets_.erase(id);
}

bool ProcessSetRegistry::exists(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return sets_.count(id) != 0;
}

bool ProcessSetRegistry::is_member(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it != sets_.end() && it->second->member;
}

std::vector<int> ProcessSetRegistry::ranks(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  PHV_CHECK_ARG(it != sets_.end(), "no process set with id ", id);
  return it->second->comm.members;
}

std::vector<int> ProcessSetRegistry::ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  for (const auto& kv : sets_) out.push_back(kv.first);
  return out;
}

int ProcessSetRegistry::size_of(int id) const {
  if (id == 0) return world_size_;  // the global set never changes (a resize makes a new engine)
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? 0 : it->second->comm.size();
}

int ProcessSetRegistry::my_index(int id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() || !it->second->member ? -1 : it->second->comm.my_index;
}

ProcessSet* ProcessSetRegistry::get(int id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second.get();
}

std::pair<int, int> ProcessSetRegistry::check_member(int id, const char* op) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  PHV_CHECK_ARG(it != sets_.end(), op, ": no process set with id ", id, " (removed, or never added)");
  PHV_CHECK_ARG(it->second->member, op, ": rank ", my_rank_, " is not a member of process set ", id, " (ranks ",
                ranks_str(it->second->comm.members), ")");
  return {it->second->comm.size(), it->second->comm.my_index};
}

}  // namespace phv
