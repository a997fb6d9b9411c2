#include "veloxquant/eviction/eviction_rows.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "base/memory_limit.h"
#include "base/error.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant::eviction {

EvictionRows::EvictionRows(int64_t budget, bool keep_scores, StorageSpec spec)
    : budget_(budget), keep_scores_(keep_scores), spec_(std::move(spec)) {
  if (budget < 1) throw base::InvalidArgument("EvictionRows: budget must be >= 1, got " + std::to_string(budget));
}

void EvictionRows::allocate(int64_t batch, int64_t heads, int64_t key_dim, int64_t value_dim, lm::DType dtype) {
  batch_ = batch;
  heads_ = heads;
  key_dim_ = key_dim;
  value_dim_ = value_dim;
  dtype_ = dtype;
  key_codec_ = make_key_codec(spec_, static_cast<int>(key_dim), dtype);
  value_codec_ = make_value_codec(spec_, static_cast<int>(value_dim), dtype);
  key_bytes_ = static_cast<int64_t>(key_codec_->row_bytes());
  value_bytes_ = static_cast<int64_t>(value_codec_->row_bytes());
  // The storage grows with the rows held (reserve), but a budget no machine could hold is
  // refused here, by name, at the first update, before any size arithmetic can overflow.
  const double row_bytes = static_cast<double>(key_bytes_ + value_bytes_ + 4 + (keep_scores_ ? 4 : 0));
  base::require_allocatable(
      static_cast<double>(batch) * static_cast<double>(heads) * static_cast<double>(budget_) * row_bytes,
      "an eviction budget of " + std::to_string(budget_) + " rows per kv head (" + std::to_string(batch * heads) +
          " heads of " + std::to_string(static_cast<int64_t>(row_bytes)) + " bytes per row, in one layer)");
  keys_ = values_ = positions_ = scores_ = lm::Tensor();
  first_slot_.assign(static_cast<std::size_t>(batch * heads), 0);
  capacity_ = 0;
  rows_ = 0;
  allocated_ = true;
}

namespace {

// A [B*H, from_capacity, width] buffer's first `rows` rows of every head, copied into a fresh
// [B, H, to_capacity, width] one.
lm::Tensor regrow(const lm::Tensor& from, int64_t batch, int64_t heads, int64_t from_capacity, int64_t to_capacity,
                  int64_t rows, int64_t width, lm::DType dtype) {
  lm::Shape shape{batch, heads, to_capacity};
  if (width > 1) shape.push_back(width);
  lm::Tensor to(shape, dtype);
  if (rows == 0) return to;
  const std::size_t row = static_cast<std::size_t>(width) * lm::dtype_size(dtype);
  for (int64_t bh = 0; bh < batch * heads; ++bh) {
    std::memcpy(to.raw_data() + static_cast<std::size_t>(bh * to_capacity) * row,
                from.raw_data() + static_cast<std::size_t>(bh * from_capacity) * row,
                static_cast<std::size_t>(rows) * row);
  }
  return to;
}

}  // namespace

void EvictionRows::reserve(int64_t rows) {
  if (!allocated_) throw std::logic_error("EvictionRows::reserve before allocate");
  rows = std::min(rows, budget_);
  if (rows <= capacity_) return;
  const int64_t capacity = std::min(budget_, (rows + kGrowthStep - 1) / kGrowthStep * kGrowthStep);
  unwrap();  // the copies below take each head's first rows_ slots
  keys_ = regrow(keys_, batch_, heads_, capacity_, capacity, rows_, key_bytes_, lm::DType::U8);
  values_ = regrow(values_, batch_, heads_, capacity_, capacity, rows_, value_bytes_, lm::DType::U8);
  positions_ = regrow(positions_, batch_, heads_, capacity_, capacity, rows_, 1, lm::DType::I32);
  if (keep_scores_) scores_ = regrow(scores_, batch_, heads_, capacity_, capacity, rows_, 1, lm::DType::F32);
  capacity_ = capacity;
}

