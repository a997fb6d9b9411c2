#pragma once
// A KVCache decorator for the offline studies in bench/ (kv_coding_gain, kv_rows_dump): it
// forwards every call to the host's own cache and shows each update's rows, and the queries
// observed just before it, to record(), so a study sees exactly what a cache would be handed.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lm/cache/cache.h"
#include "lm/tensor.h"

namespace bench_support {

class RecordingKVCache : public lm::KVCache {
 public:
  explicit RecordingKVCache(std::shared_ptr<lm::KVCache> inner) : inner_(std::move(inner)) {}

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override {
    heads = keys.dim(1), key_dim = keys.dim(3), value_dim = values.dim(3);
    record(keys, values, inner_->offset());
    return inner_->update_and_fetch(keys, values);
  }
  bool wants_queries() const override { return true; }
  void observe_queries(const lm::Tensor& queries) override {
    pending_queries_ = queries.to_f32();
    query_heads = queries.dim(1);
  }
  int64_t offset() const override { return inner_->offset(); }
  bool empty() const override { return inner_->empty(); }
  std::size_t nbytes() const override { return inner_->nbytes(); }
  std::vector<lm::Tensor> state() const override { return inner_->state(); }
  std::vector<std::string> meta_state() const override { return inner_->meta_state(); }
  void from_state(const std::vector<lm::Tensor>& s, const std::vector<std::string>& m) override {
    inner_->from_state(s, m);
  }
  std::string type_name() const override { return "RecordingKVCache"; }

  int64_t heads = 0, query_heads = 0, key_dim = 0, value_dim = 0;

 protected:
  // One update's new rows, `at` the inner cache's offset before them.
  virtual void record(const lm::Tensor& keys, const lm::Tensor& values, int64_t at) = 0;
  // The f32 queries [B, H_q, N, D] observed for this update.
  const std::vector<float>& pending_queries() const { return pending_queries_; }

 private:
  std::shared_ptr<lm::KVCache> inner_;
  std::vector<float> pending_queries_;
};

}  // namespace bench_support
