#pragma once
// minicache (MiniCache, Liu et al., NeurIPS 2024, arXiv 2405.14366; spec §4.3, §6 #17): from
// layer int(n * minicache_start_frac) on, adjacent layers form groups of minicache_group_size
// (cross_layer/layer_roles.h). The group's primary stores its own K and V unchanged and
// publishes them for the call's tokens; each merge layer fetches them and stores, per token,
// its own magnitude times the SLERP of the two directions, except tokens whose directions
// disagree (cos < minicache_retention_threshold), which keep their own vector
// (cross_layer/slerp_merge.h). A cache built alone, a primary, and a merge layer whose primary
// published nothing (e.g. after a prompt-cache load) are lossless.
//
// Memory: the rows are stored in the input dtype, as lm::FullKVCache does (it is the storage
// here), so nbytes equals the full cache's. The original's ~2x "on merged layers" is
// accounting (one shared direction + two magnitudes per token pair); with the primary kept
// lossless, as the original specifies, the merge layer's interpolated direction depends on
// both layers and cannot be shared, so this port claims no saving (docs/methods/minicache.md).
// A published segment (the primary's new rows, input dtype) lives only until its merge
// layers read it, in the same forward step.
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "lm/cache/full_kv_cache.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/cross_layer/layer_roles.h"
#include "veloxquant/cross_layer/segment_coordinator.h"

namespace veloxquant {

// The primary's new rows of one call, as it received them.
struct MiniCacheRows {
  lm::Tensor keys;    // [B, H, S, D_k]
  lm::Tensor values;  // [B, H, S, D_v]
};
using MiniCacheCoordinator = cross_layer::SegmentCoordinator<MiniCacheRows>;

struct MiniCacheMergeOptions {
  float retention_threshold = 0.9f;
  float slerp_t = 0.5f;
};

class MiniCacheCache : public lm::KVCache {
 public:
  // wiring_id: as XQuantCache's (a loaded list finds its coordinator again); 0 = not wired.
  MiniCacheCache(MiniCacheMergeOptions options, cross_layer::LayerRole role = {},
                 std::shared_ptr<MiniCacheCoordinator> coordinator = nullptr, uint64_t wiring_id = 0);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return rows_ ? rows_->offset() : 0; }
  bool empty() const override { return !rows_ || rows_->empty(); }
  std::size_t nbytes() const override { return rows_ ? rows_->nbytes() : 0; }
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "MiniCacheCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;

  bool is_primary() const { return role_.leader; }
  const cross_layer::LayerRole& role() const { return role_; }
  // Merge layers: (batch, head, token) vectors merged / retained so far (keys and values each
  // count; not rolled back by trim).
  int64_t merged_vectors() const { return merged_; }
  int64_t retained_vectors() const { return retained_; }

 private:
  // The merge layer's stored form of this call's rows (merge_token per vector), or the inputs
  // when the primary published nothing for them.
  std::pair<lm::Tensor, lm::Tensor> merge_with_primary(const lm::Tensor& keys, const lm::Tensor& values);

  MiniCacheMergeOptions options_;
  cross_layer::LayerRole role_;
  std::shared_ptr<MiniCacheCoordinator> coordinator_;
  uint64_t wiring_id_ = 0;
  std::shared_ptr<lm::FullKVCache> rows_;  // made on the first update, in the input dtype
  int64_t merged_ = 0, retained_ = 0;
};

std::shared_ptr<lm::KVCache> make_minicache_cache(const KVCacheConfig& config);

}  // namespace veloxquant
