#pragma once
// rocketkv (RocketKV, Behnam et al., ICML 2025, arXiv 2502.14051; spec §6 #42): two stages.
// Stage 1 is SnapKV's permanent eviction (snapkv_cache.h's policy, reused): the rows kept per
// kv head are bounded by rocketkv_budget. Stage 2 is the paper's hybrid sparse attention at every
// fused call: the stored rows are cut into pages of rocketkv_page_size rows summarised by the
// element-wise max and min of their keys (eviction/page_summaries.h, allocated and counted in
// nbytes); the call's queries pick their rocketkv_head_topk1 largest channels, score each page
// by the bound of q.k over its box on those channels, and exact attention (the shared driver,
// restricted by attention::RowRangesSource) runs over the best pages only — as many as make the
// rows attended ceil(offset / rocketkv_compression_ratio): the total ratio c against every token
// seen is split adaptively, stage 2 taking what stage 1's budget has not yet removed.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "veloxquant/attention/row_ranges_source.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eviction/eviction_cache.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "RocketKV"), plus rocketkv_budget (new: stage
// 1's rows per kv head, the budget every eviction cache of this port is held to).
struct RocketKVOptions {
  double rocketkv_compression_ratio = 8.0;
  std::optional<int> rocketkv_page_size;   // None: derived from the ratio (rocketkv_page_size_for)
  std::optional<int> rocketkv_head_topk1;  // None: derived from the ratio and head_dim
  int rocketkv_obs_window = 32;
  int rocketkv_n_sink = 4;
  int rocketkv_budget = 512;
};

// The derivations when the fields are None: stage 2's share of c is split between the sequence
// (pages) and head (channels) reductions of its approximation pass, which reads 2 * topk1 /
// page_size summary values per row instead of head_dim key values:
//   page_size = 2^round(log2(2 sqrt(c)))   (c = 8: 8)
//   topk1     = head_dim / 2^round(log2(sqrt(c))), at least 1   (c = 8, head_dim 64: 16)
int rocketkv_page_size_for(double ratio);
int rocketkv_head_topk1_for(double ratio, int64_t head_dim);

class RocketKVCache final : public eviction::EvictionCache {
 public:
  explicit RocketKVCache(const KVCacheConfig& config);
  std::shared_ptr<lm::KVCache> clone() const override { return clone_as(*this); }
  // The kept rows plus the page summaries (2 f16 key vectors and a u64 fingerprint per page of
  // the budget, per head).
  std::size_t nbytes() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;

  double compression_ratio() const { return ratio_; }
  int64_t page_size() const;
  int64_t head_topk1() const;
  // The stored rows the last fused call attended for (b, h), as ranges of rows() of that call
  // (empty: all of them, stage 2 had nothing to remove).
  std::vector<attention::RowRange> last_selection(int64_t b, int64_t h) const;

 protected:
  const attention::RowSource& attended_rows(const attention::RowSource& kept,
                                            const attention::AttentionCall& call) override;
  void expand_row_weights(float* weights, int64_t stride) const override;

 private:
  void ensure_summaries();

  double ratio_;
  std::optional<int> page_option_, topk_option_;
  // [B, H, pages of the budget, key_dim] f16 maxima and minima, allocated with the rows.
  std::vector<uint16_t> page_max_, page_min_;
  // [B, H, pages of the budget]: the fingerprint of the positions each summary was built from.
  std::vector<uint64_t> page_prints_;
  int64_t summary_pages_ = 0;
  // This call's view of the stored rows (active only when this call selected pages; kept
  // between calls so its buffers are reused and a decode step allocates nothing).
  std::optional<attention::RowRangesSource> view_;
  bool view_active_ = false;
};

// QuantizerConfigError naming field and value.
void validate_rocketkv_options(const KVCacheConfig& config);
eviction::EvictionPolicy rocketkv_policy(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_rocketkv_cache(const KVCacheConfig& config);
// The registration (registry/eviction_method_rows.cpp lists it).
MethodDescriptor rocketkv_method();

}  // namespace veloxquant
