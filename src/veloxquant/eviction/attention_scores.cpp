#include "veloxquant/eviction/attention_scores.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "lm/kernels/simd_dot.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/eviction/row_logits.h"

namespace veloxquant::eviction {

void mean_softmax_weights(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const float* queries,
                          int64_t n_queries, float scale, float* out) {
  // Called once per token per head while scoring (a prefill chunk of an attention-scored policy
  // calls it for every token over every live row): the group's logits and maxima in one
  // dispatched pass over the rows (row_logits.h), then per query SIMD exponentials in f32 added
  // into the mean in query order; scratch reused by this thread.
  thread_local std::vector<float> logits, maxima;
  std::fill(out, out + count, 0.0f);
  if (count == 0 || n_queries == 0) return;
  logits.resize(static_cast<std::size_t>(count * n_queries));
  maxima.resize(static_cast<std::size_t>(n_queries));
  scaled_row_logits(keys, rows, count, dim, queries, n_queries, scale, logits.data(), count, maxima.data());
  for (int64_t q = 0; q < n_queries; ++q) {
    float* x = logits.data() + q * count;
    const float total = lm::kernels::simd::exp_shifted_sum(x, count, maxima[static_cast<std::size_t>(q)]);
    lm::kernels::simd::axpy_f32(1.0f / (total * static_cast<float>(n_queries)), x, out, count);
  }
}

void ObservedQueries::observe(const lm::Tensor& queries) {
  if (queries.ndim() != 4) {
    throw base::InvalidArgument("observe_queries: queries must be [B, H_q, N, D], got " +
                                lm::shape_text(queries.shape()));
  }
  batch_ = queries.dim(0);
  heads_ = queries.dim(1);
  n_ = queries.dim(2);
  dim_ = queries.dim(3);
  queries_ = queries.to_f32();
}

bool ObservedQueries::matches(int64_t batch, int64_t kv_heads, int64_t n_tokens, int64_t dim) const {
  return !queries_.empty() && batch_ == batch && n_ == n_tokens && dim_ == dim && kv_heads > 0 &&
         heads_ % kv_heads == 0;
}

int64_t ObservedQueries::group_queries(int64_t b, int64_t kv_head, int64_t kv_heads, int64_t token,
                                       std::vector<float>& out) const {
  const int64_t group = heads_ / kv_heads;
  out.resize(static_cast<std::size_t>(group * dim_));
  for (int64_t g = 0; g < group; ++g) {
    const int64_t h = kv_head * group + g;
    std::copy_n(queries_.data() + ((b * heads_ + h) * n_ + token) * dim_, dim_, out.data() + g * dim_);
  }
  return group;
}

}  // namespace veloxquant::eviction
