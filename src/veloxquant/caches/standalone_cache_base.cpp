#include "veloxquant/caches/standalone_cache_base.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/errors.h"

namespace veloxquant {

StandaloneCacheBase::StandaloneCacheBase(const KVCacheConfig& config, std::size_t key_bytes_per_token)
    : dim_(config.head_dim),
      config_(config),
      method_(config.method),
      key_bytes_(key_bytes_per_token),
      capacity_(config.capacity.value_or(kDefaultCapacity)) {
  if (dim_ < 1) throw QuantizerConfigError("head_dim must be >= 1, got " + std::to_string(dim_));
  if (capacity_ < 1) throw QuantizerConfigError("capacity must be >= 1, got " + std::to_string(capacity_));
  if (config.sliding_window) capacity_ = std::min(capacity_, *config.sliding_window);
}

void StandaloneCacheBase::check_length(std::span<const float> v, const char* what) const {
  if (static_cast<int>(v.size()) != dim_) {
    throw base::InvalidArgument(method_ + ": " + what + " has " + std::to_string(v.size()) + " elements, head_dim is " +
                                std::to_string(dim_));
  }
}

void StandaloneCacheBase::ensure_slots(int64_t slot) {
  if (slot < allocated_slots_) return;
  const int64_t grown = std::min(capacity_, ((slot / kGrowthStep) + 1) * kGrowthStep);
  keys_.resize(static_cast<std::size_t>(grown) * key_bytes_);
  values_.resize(static_cast<std::size_t>(grown) * (static_cast<std::size_t>(dim_) + 2));
  allocated_slots_ = grown;
}

void StandaloneCacheBase::append_key(std::span<const float> key) {
  check_length(key, "key");
  if (n_keys_ - n_values_ >= capacity_) {
    throw base::InvalidArgument(method_ + ": keys ran " + std::to_string(n_keys_ - n_values_) +
                                " tokens ahead of values, past the capacity " + std::to_string(capacity_));
  }
  const int64_t slot = n_keys_ % capacity_;
  ensure_slots(slot);
  encode_key(key.data(), slot);
  ++n_keys_;
}

void StandaloneCacheBase::append_value(std::span<const float> value) {
  check_length(value, "value");
  if (n_values_ - n_keys_ >= capacity_) {
    throw base::InvalidArgument(method_ + ": values ran past keys by more than the capacity " +
                                std::to_string(capacity_));
  }
  const int64_t slot = n_values_ % capacity_;
  ensure_slots(slot);
  auto* codes = reinterpret_cast<int8_t*>(values_.data() + slot * (dim_ + 2));
  const uint16_t scale16 = core::quantize_int8_row(value.data(), static_cast<std::size_t>(dim_), codes);
  std::memcpy(codes + dim_, &scale16, sizeof scale16);
  ++n_values_;
}

void StandaloneCacheBase::decode_value(int64_t slot, float* out) const {
  const auto* codes = reinterpret_cast<const int8_t*>(values_.data() + slot * (dim_ + 2));
  uint16_t scale16;
  std::memcpy(&scale16, codes + dim_, sizeof scale16);
  core::dequantize_int8_row(codes, static_cast<std::size_t>(dim_), scale16, out);
}

std::size_t StandaloneCacheBase::size() const {
  return static_cast<std::size_t>(std::min(std::min(n_keys_, n_values_), capacity_));
}

std::vector<float> StandaloneCacheBase::attend(std::span<const float> query) const {
  check_length(query, "query");
  std::vector<float> out(static_cast<std::size_t>(dim_), 0.0f);
  const int64_t complete = std::min(n_keys_, n_values_);
  const int64_t n = std::min(complete, capacity_);
  if (n == 0) return out;
  // The live tokens are [complete - n, complete); token t sits in slot t % capacity, so the
  // oldest live slot is first_slot and the ring wraps at most once.
  const int64_t first_slot = (complete - n) % capacity_;
  std::vector<SlotRange> ranges = {{first_slot, std::min(n, capacity_ - first_slot)}};
  if (ranges[0].count < n) ranges.push_back({0, n - ranges[0].count});
  std::vector<float> scores(static_cast<std::size_t>(n));
  score_keys(query.data(), ranges, scores.data());
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(dim_));
  float max_score = -INFINITY;
  for (float& s : scores) {
    s *= inv_sqrt_d;
    max_score = std::max(max_score, s);
  }
  double total = 0.0;
  std::vector<float> value(static_cast<std::size_t>(dim_));
  for (int64_t i = 0; i < n; ++i) {
    const float w = std::exp(scores[static_cast<std::size_t>(i)] - max_score);
    total += w;
    decode_value((complete - n + i) % capacity_, value.data());
    for (int d = 0; d < dim_; ++d) out[static_cast<std::size_t>(d)] += w * value[static_cast<std::size_t>(d)];
  }
  for (float& o : out) o = static_cast<float>(o / total);
  return out;
}

std::size_t StandaloneCacheBase::memory_bytes() const { return keys_.size() + values_.size() + extra_bytes(); }

void StandaloneCacheBase::reset() {
  keys_ = base::AlignedBuffer();
  values_ = base::AlignedBuffer();
  allocated_slots_ = 0;
  n_keys_ = 0;
  n_values_ = 0;
}

}  // namespace veloxquant
