#pragma once
// Multi-query tile kernels of attention: the inner loops shared by the host's own attention
// (lm/kernels/attention.cpp) and veloxquant's compressed-attention driver, which widen a tile
// of cached rows to f32 once and then serve every query that reads it (the query heads of a
// GQA group, the queries of a prefill block). Highway, dispatched at run time, each with a
// plain scalar reference the tests hold it to (results differ only by float reassociation).
#include <cstdint>

namespace lm::kernels::tiles {

// How far ahead a decode step over f16 rows in place hints keys and values into the cache (the
// prefetch_rows argument below; one key tile). Without it the core waits on DRAM between bursts
// of compute (the hardware streamers restart at every 4 KiB page): at 8k rows x 30 layers a
// decode thread spent ~20% more CPU time per token (16-17 ms against 12-13 ms with 32-64 rows
// ahead; 16 gained less, 128-256 no more, on a loaded 2-core Zen 2). The host's attention and
// veloxquant's eviction rows use this one value.
inline constexpr int64_t kDecodePrefetchRows = 64;

// scores[r * ld + j] = sum_e q[r * q_stride + e] * rows[j * row_stride + e], r < n_q, j < n_rows.
// Rows are scored a vector's width at a time with the per-row sums transposed into one vector,
// so a decode step pays no horizontal reduction per (row, query).
void score_rows(const float* q, int64_t q_stride, int64_t n_q, const float* rows, int64_t row_stride, int64_t n_rows,
                int64_t d, float* scores, int64_t ld);

// score_rows over rows in f16 (a cache's own buffer), widened in registers: each row chunk is
// loaded and widened once for up to three queries (a GQA group of 3 per pass) instead of once
// into an f32 tile and again per query. Bit-identical to score_rows over the rows widened to f32
// (the same products, summed in the same order), so swapping one for the other changes nothing.
//
// prefetch_rows > 0: also hints rows prefetch_rows ahead of the ones being scored into the cache
// (decode streams a long cache once; see accumulate_rows_f16). Rows past n_rows may be hinted:
// a prefetch never faults.
void score_rows_f16(const float* q, int64_t q_stride, int64_t n_q, const uint16_t* rows, int64_t row_stride,
                    int64_t n_rows, int64_t d, float* scores, int64_t ld, int64_t prefetch_rows = 0);

// acc[r * acc_stride + e] += sum_j w[r * ld + j] * rows[j * row_stride + e], r < n_q, e < d.
// Each row vector is loaded once for up to four queries.
void accumulate_rows(const float* w, int64_t ld, int64_t n_q, const float* rows, int64_t row_stride, int64_t n_rows,
                     int64_t d, float* acc, int64_t acc_stride);

// The same with the rows in f16 (a cache's own buffer), widened in registers. prefetch_rows > 0:
// the first pass over the rows also hints the row that many ahead into the cache, so a decode
// step streaming a long cache has the next rows' lines in flight while it computes (the
// hardware prefetchers restart at every 4 KiB page). Prefetching changes no result.
void accumulate_rows_f16(const float* w, int64_t ld, int64_t n_q, const uint16_t* rows, int64_t row_stride,
                         int64_t n_rows, int64_t d, float* acc, int64_t acc_stride, int64_t prefetch_rows = 0);

// s[i] *= scale for i < n; returns the largest result (-inf for n = 0): the logits of a tile
// every query sees whole.
float scale_and_max(float* s, int64_t n, float scale);

// Name of the instruction set the dispatcher picked (for reports).
const char* target_name();

namespace scalar {
void score_rows(const float* q, int64_t q_stride, int64_t n_q, const float* rows, int64_t row_stride, int64_t n_rows,
                int64_t d, float* scores, int64_t ld);
void score_rows_f16(const float* q, int64_t q_stride, int64_t n_q, const uint16_t* rows, int64_t row_stride,
                    int64_t n_rows, int64_t d, float* scores, int64_t ld);
void accumulate_rows(const float* w, int64_t ld, int64_t n_q, const float* rows, int64_t row_stride, int64_t n_rows,
                     int64_t d, float* acc, int64_t acc_stride);
void accumulate_rows_f16(const float* w, int64_t ld, int64_t n_q, const uint16_t* rows, int64_t row_stride,
                         int64_t n_rows, int64_t d, float* acc, int64_t acc_stride);
float scale_and_max(float* s, int64_t n, float scale);
}  // namespace scalar

}  // namespace lm::kernels::tiles