int64_t EvictionRows::slot(int64_t b, int64_t h, int64_t r) const {
  const int64_t bh = b * heads_ + h;
  int64_t at = first_slot_[static_cast<std::size_t>(bh)] + r;
  if (at >= capacity_) at -= capacity_;
  return bh * capacity_ + at;
}

std::byte* EvictionRows::key_row(int64_t b, int64_t h, int64_t r) {
  return keys_.raw_data() + slot(b, h, r) * key_bytes_;
}
std::byte* EvictionRows::value_row(int64_t b, int64_t h, int64_t r) {
  return values_.raw_data() + slot(b, h, r) * value_bytes_;
}
const std::byte* EvictionRows::key_row(int64_t b, int64_t h, int64_t r) const {
  return keys_.raw_data() + slot(b, h, r) * key_bytes_;
}
const std::byte* EvictionRows::value_row(int64_t b, int64_t h, int64_t r) const {
  return values_.raw_data() + slot(b, h, r) * value_bytes_;
}

int64_t EvictionRows::contiguous_rows(int64_t b, int64_t h, int64_t r) const {
  const int64_t first = first_slot_[static_cast<std::size_t>(b * heads_ + h)];
  return first + r < capacity_ ? std::min(rows_, capacity_ - first) - r : rows_ - r;
}

bool EvictionRows::wrapped() const {
  return std::any_of(first_slot_.begin(), first_slot_.end(), [](int64_t f) { return f != 0; });
}

void EvictionRows::unwrap() {
  // Each head's ring turned so that its first row sits in slot 0 again (in place).
  for (int64_t bh = 0; bh < static_cast<int64_t>(first_slot_.size()); ++bh) {
    int64_t& first = first_slot_[static_cast<std::size_t>(bh)];
    if (first == 0) continue;
    std::byte* k = keys_.raw_data() + bh * capacity_ * key_bytes_;
    std::byte* v = values_.raw_data() + bh * capacity_ * value_bytes_;
    std::rotate(k, k + first * key_bytes_, k + capacity_ * key_bytes_);
    std::rotate(v, v + first * value_bytes_, v + capacity_ * value_bytes_);
    first = 0;
  }
}

const int32_t* EvictionRows::positions(int64_t b, int64_t h) const {
  return positions_.data<int32_t>() + (b * heads_ + h) * capacity_;
}

const float* EvictionRows::scores(int64_t b, int64_t h) const {
  return keep_scores_ ? scores_.data<float>() + (b * heads_ + h) * capacity_ : nullptr;
}

void EvictionRows::decode_keys(int64_t b, int64_t h, float* out) const {
  for (int64_t r = 0; r < rows_; ++r) key_codec_->decode(key_row(b, h, r), out + r * key_dim_);
}

void EvictionRows::decode_values(int64_t b, int64_t h, float* out) const {
  for (int64_t r = 0; r < rows_; ++r) value_codec_->decode(value_row(b, h, r), out + r * value_dim_);
}

void EvictionRows::rewrite_row(int64_t b, int64_t h, int64_t r, const float* key, const float* value) {
  if (r < 0 || r >= capacity_)
    throw std::logic_error("EvictionRows::rewrite_row: row " + std::to_string(r) + " outside the storage");
  if (key) key_codec_->encode(key, key_row(b, h, r));
  value_codec_->encode(value, value_row(b, h, r));
}

namespace {

void write_rows(const RowCodec& codec, lm::DType stored_dtype, const std::byte* first_row, int64_t row_bytes,
                int64_t rows, int64_t dim, lm::DType dtype, std::byte* out) {
  if (codec.exact() && stored_dtype == dtype) {  // stored as asked: the bytes are the answer
    std::memcpy(out, first_row, static_cast<std::size_t>(rows * row_bytes));
    return;
  }
  std::vector<float> row(static_cast<std::size_t>(dim));
  const std::size_t out_row_bytes = static_cast<std::size_t>(dim) * lm::dtype_size(dtype);
  for (int64_t r = 0; r < rows; ++r) {
    codec.decode(first_row + r * row_bytes, row.data());
    cache_rows::store_f32(row.data(), row.size(), out + r * out_row_bytes, dtype);
  }
}

}  // namespace

