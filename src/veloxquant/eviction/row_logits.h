#pragma once
// The logits of the eviction scorers' softmax (attention_scores.h): a GQA group of queries
// against a set of key rows, scaled. A prefill chunk of an attention-scored policy (h2o at 2,580
// rows: per prompt token, for each kv head, its query heads against every live row) spent most of
// its scoring around each dot rather than in it (a dispatched dot_f32 call per row and query, the
// logit spilled and reloaded, one chain of maxima). Here one dispatched call runs the rows, each
// row's key loaded once for up to four queries, each dot summed as dot_f32 sums it
// (lm/kernels/dot_f32-inl.h): the same floats, so the same rows kept.
#include <cstdint>

namespace veloxquant::eviction {

// For each query q < n_queries (queries + q * dim) and row j < count (keys + r_j * dim, r_j =
// rows ? rows[j] : j): out[q * stride + j] = dot_f32(row j, query q, dim) * scale, and
// maxima[q] = the largest of query q's logits, NaNs skipped (-inf when there is none).
void scaled_row_logits(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const float* queries,
                       int64_t n_queries, float scale, float* out, int64_t stride, float* maxima);

namespace scalar {
// The reference: lm::kernels::simd::dot_f32 per row and query (dispatched, so on the target a
// test forces) and a running std::max, as mean_softmax_weights computed them before.
void scaled_row_logits(const float* keys, const int32_t* rows, int64_t count, int64_t dim, const float* queries,
                       int64_t n_queries, float scale, float* out, int64_t stride, float* maxima);
}  // namespace scalar

}  // namespace veloxquant::eviction
