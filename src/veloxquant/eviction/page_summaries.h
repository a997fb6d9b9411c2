#pragma once
// Page summaries for query-aware sparse attention (rocketkv's stage 2, after Quest and SparQ):
// the stored rows of a head cut into pages of page_size consecutive rows, each summarised by the
// element-wise max and min of its keys (f16, two key-sized vectors per page). A query scores a
// page by the upper bound of q.k over the page's box, sum_c max(q_c max_c, q_c min_c), read only
// on the channels where the queries are largest in magnitude (the head-dimension reduction);
// the best pages are the rows exact attention runs over.
#include <cstdint>
#include <vector>

#include "veloxquant/attention/row_ranges_source.h"

namespace veloxquant::eviction {

inline int64_t page_count(int64_t rows, int64_t page_size) { return (rows + page_size - 1) / page_size; }

// Which rows a summary was built from: a 64-bit mix of their (unique, ascending) positions and
// count, never kNoFingerprint (the mark of a summary not built yet).
constexpr uint64_t kNoFingerprint = 0;
uint64_t page_fingerprint(const int32_t* positions, int64_t n);

// keys: rows x dim (f32). Writes page_count(rows, page_size) x dim maxima and minima (f16 bits).
void summarize_pages(const float* keys, int64_t rows, int64_t dim, int64_t page_size, uint16_t* max_out,
                     uint16_t* min_out);

// The k channels with the largest sum over the n queries of |q_c| (queries: n x dim), in
// increasing channel order; equal sums: the lower channel first.
std::vector<int32_t> top_channels(const float* queries, int64_t n, int64_t dim, int64_t k);
// The same into `order` (a reused vector: no allocation per decode step).
void top_channels(const float* queries, int64_t n, int64_t dim, int64_t k, std::vector<int32_t>& order);

// out[p] = sum over the n queries of sum over `channels` of max(q_c max_pc, q_c min_pc)
// (computed as max_pc * sum of the positive q_c + min_pc * sum of the negative q_c).
void page_scores(const uint16_t* max, const uint16_t* min, int64_t pages, int64_t dim,
                 const std::vector<int32_t>& channels, const float* queries, int64_t n, float* out);

// The keep_pages best-scored pages (equal scores: the earlier page), as ascending row ranges
// (adjacent pages merged; the last page ends at `rows`).
std::vector<attention::RowRange> top_pages(const float* scores, int64_t pages, int64_t page_size, int64_t rows,
                                           int64_t keep_pages);
// The same into `ranges` (reused).
void top_pages(const float* scores, int64_t pages, int64_t page_size, int64_t rows, int64_t keep_pages,
               std::vector<attention::RowRange>& ranges);

}  // namespace veloxquant::eviction