void EvictionRows::write_keys(int64_t b, int64_t h, lm::DType dtype, std::byte* out) const {
  const auto out_row = static_cast<int64_t>(static_cast<std::size_t>(key_dim_) * lm::dtype_size(dtype));
  for (int64_t r = 0; r < rows_;) {  // one piece per run of back-to-back slots
    const int64_t n = contiguous_rows(b, h, r);
    write_rows(*key_codec_, dtype_, key_row(b, h, r), key_bytes_, n, key_dim_, dtype, out + r * out_row);
    r += n;
  }
}

void EvictionRows::write_values(int64_t b, int64_t h, lm::DType dtype, std::byte* out) const {
  const auto out_row = static_cast<int64_t>(static_cast<std::size_t>(value_dim_) * lm::dtype_size(dtype));
  for (int64_t r = 0; r < rows_;) {
    const int64_t n = contiguous_rows(b, h, r);
    write_rows(*value_codec_, dtype_, value_row(b, h, r), value_bytes_, n, value_dim_, dtype, out + r * out_row);
    r += n;
  }
}

void EvictionRows::compact(int64_t b, int64_t h, const std::vector<int32_t>& kept, const int32_t* candidate_positions,
                           const float* candidate_scores, const float* new_keys, const float* new_values) {
  if (static_cast<int64_t>(kept.size()) > capacity_) {
    throw std::logic_error("EvictionRows::compact: " + std::to_string(kept.size()) + " rows kept, room for " +
                           std::to_string(capacity_) + " (budget " + std::to_string(budget_) + ")");
  }
  unwrap();  // the moves below are within one head's slots from 0
  int32_t* pos = positions_.data<int32_t>() + (b * heads_ + h) * capacity_;
  float* sc = keep_scores_ ? scores_.data<float>() + (b * heads_ + h) * capacity_ : nullptr;
  for (std::size_t i = 1; i < kept.size(); ++i) {
    if (kept[i] <= kept[i - 1]) throw std::logic_error("EvictionRows::compact: kept rows not increasing");
  }
  const int64_t n_kept = static_cast<int64_t>(kept.size());
  for (int64_t i = 0; i < n_kept;) {
    const int64_t src = kept[static_cast<std::size_t>(i)];
    if (src >= rows_) {  // a new row: encoded into its slot
      const int64_t n = src - rows_;
      key_codec_->encode(new_keys + n * key_dim_, key_row(b, h, i));
      value_codec_->encode(new_values + n * value_dim_, value_row(b, h, i));
      ++i;
      continue;
    }
    // A run of consecutive stored rows moves down by the same distance: one move per run (rows
    // of a head lie back to back), not one per row. src >= slot, so a move never overwrites a
    // row before it is read.
    int64_t end = i + 1;
    while (end < n_kept && kept[static_cast<std::size_t>(end)] == src + (end - i) &&
           kept[static_cast<std::size_t>(end)] < rows_) {
      ++end;
    }
    if (src != i) {
      const auto run = static_cast<std::size_t>(end - i);
      std::memmove(key_row(b, h, i), key_row(b, h, src), run * static_cast<std::size_t>(key_bytes_));
      std::memmove(value_row(b, h, i), value_row(b, h, src), run * static_cast<std::size_t>(value_bytes_));
    }
    i = end;
  }
  for (int64_t slot = 0; slot < n_kept; ++slot) {
    const int64_t src = kept[static_cast<std::size_t>(slot)];
    pos[slot] = candidate_positions[src];
    if (sc) sc[slot] = candidate_scores ? candidate_scores[src] : 0.0f;
  }
}

