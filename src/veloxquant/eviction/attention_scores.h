#pragma once
// Attention weights that score retained rows (spec §2.3, §6 "H2O-scorer").
//
// Two sources of queries:
//   * the key-as-query proxy of the original — the cache never saw queries, so the incoming key
//     stands in for the query: softmax(K . k / sqrt(d));
//   * real queries: the host hands the layer's RoPE-rotated queries to a cache that asks for
//     them (lm::KVCache::observe_queries). A kv head is read by a group of query heads (GQA);
//     its weight for a row is the mean over the group of each query head's softmax — what the
//     rows really received, averaged as TOVA averages over heads and kvpress's SnapKV over a
//     GQA group.
#include <cstdint>
#include <vector>

#include "lm/tensor.h"

namespace veloxquant::eviction {

// out[j] = mean over the n_queries queries q of softmax_j(scale * <keys[rows[j]], q>), j over
// `count` rows (rows == nullptr: rows 0..count-1). Computed in f32 with SIMD dot products and
// exponentials.
void mean_softmax_weights(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const float* queries,
                          int64_t n_queries, float scale, float* out);

// The queries the host offered for the next update (f32 [B, H_q, N, D], copied: the host's
// tensor dies with its step). Consumed by the update of the same N tokens, then dropped.
class ObservedQueries {
 public:
  void observe(const lm::Tensor& queries);
  // True when queries for an update of `n_tokens` tokens of `batch` sequences over `kv_heads`
  // heads of dimension `dim` are at hand (H_q a multiple of kv_heads).
  bool matches(int64_t batch, int64_t kv_heads, int64_t n_tokens, int64_t dim) const;
  // The query vectors of kv head `kv_head`'s group for token `token`: group x D floats into
  // `out`; returns the group size H_q / kv_heads.
  int64_t group_queries(int64_t b, int64_t kv_head, int64_t kv_heads, int64_t token, std::vector<float>& out) const;
  void clear() { queries_ = {}; }
  bool empty() const { return queries_.empty(); }

 private:
  std::vector<float> queries_;
  int64_t batch_ = 0, heads_ = 0, n_ = 0, dim_ = 0;
};

}  // namespace veloxquant::eviction
