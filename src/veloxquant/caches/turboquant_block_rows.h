#pragma once
// A turboquant_block cache's rows as a RowSource for the shared attention driver
// (attention/row_source.h): keys and values are read in the rotated basis where their codes
// live. The query is rotated once per call (prepare_query: Pi_k q, and <Pi_k q, Pi_k k> = <q, k>);
// a tile of rows is decoded from its block codes into scratch once and read by every query of
// the block (tile_kernels.h); values are summed rotated and turned back once per output row
// (finish_row: Pi_v^T acc), not once per row read.
//
// Decode tiles (up to 4 queries) read rows from their codes instead: 2-5-bit keys on Lloyd
// levels, head size 64, are scored as 8-bit integers (attention/byte_level_key_scores.h; the
// query rounded to int8 once in prepare_query); 1-bit keys on Lloyd levels (and 1-3-bit ones on
// machines without the byte scorer) in f32 with their levels in one register
// (score_permuted_level_rows); other keys that fit the integer scorer
// (attention/block_level_key_scores.h: up to 6 bits, or 8 on even levels) without decoding — the
// rotated query is rounded to 16 bits once in prepare_query, and a tile costs level lookups in
// registers and 16-bit multiply-adds; values that fit
// attention/block_level_value_sums.h are added into the outputs straight from their codes.
//
// Mean smoothing and sink rows stay exact: the cache keeps its means rotated (Pi mu, f16), which
// decoded tiles add to their rows, the integer scores add as one bias <Pi q, Pi mu> per query
// and the coded values add as (sum of weights) * Pi mu; sink rows are rotated from their f16
// copies. Key-mean segments (key_mean_segment) split a tile where the key mean changes: one
// decode, or one bias per query, per segment. Every row is Pi times the row update_and_fetch
// would return.
#include <cstdint>

#include "veloxquant/attention/block_level_key_scores.h"
#include "veloxquant/attention/byte_level_key_scores.h"
#include "veloxquant/attention/row_source.h"

namespace veloxquant {

class TurboQuantBlockCache;

class TurboQuantBlockRows final : public attention::RowSource {
 public:
  // Rows [0, rows) of every (b, h) of `cache`, at positions 0..rows-1.
  TurboQuantBlockRows(const TurboQuantBlockCache& cache, int64_t rows);

  int64_t key_dim() const override;
  int64_t value_dim() const override;
  int64_t rows(int64_t, int64_t) const override { return rows_; }
  // With integer keys: the query's int16 values (d / 2 floats of bytes), its step, then the
  // rotated f32 query (sink rows and the mean's bias read it); with byte keys the same layout
  // holds its int8 values and their magnitudes (d bytes each). Otherwise the rotated query.
  int64_t prepared_dim() const override;
  void prepare_query(const float* query, float* prepared) const override;
  void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries, float* scores,
                  int64_t ld, attention::TileScratch& scratch) const override;
  void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                       int64_t ld, float* acc, attention::TileScratch& scratch) const override;
  void finish_row(float* row) const override;

  // Rows [j0, j1) of (b, h) in the rotated basis, f32 [j1 - j0, D] (keys) or [.., Dv] (values);
  // `work` holds 2 * max(D, Dv) floats. What score_tile / accumulate_tile read (tests use it).
  void rotated_keys(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out, float* work) const;
  void rotated_values(int64_t b, int64_t h, int64_t j0, int64_t j1, float* out, float* work) const;

 private:
  void rotated_rows(bool keys, int64_t b, int64_t h, int64_t j0, int64_t j1, float* out, float* work) const;

  // The end of the rows of [j0, j1) decoded to f32: the sink rows when the codes are read
  // directly (codes_readable, a decode tile), else all of them.
  int64_t decoded_rows_end(bool codes_readable, int64_t n_queries, int64_t j0, int64_t j1) const;
  // Rows [j0, j1) of coded values (no sink rows) added from their codes.
  void accumulate_coded_values(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                               int64_t ld, float* acc, attention::TileScratch& scratch) const;
  // Coded key rows [r0, r1) of (b, h), within one key-mean segment, as the key scorers read them.
  attention::kernels::BlockLevelKeys coded_keys(int64_t b, int64_t h, int64_t r0, int64_t r1) const;
  // Rows [j0, j1) of coded 1-3-bit keys on Lloyd levels (no sink rows) scored in f32 from
  // their codes (attention/block_level_key_scores.h, score_permuted_level_rows).
  void score_permuted_keys(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                           float* scores, int64_t ld) const;
  // Rows [j0, j1) of coded 2-6-bit keys on Lloyd levels, head size 64 (no sink rows), scored
  // as 8-bit integers (attention/byte_level_key_scores.h).
  void score_byte_keys(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                       float* scores, int64_t ld, attention::TileScratch& scratch) const;
  // Rows [j0, j1) of coded keys (no sink rows) scored from their codes.
  void score_integer_keys(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                          float* scores, int64_t ld, attention::TileScratch& scratch) const;

  // The prepared query's rotated f32 values start here (0 without integer or byte keys).
  int64_t rotated_offset() const;

  const TurboQuantBlockCache& cache_;
  int64_t rows_;
  bool byte_keys_;      // 2-6-bit Lloyd keys, head size 64: 8-bit scores (first)
  bool permuted_keys_;  // 1-3-bit Lloyd keys: f32 scores from a level register (before integer_keys_)
  bool integer_keys_;
  // 8-bit even keys (q8) on a CPU with AVX-512 VNNI: integer_keys_ through
  // attention/even_byte_key_scores.h (its own integer model, a 16-bit query of 32639 steps).
  bool even_byte_keys_ = false;
  bool coded_values_;
  int32_t integer_limit_ = 0;
  attention::kernels::BlockLevels16 levels16_{};
  attention::kernels::ByteLevels levels8_{};
};

}  // namespace veloxquant
