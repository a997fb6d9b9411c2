#pragma once
// The one hot loop of every compressed or evicting cache (DESIGN.md, "Attention over compressed
// caches"): attention of a call's queries over the rows of one or more RowSources.
//
// Segments. A cache's rows may live in several stores — KIVI's quantized rows and its
// full-precision tail, an eviction cache's kept rows and the rows of this very call — so a call
// names up to kMaxSegments sources, attended as one sequence (softmax across all of them). All
// segments share key_dim, value_dim and the value basis (finish_row of the first segment is
// applied to the result); each prepares the queries in its own form (prepare_query).
//
// Visibility of row j (position p_j) to query i (position q_i = first_position + i):
//   p_j <= q_i (causal), and q_i - p_j < window when the layer has a sliding window.
// A query that sees no row gets a zero output row.
//
// Work split. Prefill (many queries): units of (batch, kv head, block of up to kQueryBlock
// queries), every unit walks all rows it can see, tile by tile; each tile is read once for all
// group heads x queries of the block. Decode (few queries): the rows of each (batch, kv head)
// are split into ranges across threads ("split-K", flash-decoding) and the ranges' partial
// softmax states (m, l, acc) merged — so 2 threads are busy even with one kv head.
//
// Row weights (eviction scoring). When `row_weights` is set, the driver also writes, for each
// segment s, (b, kv head h) and row j, the attention weight the row received: the normalised
// softmax weight averaged over the group's query heads, summed over the call's queries —
// exactly what an attention-score eviction policy accumulates, computed from the same scores
// the output used: the main pass keeps its scaled scores and the weights are their softmax under
// the final (m, l) — no second scoring pass (a call whose scores would pass 64 MiB re-scores once).
#include <array>
#include <cstdint>
#include <optional>

#include "veloxquant/attention/row_source.h"

namespace base {
class ThreadPool;
}

namespace veloxquant::attention {

constexpr int kMaxSegments = 4;
constexpr int64_t kQueryBlock = 16;

struct AttentionCall {
  // Queries: f32, RoPE applied, contiguous [batch, q_heads, n_queries, key_dim].
  const float* queries = nullptr;
  int64_t batch = 0, q_heads = 0, kv_heads = 0, n_queries = 0;
  int64_t first_position = 0;     // position of query 0
  std::optional<int64_t> window;  // sliding window of the layer
  float scale = 1.0f;             // usually 1/sqrt(key_dim)
  // Output: f32, contiguous [batch, q_heads, n_queries, value_dim].
  float* out = nullptr;
  // Optional: row_weights[s] -> f32 [batch, kv_heads, rows_s] (rows_s = segment s's row count
  // of head (b, h), laid out at (b * kv_heads + h) * row_stride[s]); overwritten.
  std::array<float*, kMaxSegments> row_weights{};
  std::array<int64_t, kMaxSegments> row_weight_stride{};
  // Row weights come from the main pass's scores while they fit in this many floats (64 MiB);
  // a larger call (a long prefill over many rows) scores its rows a second time instead.
  int64_t max_logged_scores = int64_t{16} << 20;
};

// Runs the call over `segments` (1..kMaxSegments non-null sources, in this order). Throws
// base::InvalidArgument naming the mismatch for inconsistent geometry.
void attend(const AttentionCall& call, const RowSource* const* segments, int n_segments, base::ThreadPool* pool);

// Single source convenience.
inline void attend(const AttentionCall& call, const RowSource& source, base::ThreadPool* pool) {
  const RowSource* one = &source;
  attend(call, &one, 1, pool);
}

// The same result computed the plain way (each row scored by score_tile one row at a time,
// softmax in double, no threads): the reference the driver is tested against.
void attend_reference(const AttentionCall& call, const RowSource* const* segments, int n_segments);

}  // namespace veloxquant::attention
