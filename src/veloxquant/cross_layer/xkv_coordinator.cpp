#include "veloxquant/cross_layer/xkv_coordinator.h"

#include "veloxquant/cross_layer/segment_coordinator.h"

namespace veloxquant {

void XkvCoordinator::publish(int group_id, int member, int n_members, std::shared_ptr<const XkvKeys> keys) {
  Group& g = groups_[group_id];
  g.n_members = n_members;
  if (g.basis || g.published.count(member) != 0) return;
  // The original charges max_ctx on member 0's publish: the tokens of one member's prefill.
  if (member == 0 && g.live + keys->rows > max_ctx_) {
    cross_layer::throw_capacity_exceeded(option_, group_id, g.live + keys->rows, max_ctx_);
  }
  if (member == 0) g.live += keys->rows;
  g.published[member] = std::move(keys);
}

std::shared_ptr<const XkvBasis> XkvCoordinator::basis(int group_id) {
  const auto it = groups_.find(group_id);
  if (it == groups_.end()) return nullptr;
  Group& g = it->second;
  if (g.basis) return g.basis;
  if (static_cast<int>(g.published.size()) < g.n_members) return nullptr;
  std::vector<const XkvKeys*> members;
  for (const auto& [member, keys] : g.published) members.push_back(keys.get());
  g.basis = std::make_shared<const XkvBasis>(fit_xkv_basis(members, rank_, energy_));
  ++fits_;
  g.published.clear();  // the raw keys are consumed: reclaim them and credit max_ctx back
  g.live = 0;
  return g.basis;
}

int64_t XkvCoordinator::live_tokens(int group_id) const {
  const auto it = groups_.find(group_id);
  return it == groups_.end() ? 0 : it->second.live;
}

}  // namespace veloxquant
