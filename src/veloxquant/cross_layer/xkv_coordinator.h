#pragma once
// The object the layers of one xkv for_model call share (spec §4.3 "xKV"): fan-in of every
// member's prefill keys, then one joint SVD per group, memoized (fan-out).
//
// Layers run in order, so member 0 publishes its prefill keys before member 1 has computed
// anything; the basis can exist only once the group's last member has published. The first
// basis() call after that runs fit_xkv_basis once and frees the published keys; every later call
// (the other members, on their next update) returns the same shared object. max_ctx bounds the
// tokens published and not yet consumed by the SVD, charged on member 0's publish as the
// original (CrossLayerCapacityError naming xkv_max_ctx). Generation is sequential: no locking,
// as segment_coordinator.h.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "veloxquant/cross_layer/xkv_basis.h"

namespace veloxquant {

class XkvCoordinator {
 public:
  XkvCoordinator(int64_t max_ctx, std::string max_ctx_option, std::optional<int> rank, double energy_threshold)
      : max_ctx_(max_ctx), option_(std::move(max_ctx_option)), rank_(rank), energy_(energy_threshold) {}

  // Member `member` of a group of `n_members` publishes its prefill keys (first publish wins; a
  // second one from the same member is ignored).
  void publish(int group_id, int member, int n_members, std::shared_ptr<const XkvKeys> keys);
  // The group's basis, or null while members are still missing. Runs the joint SVD on the first
  // call after the last publish.
  std::shared_ptr<const XkvBasis> basis(int group_id);

  int64_t max_ctx() const { return max_ctx_; }
  // Joint SVDs run so far (tests: one per group, never per member).
  int fits() const { return fits_; }
  // Tokens published and not yet consumed by a fit, for group_id.
  int64_t live_tokens(int group_id) const;

 private:
  struct Group {
    int n_members = 0;
    std::map<int, std::shared_ptr<const XkvKeys>> published;
    std::shared_ptr<const XkvBasis> basis;
    int64_t live = 0;
  };
  int64_t max_ctx_;
  std::string option_;
  std::optional<int> rank_;
  double energy_;
  std::map<int, Group> groups_;
  int fits_ = 0;
};

}  // namespace veloxquant