void EvictionRows::commit_rows(int64_t rows) { rows_ = rows; }

float* EvictionRows::mutable_scores(int64_t b, int64_t h) {
  return keep_scores_ ? scores_.data<float>() + (b * heads_ + h) * capacity_ : nullptr;
}

void EvictionRows::replace_row(int64_t b, int64_t h, int64_t victim, int32_t position, float score, const float* key,
                               const float* value) {
  if (victim >= rows_ || (victim < 0 && rows_ >= capacity_)) {
    throw std::logic_error("EvictionRows::replace_row: victim " + std::to_string(victim) + " of " +
                           std::to_string(rows_) + " rows, room for " + std::to_string(capacity_));
  }
  const int64_t bh = b * heads_ + h;
  int32_t* pos = positions_.data<int32_t>() + bh * capacity_;
  float* sc = mutable_scores(b, h);
  int64_t last = rows_;  // the new row's index
  if (victim >= 0) {
    // Positions and scores (4 bytes a row) close the gap where they lie. Of the rows' own bytes
    // the shorter side of the victim moves by one slot: the rows after it down, or the rows
    // before it up with the head's ring starting one slot later. streaming_llm's victim is the
    // first row past the sinks: 4 rows move, not the whole window (which had cost 61% of a
    // decode step's instructions and as many bytes moved as attention read).
    const int64_t after = rows_ - 1 - victim;
    std::memmove(pos + victim, pos + victim + 1, static_cast<std::size_t>(after) * sizeof(int32_t));
    if (sc) std::memmove(sc + victim, sc + victim + 1, static_cast<std::size_t>(after) * sizeof(float));
    const auto kb = static_cast<std::size_t>(key_bytes_), vb = static_cast<std::size_t>(value_bytes_);
    const auto move = [&](int64_t to, int64_t from, int64_t n) {  // n rows, back to back at both ends
      std::memmove(key_row(b, h, to), key_row(b, h, from), static_cast<std::size_t>(n) * kb);
      std::memmove(value_row(b, h, to), value_row(b, h, from), static_cast<std::size_t>(n) * vb);
    };
    // Slots from the head's first slot up to row r's: rows r, r - 1, ... back to back.
    const auto run_back = [&](int64_t r) { return slot(b, h, r) - bh * capacity_ + 1; };
    if (victim < after) {
      // Rows [r - n, r) move to [r - n + 1, r], from the victim down, one move per run.
      for (int64_t r = victim; r > 0;) {
        const int64_t n = std::min({r, run_back(r), run_back(r - 1)});
        move(r - n + 1, r - n, n);
        r -= n;
      }
      int64_t& first = first_slot_[static_cast<std::size_t>(bh)];
      first = first + 1 == capacity_ ? 0 : first + 1;
    } else {
      // Rows [r + 1, r + 1 + n) move to [r, r + n), from the victim up, one move per run.
      for (int64_t r = victim; r + 1 < rows_;) {
        const int64_t n = std::min({rows_ - 1 - r, contiguous_rows(b, h, r), contiguous_rows(b, h, r + 1)});
        move(r, r + 1, n);
        r += n;
      }
    }
    last = rows_ - 1;
  }
  key_codec_->encode(key, key_row(b, h, last));
  value_codec_->encode(value, value_row(b, h, last));
  pos[last] = position;
  if (sc) sc[last] = score;
}

std::size_t EvictionRows::nbytes() const {
  return keys_.storage_bytes() + values_.storage_bytes() + positions_.storage_bytes() + scores_.storage_bytes();
}

