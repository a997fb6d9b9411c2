#include "veloxquant/caches/age_tier.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "base/error.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

AgeTier::AgeTier(int bits, int group, int64_t max_rows) : bits_(bits), group_(group), max_rows_(max_rows) {}

int64_t AgeTier::capacity_for(int64_t rows) const {
  const int64_t steps = ((rows + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  if (max_rows_ < 0) return steps;
  return std::max(rows, std::min(steps, max_rows_ + kSlideRows));
}

void AgeTier::allocate(int64_t batch, int64_t heads, int64_t key_dim, int64_t value_dim) {
  batch_ = batch;
  heads_ = heads;
  key_dim_ = key_dim;
  value_dim_ = value_dim;
  key_codec_ = eviction::make_group_affine_codec(static_cast<int>(key_dim), bits_, group_);
  value_codec_ = eviction::make_group_affine_codec(static_cast<int>(value_dim), bits_, group_);
  keys_ = lm::Tensor({batch_, heads_, 0, key_row_bytes()}, lm::DType::U8);
  values_ = lm::Tensor({batch_, heads_, 0, value_row_bytes()}, lm::DType::U8);
  first_ = rows_ = capacity_ = 0;
}

void AgeTier::repack(int64_t capacity) {
  // Copies the live rows [first_, first_ + rows_) of every head to rows [0, rows_) of a buffer of
  // `capacity` rows: one allocation, the old buffer freed — so nbytes() is the new size only.
  lm::Tensor k({batch_, heads_, capacity, key_row_bytes()}, lm::DType::U8);
  lm::Tensor v({batch_, heads_, capacity, value_row_bytes()}, lm::DType::U8);
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      if (rows_ == 0) continue;
      std::memcpy(row_ptr<uint8_t>(k, b, h, 0), row_ptr<uint8_t>(keys_, b, h, first_),
                  static_cast<std::size_t>(rows_ * key_row_bytes()));
      std::memcpy(row_ptr<uint8_t>(v, b, h, 0), row_ptr<uint8_t>(values_, b, h, first_),
                  static_cast<std::size_t>(rows_ * value_row_bytes()));
    }
  }
  keys_ = std::move(k);
  values_ = std::move(v);
  first_ = 0;
  capacity_ = capacity;
}

void AgeTier::reserve_back(int64_t more) {
  if (first_ + rows_ + more <= capacity_) return;
  // The live rows plus the new ones (capacity_for). A bounded tier (recent, mid) settles at one
  // size and from then on only slides; slack the front left behind is reused before anything grows.
  const int64_t capacity = capacity_for(rows_ + more);
  if (capacity == capacity_ && rows_ > 0) {
    // Same size: slide in place (memmove: the ranges overlap when the front moved little).
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < heads_; ++h) {
        std::memmove(row_ptr<uint8_t>(keys_, b, h, 0), row_ptr<uint8_t>(keys_, b, h, first_),
                     static_cast<std::size_t>(rows_ * key_row_bytes()));
        std::memmove(row_ptr<uint8_t>(values_, b, h, 0), row_ptr<uint8_t>(values_, b, h, first_),
                     static_cast<std::size_t>(rows_ * value_row_bytes()));
      }
    }
    first_ = 0;
    return;
  }
  if (capacity == capacity_) {  // nothing live: the front simply restarts at row 0
    first_ = 0;
    return;
  }
  repack(capacity);
}

void AgeTier::encode_back(int64_t b, int64_t h, int64_t i, const float* key, const float* value) {
  const int64_t row = first_ + rows_ + i;
  key_codec_->encode(key, reinterpret_cast<std::byte*>(row_ptr<uint8_t>(keys_, b, h, row)));
  value_codec_->encode(value, reinterpret_cast<std::byte*>(row_ptr<uint8_t>(values_, b, h, row)));
}

void AgeTier::decode_key(int64_t b, int64_t h, int64_t r, float* out) const {
  key_codec_->decode(reinterpret_cast<const std::byte*>(row_ptr<uint8_t>(keys_, b, h, first_ + r)), out);
}

void AgeTier::decode_value(int64_t b, int64_t h, int64_t r, float* out) const {
  value_codec_->decode(reinterpret_cast<const std::byte*>(row_ptr<uint8_t>(values_, b, h, first_ + r)), out);
}

void AgeTier::drop_front(int64_t n) {
  first_ += n;
  rows_ -= n;
  first_position_ += n;
  if (rows_ == 0) first_ = 0;
}

const std::byte* AgeTier::key_rows(int64_t b, int64_t h) const {
  return reinterpret_cast<const std::byte*>(row_ptr<uint8_t>(keys_, b, h, first_));
}

const std::byte* AgeTier::value_rows(int64_t b, int64_t h) const {
  return reinterpret_cast<const std::byte*>(row_ptr<uint8_t>(values_, b, h, first_));
}

std::vector<lm::Tensor> AgeTier::state() const {
  return {keys_.slice(2, first_, first_ + rows_).clone(), values_.slice(2, first_, first_ + rows_).clone()};
}

void AgeTier::restore(const lm::Tensor& keys, const lm::Tensor& values, const char* who) {
  const auto check = [&](const lm::Tensor& t, int64_t row_bytes, const char* what) {
    if (t.ndim() != 4 || t.dtype() != lm::DType::U8 || t.dim(0) != batch_ || t.dim(1) != heads_ ||
        t.dim(3) != row_bytes) {
      throw base::FormatError(std::string(who) + ": " + std::to_string(bits_) + "-bit tier " + what + " " +
                              lm::shape_text(t.shape()) + " do not hold u8 rows of " + std::to_string(row_bytes) +
                              " bytes for " + std::to_string(batch_) + " x " + std::to_string(heads_) + " heads");
    }
  };
  check(keys, key_row_bytes(), "keys");
  check(values, value_row_bytes(), "values");
  if (keys.dim(2) != values.dim(2)) {
    throw base::FormatError(std::string(who) + ": " + std::to_string(bits_) + "-bit tier holds " +
                            std::to_string(keys.dim(2)) + " key rows but " + std::to_string(values.dim(2)) +
                            " value rows");
  }
  const int64_t rows = keys.dim(2);
  const int64_t capacity = capacity_for(rows);
  keys_ = cache_rows::copy_rows(keys, rows, capacity);
  values_ = cache_rows::copy_rows(values, rows, capacity);
  first_ = 0;
  rows_ = rows;
  capacity_ = capacity;
}

AgeTier AgeTier::clone() const {
  AgeTier copy = *this;
  copy.keys_ = keys_.clone();
  copy.values_ = values_.clone();
  return copy;
}

}  // namespace veloxquant
