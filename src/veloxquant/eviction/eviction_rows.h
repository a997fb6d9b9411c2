#pragma once
// Position-preserving row storage of an eviction cache (spec §2.3): per (batch, kv head) the
// retained rows in temporal order, each with its true position (survivors keep their original
// RoPE rotation and position — never renumbered) and, for score-based methods, its score.
//
// Every (batch, head) holds the same number of rows (each method keeps exactly
// min(budget, tokens) rows per head), so the returned keys of all heads share one length T
// and the mask has one T. The storage grows with the rows held, in steps of kGrowthStep rows
// and never past the budget: a layer whose budget is 1,000 rows holds 32 of them after 13
// tokens (it used to hold all 1,000 from the first token, so pyramidkv's deep-tapered budgets
// still held more than the native cache at short context). nbytes() is what is really held.
// The budget is checked against the machine at allocate() (before any row is stored), so a
// budget that could never be held is refused up front, not after hours of generation.
//
//   keys_       U8  [B, H, capacity, key_codec.row_bytes()]    row r in slot (first + r) mod capacity
//   values_     U8  [B, H, capacity, value_codec.row_bytes()]  (first: per head, see replace_row)
//   positions_  I32 [B, H, capacity]
//   scores_     F32 [B, H, capacity]   only when the method keeps scores
#include <cstdint>
#include <memory>
#include <vector>

#include "lm/tensor.h"
#include "veloxquant/eviction/row_codec.h"

namespace veloxquant::eviction {

class EvictionRows {
 public:
  EvictionRows(int64_t budget, bool keep_scores, StorageSpec spec);

  // Rows per head the storage grows by: small enough that a short context holds far less than
  // the native cache's 256-row step, large enough that a decode step rarely reallocates.
  static constexpr int64_t kGrowthStep = 32;

  bool allocated() const { return allocated_; }
  // Fixes the layout and codecs and checks that the whole budget could be held; stores nothing.
  void allocate(int64_t batch, int64_t heads, int64_t key_dim, int64_t value_dim, lm::DType dtype);
  // Makes room for `rows` rows per head (at most the budget), keeping the stored rows. Call
  // before compact() may keep that many; not thread-safe (it reallocates every head).
  void reserve(int64_t rows);

  int64_t budget() const { return budget_; }
  int64_t capacity() const { return capacity_; }
  int64_t rows() const { return rows_; }
  int64_t batch() const { return batch_; }
  int64_t heads() const { return heads_; }
  int64_t key_dim() const { return key_dim_; }
  int64_t value_dim() const { return value_dim_; }
  lm::DType dtype() const { return dtype_; }
  bool keeps_scores() const { return keep_scores_; }
  const StorageSpec& spec() const { return spec_; }

  const int32_t* positions(int64_t b, int64_t h) const;
  // Stored row r of (b, h) as its codec wrote it, for the attention driver's reader
  // (eviction_row_source.h). A head's rows lie in a ring of capacity() slots (a decode step moves
  // the shorter side of its victim, so row 0 need not sit in the first slot): rows r ..
  // r + contiguous_rows(b, h, r) - 1 lie back to back, row_bytes apart.
  const std::byte* key_row(int64_t b, int64_t h, int64_t r) const;
  const std::byte* value_row(int64_t b, int64_t h, int64_t r) const;
  int64_t contiguous_rows(int64_t b, int64_t h, int64_t r) const;
  int64_t key_row_bytes() const { return key_bytes_; }
  int64_t value_row_bytes() const { return value_bytes_; }
  const RowCodec& key_codec() const { return *key_codec_; }
  const RowCodec& value_codec() const { return *value_codec_; }
  const float* scores(int64_t b, int64_t h) const;  // nullptr without scores
  // The stored rows of (b, h), decoded to f32: rows() x key_dim.
  void decode_keys(int64_t b, int64_t h, float* out) const;
  void decode_values(int64_t b, int64_t h, float* out) const;
  // Re-encodes stored row r of (b, h) from f32 — a survivor a merging policy (cam) blended an
  // evicted row into; key == nullptr leaves the key as stored.
  void rewrite_row(int64_t b, int64_t h, int64_t r, const float* key, const float* value);
  // The stored rows of (b, h) as `dtype` elements (what update_and_fetch returns): a plain copy
  // when the codec keeps exactly that dtype, else decoded and converted. `out` holds rows() rows.
  void write_keys(int64_t b, int64_t h, lm::DType dtype, std::byte* out) const;
  void write_values(int64_t b, int64_t h, lm::DType dtype, std::byte* out) const;

  // Rewrites head (b, h) to hold the candidates `kept` (strictly increasing indices into the
  // candidates: stored rows 0..rows()-1, then the call's new rows). New rows are encoded from
  // new_keys / new_values (f32, [S, dim]); candidate_positions / candidate_scores cover every
  // candidate (scores may be null without scores). Stored rows only move down (kept[i] >= i),
  // so the compaction is in place. Call commit_rows(kept.size()) once every head is rewritten.
  void compact(int64_t b, int64_t h, const std::vector<int32_t>& kept, const int32_t* candidate_positions,
               const float* candidate_scores, const float* new_keys, const float* new_values);
  void commit_rows(int64_t rows);

  // A decode step's update of head (b, h) without building a kept list: the stored rows'
  // scores, writable in place (rows() of them; nullptr without scores), then replace_row.
  float* mutable_scores(int64_t b, int64_t h);
  // Stores one new row (its position, score and f32 key/value): appended after the stored rows
  // when victim < 0 (reserve room first), else the victim leaves, the rows on its shorter side
  // move by one slot (those before it move up and the head's ring starts one slot later), and
  // the new row comes last. Leaves the rows, positions and scores that compact() with every
  // candidate but the victim leaves, without walking every row (compact() turns the rings back
  // first). Call commit_rows once every head is done.
  void replace_row(int64_t b, int64_t h, int64_t victim, int32_t position, float score, const float* key,
                   const float* value);

  std::size_t nbytes() const;
  // (keys, values, positions[, scores]) sliced to rows(); empty before the first update.
  std::vector<lm::Tensor> state() const;
  // Restores from state(): the dtype of the stored rows comes from the owner's meta.
  void restore(const std::vector<lm::Tensor>& state, int64_t key_dim, int64_t value_dim, lm::DType dtype,
               const char* who);
  EvictionRows clone() const;

 private:
  std::byte* key_row(int64_t b, int64_t h, int64_t r);
  std::byte* value_row(int64_t b, int64_t h, int64_t r);
  // Index of row r of (b, h) among all slots (b, h, slot), its ring turned by first_slot_.
  int64_t slot(int64_t b, int64_t h, int64_t r) const;
  bool wrapped() const;  // some head's first row is not in its first slot
  void unwrap();         // turns every head's ring back to start at its first slot

  int64_t budget_;
  bool keep_scores_;
  StorageSpec spec_;
  std::shared_ptr<const RowCodec> key_codec_, value_codec_;  // immutable: clones share them
  int64_t batch_ = 0, heads_ = 0, key_dim_ = 0, value_dim_ = 0, key_bytes_ = 0, value_bytes_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t rows_ = 0;
  int64_t capacity_ = 0;  // rows per head allocated: the stride between heads
  bool allocated_ = false;
  std::vector<int64_t> first_slot_;  // per (b, h): the slot holding row 0
  lm::Tensor keys_, values_, positions_, scores_;
};

}  // namespace veloxquant::eviction