std::vector<lm::Tensor> EvictionRows::state() const {
  if (!allocated() || capacity_ == 0) return {};
  std::vector<lm::Tensor> out;
  if (!wrapped()) {
    out = {keys_.slice(2, 0, rows_), values_.slice(2, 0, rows_)};
  } else {  // rings that do not start at slot 0: their rows copied out in order
    lm::Tensor k({batch_, heads_, rows_, key_bytes_}, lm::DType::U8),
        v({batch_, heads_, rows_, value_bytes_}, lm::DType::U8);
    for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
      for (int64_t r = 0; r < rows_; ++r) {
        std::memcpy(k.raw_data() + (bh * rows_ + r) * key_bytes_, key_row(bh / heads_, bh % heads_, r),
                    static_cast<std::size_t>(key_bytes_));
        std::memcpy(v.raw_data() + (bh * rows_ + r) * value_bytes_, value_row(bh / heads_, bh % heads_, r),
                    static_cast<std::size_t>(value_bytes_));
      }
    }
    out = {k, v};
  }
  out.push_back(positions_.slice(2, 0, rows_));
  if (keep_scores_) out.push_back(scores_.slice(2, 0, rows_));
  return out;
}

void EvictionRows::restore(const std::vector<lm::Tensor>& state, int64_t key_dim, int64_t value_dim, lm::DType dtype,
                           const char* who) {
  const std::size_t expected = keep_scores_ ? 4 : 3;
  if (state.size() != expected) {
    throw base::FormatError(std::string(who) + ": expected " + std::to_string(expected) + " tensors, got " +
                            std::to_string(state.size()));
  }
  const lm::Tensor& k = state[0];
  if (k.ndim() != 4 || k.dtype() != lm::DType::U8) {
    throw base::FormatError(std::string(who) + ": key rows " + lm::shape_text(k.shape()) +
                            " are not u8 [B, H, T, bytes]");
  }
  const int64_t rows = k.dim(2);
  if (rows > budget_) {
    throw base::FormatError(std::string(who) + ": " + std::to_string(rows) + " stored rows exceed the budget " +
                            std::to_string(budget_));
  }
  allocate(k.dim(0), k.dim(1), key_dim, value_dim, dtype);
  reserve(std::max<int64_t>(rows, 1));  // at least one row, so state() of a restored cache is never empty
  const lm::Shape want_k{batch_, heads_, rows, key_bytes_}, want_v{batch_, heads_, rows, value_bytes_},
      want_p{batch_, heads_, rows};
  if (k.shape() != want_k || state[1].shape() != want_v || state[1].dtype() != lm::DType::U8 ||
      state[2].shape() != want_p || state[2].dtype() != lm::DType::I32 ||
      (keep_scores_ && (state[3].shape() != want_p || state[3].dtype() != lm::DType::F32))) {
    throw base::FormatError(std::string(who) + ": stored tensors do not match the storage (" +
                            storage_kind_name(spec_.kind) + ", key row " + std::to_string(key_bytes_) +
                            " bytes, value row " + std::to_string(value_bytes_) + " bytes)");
  }
  const auto copy_in = [&](const lm::Tensor& src, lm::Tensor& dst, int64_t width) {
    const lm::Tensor c = src.contiguous();
    const std::size_t row = static_cast<std::size_t>(width) * c.element_size();
    for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
      std::memcpy(dst.raw_data() + static_cast<std::size_t>(bh * capacity_) * row,
                  c.raw_data() + static_cast<std::size_t>(bh * rows) * row, static_cast<std::size_t>(rows) * row);
    }
  };
  if (rows > 0) {  // an empty state's tensors may have no storage to copy from
    copy_in(state[0], keys_, key_bytes_);
    copy_in(state[1], values_, value_bytes_);
    copy_in(state[2], positions_, 1);
    if (keep_scores_) copy_in(state[3], scores_, 1);
  }
  rows_ = rows;
}

EvictionRows EvictionRows::clone() const {
  EvictionRows copy = *this;
  copy.keys_ = keys_.clone();
  copy.values_ = values_.clone();
  copy.positions_ = positions_.clone();
  copy.scores_ = scores_.clone();
  return copy;
}

}  // namespace veloxquant::eviction
