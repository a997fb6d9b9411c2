#pragma once
// One precision tier of age_tiered (caches/age_tiered_cache.h): the key and value rows of a
// contiguous run of positions, every row coded by the same per-token group-affine codec
// (eviction/row_codec.h: b-bit codes in words + one f16 (scale, min) per channel group).
//
// A tier is a queue: rows enter at the back (new tokens, or rows that aged out of the tier above)
// and leave at the front (rows that aged into the tier below). The live rows [first, first +
// rows) of each head sit in a [B, H, capacity, row bytes] buffer; the front advances without
// moving anything, and the live rows slide down to row 0 only when the back reaches the capacity
// — so a decode step that moves one row in and one out costs one encode, and the move is
// amortised over the buffer's slack. Capacity grows in 256-row steps (the host cache's step) and
// is what nbytes() counts; a tier whose live rows are bounded (recent, mid) stops at the bound
// plus kSlideRows, so its slack is at most 32 rows, not up to 255.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "lm/tensor.h"
#include "veloxquant/eviction/row_codec.h"

namespace veloxquant {

class AgeTier {
 public:
  static constexpr int64_t kGrowthStep = 256;
  // Slack of a bounded tier: its live rows slide back to the buffer's start every kSlideRows rows.
  static constexpr int64_t kSlideRows = 32;

  // max_rows: the most live rows the tier ever holds, or -1 when unbounded (the old tier).
  AgeTier(int bits, int group, int64_t max_rows);

  // Fixes the layout (codecs for key_dim / value_dim); holds no rows yet.
  void allocate(int64_t batch, int64_t heads, int64_t key_dim, int64_t value_dim);
  bool allocated() const { return key_codec_ != nullptr; }

  int bits() const { return bits_; }
  int64_t rows() const { return rows_; }
  // Position of the front row (every head's rows are the same positions).
  int64_t first_position() const { return first_position_; }
  void set_first_position(int64_t position) { first_position_ = position; }

  // Makes room for `more` rows at the back of every head (slides or grows the buffer).
  void reserve_back(int64_t more);
  // Encodes f32 key / value vectors as live row rows() + i of head (b, h) (i < reserved slack).
  void encode_back(int64_t b, int64_t h, int64_t i, const float* key, const float* value);
  // Makes `n` encoded back rows live.
  void commit_back(int64_t n) { rows_ += n; }
  // Live row r of (b, h) decoded to f32.
  void decode_key(int64_t b, int64_t h, int64_t r, float* out) const;
  void decode_value(int64_t b, int64_t h, int64_t r, float* out) const;
  // Drops the `n` front rows of every head (their positions move on).
  void drop_front(int64_t n);

  // Live rows of (b, h), row r at + r * row bytes (the attention reader's view).
  const std::byte* key_rows(int64_t b, int64_t h) const;
  const std::byte* value_rows(int64_t b, int64_t h) const;
  int64_t key_row_bytes() const { return static_cast<int64_t>(key_codec_->row_bytes()); }
  int64_t value_row_bytes() const { return static_cast<int64_t>(value_codec_->row_bytes()); }
  const eviction::RowCodec& key_codec() const { return *key_codec_; }
  const eviction::RowCodec& value_codec() const { return *value_codec_; }
  int64_t key_dim() const { return key_dim_; }
  int64_t value_dim() const { return value_dim_; }

  std::size_t nbytes() const { return keys_.storage_bytes() + values_.storage_bytes(); }
  // (keys, values) U8 [B, H, rows, row bytes]: the live rows only.
  std::vector<lm::Tensor> state() const;
  // Restores live rows from state() (the layout must already be allocated); throws
  // base::FormatError naming `who` when shapes or row sizes differ.
  void restore(const lm::Tensor& keys, const lm::Tensor& values, const char* who);
  // Deep copy (codecs are immutable and shared).
  AgeTier clone() const;

 private:
  // Slides the live rows of every head down to row 0 and sets the capacity to `capacity` rows.
  void repack(int64_t capacity);
  // Buffer rows for `rows` live rows: whole growth steps, capped at a bounded tier's bound + slack.
  int64_t capacity_for(int64_t rows) const;

  int bits_, group_;
  int64_t max_rows_;
  std::shared_ptr<const eviction::RowCodec> key_codec_, value_codec_;
  int64_t batch_ = 0, heads_ = 0, key_dim_ = 0, value_dim_ = 0;
  int64_t first_ = 0;     // buffer row of the front live row (the same for every head)
  int64_t rows_ = 0;      // live rows per head
  int64_t capacity_ = 0;  // buffer rows per head
  int64_t first_position_ = 0;
  lm::Tensor keys_, values_;  // U8 [B, H, capacity, row bytes]
};

}  // namespace veloxquant
