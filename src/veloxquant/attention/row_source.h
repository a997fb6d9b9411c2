#pragma once
// What a compressed or evicting cache hands the shared attention driver (attention_driver.h):
// its stored rows of one (batch, kv head), readable in tiles of at most kTileRows rows.
//
// The driver owns everything that is the same for every method — validation, GQA mapping,
// causal limits and windows, the online softmax, split-K across threads for decode, query
// tiling for prefill, scratch reuse. A source only knows its own storage and answers two block
// operations on it:
//
//   score_tile       scores[r * ld + jj] = <prepared query r, key row j0 + jj>
//   accumulate_tile  acc[r * value_dim + e] += sum_jj weights[r * ld + jj] * value row j0 + jj [e]
//
// for a block of prepared queries r < n_queries (all query heads of a GQA group, times the
// queries of a prefill tile): each stored row is read once per tile for all of them. A source
// works in whatever domain its codes live in (a rotated basis, per-group folded scales); it
// turns a raw query into that domain once per call (prepare_query) and its accumulated values
// back into the model's basis once per query row (finish_row). No source allocates per call:
// scratch comes from the driver's per-thread TileScratch.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace veloxquant::attention {

// Rows per tile: 64 rows of 64-128 f32 columns (16-32 KiB) stay in L1/L2 while every query of
// the block reads them.
constexpr int64_t kTileRows = 64;

// Per-thread scratch a source may use inside score_tile / accumulate_tile (grow-only, owned by
// the driver; sized by the source as it needs, never shrunk, never shared between threads).
// A tile's softmax weights: weights[r * ld + j] for query row r < n_queries and tile row j.
struct TileWeights {
  const float* weights;
  int64_t n_queries, ld;
};

struct TileScratch {
  std::vector<float> floats;
  std::vector<float> floats2;
  std::vector<uint8_t> bytes;
  float* f32(std::size_t n) {
    if (floats.size() < n) floats.resize(n);
    return floats.data();
  }
  float* f32_second(std::size_t n) {
    if (floats2.size() < n) floats2.resize(n);
    return floats2.data();
  }
  uint8_t* u8(std::size_t n) {
    if (bytes.size() < n) bytes.resize(n);
    return bytes.data();
  }
};

class RowSource {
 public:
  virtual ~RowSource() = default;

  // Length of a raw query and of a prepared query (the model's head_dim).
  virtual int64_t key_dim() const = 0;
  // Length of an accumulator row and of an output row (the model's value head_dim).
  virtual int64_t value_dim() const = 0;

  // Rows stored for (b, kv head h), and their true positions (ascending). nullptr means row j
  // holds position position_base() + j (a contiguous run, the common case without eviction).
  virtual int64_t rows(int64_t b, int64_t h) const = 0;
  virtual const int32_t* positions(int64_t /*b*/, int64_t /*h*/) const { return nullptr; }
  virtual int64_t position_base() const { return 0; }

  // Floats of a prepared query (default key_dim()); prepare_query writes that many.
  virtual int64_t prepared_dim() const { return key_dim(); }
  // A raw query (f32, RoPE applied) into the form score_tile reads. Default: a copy. Each
  // segment of a call prepares its own copy (a rotated basis, a code order), once per call.
  virtual void prepare_query(const float* query, float* prepared) const;

  // Scores of rows [j0, j1) of (b, h) (j1 - j0 <= kTileRows) against n_queries prepared
  // queries (`prepared` + r * prepared_dim()): scores[r * ld + (j - j0)], unscaled dot products.
  virtual void score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                          float* scores, int64_t ld, TileScratch& scratch) const = 0;

  // acc[r * value_dim() + e] += sum over j in [j0, j1) of weights[r * ld + (j - j0)] * value_j[e]
  // for r < n_queries (weights are unnormalised softmax numerators; zero for masked rows).
  virtual void accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights, int64_t n_queries,
                               int64_t ld, float* acc, TileScratch& scratch) const = 0;

  // Hints the bytes of rows [j0, j1) of (b, h) into the cache (attention/prefetch.h). The driver
  // calls it for the next tile before scoring the current one, so a decode step streaming a long
  // cache has the next tile's lines in flight. Changes no result. Default: no hint.
  virtual void prefetch_tile(int64_t /*b*/, int64_t /*h*/, int64_t /*j0*/, int64_t /*j1*/) const {}

  // One finished, normalised accumulator row (value_dim floats) into the model's basis, in
  // place. Default: nothing (values were accumulated in the model's basis).
  virtual void finish_row(float* /*row*/) const {}
};

}  // namespace veloxquant::attention
