#pragma once
// The serving cache every eviction method is (spec §2.3): position-preserving storage
// (eviction_rows.h), a policy that picks the kept rows (eviction_policy.h), attention scoring by
// real queries or the key-as-query proxy (attention_scores.h) and the explicit mask
// (eviction_mask.h). A method file (eviction/methods/h2o_cache.h, ...) only turns its options into a
// policy.
//
// update_and_fetch implements deferred eviction (the original's issues #370/#610): the host
// built this call's mask before the call, over every row the call will return, so the call
// returns the un-evicted concatenation — stored rows ++ all new rows, in the input dtype — and
// only what is stored for the next call is cut to the budget. offset() is the true count of
// tokens fed; rows keep their true positions; not trimmable.
//
// Queries: when `eviction_scoring` is "auto" and the policy scores by attention, the cache asks
// the host for the layer's queries (wants_queries) and scores with them; without them (another
// host, a direct update_and_fetch) and with "proxy" it uses the incoming keys, as the original.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/eviction/attention_scores.h"
#include "veloxquant/eviction/eviction_policy.h"
#include "veloxquant/eviction/eviction_rows.h"

namespace veloxquant::eviction {

enum class Scoring { kAuto, kProxy };
Scoring parse_scoring(const std::string& name);  // "auto" / "proxy"; QuantizerConfigError names eviction_scoring
const char* scoring_name(Scoring scoring);

class EvictionCache : public lm::KVCache {
 public:
  EvictionCache(std::string type_name, EvictionPolicy policy, StorageSpec storage, Scoring scoring);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override { return rows_.nbytes(); }
  bool is_trimmable() const override { return false; }
  lm::AttentionMask make_mask(int64_t n_queries, std::optional<int64_t> window) const override;
  // The rows' tensors, then the policy's per-head state when it keeps one (qfilters).
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return type_name_; }
  bool wants_queries() const override { return scoring_ == Scoring::kAuto && policy_.uses_attention(); }
  // A deep copy of the same type name and policy (method classes of the first five methods
  // override it to keep their C++ type; later methods are plain EvictionCaches).
  std::shared_ptr<lm::KVCache> clone() const override;
  // Attention over the kept rows and the call's new rows through the shared driver, then
  // deferred eviction (see fused_attention in eviction_cache.cpp).
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;
  void observe_queries(const lm::Tensor& queries) override;

  const EvictionPolicy& policy() const { return policy_; }
  const EvictionRows& rows() const { return rows_; }
  Scoring scoring() const { return scoring_; }
  // How the last update scored: true when it used the host's queries.
  bool last_update_used_queries() const { return last_used_queries_; }
  // Telemetry of the original's eviction caches.
  int64_t tokens_seen() const { return offset_; }
  int64_t tokens_kept() const { return rows_.rows(); }

 protected:
  // Called first by update_and_fetch and fused_attention with the call's new keys (squeeze
  // reports its layer's keys and picks up its resolved budget here).
  virtual void before_update(const lm::Tensor& keys) { (void)keys; }
  // A new budget for the stored rows (squeeze's schedule): rows past it are evicted by the
  // policy's rank (shrink_rows), and the storage is reallocated for exactly the new budget.
  void change_budget(int64_t budget);
  // Sparse attention over the stored rows (rocketkv's stage 2): the rows of `kept` (this call's
  // stored segment) that fused_attention attends, as a view of a subset of them in order;
  // `call` holds the call's queries (f32, contiguous). Default: all of them, `kept` itself.
  virtual const attention::RowSource& attended_rows(const attention::RowSource& kept,
                                                    const attention::AttentionCall& call) {
    (void)call;
    return kept;
  }
  // After a decode step whose stored segment was a subset (attended_rows): the driver's weights
  // for the attended rows, [B, H, stride] with stride = rows(), expanded in place to every stored
  // row (rows not attended got no weight). Default: nothing (every row was attended).
  virtual void expand_row_weights(float* weights, int64_t stride) const {
    (void)weights;
    (void)stride;
  }

  // Deep copy for a method class's clone(): the storage is cloned, the rest is values.
  template <class Method>
  static std::shared_ptr<lm::KVCache> clone_as(const Method& self) {
    auto copy = std::make_shared<Method>(self);
    copy->rows_ = self.rows_.clone();
    return copy;
  }

 private:
  void prepare_rows(const lm::Tensor& keys, const lm::Tensor& values, const std::string& who);
  // The policy's general selection over stored + new rows; writes every candidate into
  // out_k/out_v (input dtype) when they are given.
  void select_and_store(const lm::Tensor& keys, const lm::Tensor& values, lm::Tensor* out_k, lm::Tensor* out_v,
                        const std::string& who);
  // A single-token call: weights from the attention step (null: none needed), one victim at most.
  void store_decode_step(const lm::Tensor& keys, const lm::Tensor& values, const float* stored_weights,
                         const float* new_weights);

  std::string type_name_;
  // "<type>::fused_attention", built once: a decode step names itself in errors without
  // building a string (no heap allocation per step).
  std::string fused_who_;
  std::vector<std::vector<int32_t>> kept_rows_;  // select_and_store's rows kept per head, reused
  EvictionPolicy policy_;
  Scoring scoring_;
  EvictionRows rows_;
  ObservedQueries observed_;
  // Code order of turboquant_rvq key rows for the driver (built on first use, shared by clones).
  std::shared_ptr<const attention::CodeOrder> rvq_order_;
  int64_t offset_ = 0;
  bool last_used_queries_ = false;
  // Per (batch, head) policy state, EvictionPolicy::state_floats(key dim) floats each.
  std::vector<float> policy_state_;
  bool retention_reported_ = false;
  // qfilters' retention floor, checked after each update.
  void check_retention();
};

}  // namespace veloxquant::eviction
