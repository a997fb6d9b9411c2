#include "veloxquant/caches/quantizer_standalone_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "veloxquant/core/group_quant.h"
#include "veloxquant/errors.h"

namespace veloxquant {
namespace {

int outlier_count(const KVCacheConfig& config, bool two_stream) {
  if (!two_stream) return 0;
  if (!config.n_outlier_channels || *config.n_outlier_channels < 1) {
    throw QuantizerConfigError("enable_outlier_two_stream needs n_outlier_channels >= 1, got " +
                               (config.n_outlier_channels ? std::to_string(*config.n_outlier_channels) : "None"));
  }
  if (*config.n_outlier_channels >= config.head_dim) {
    throw QuantizerConfigError("n_outlier_channels must be < head_dim (" + std::to_string(config.head_dim) + "), got " +
                               std::to_string(*config.n_outlier_channels));
  }
  return *config.n_outlier_channels;
}

std::size_t slot_bytes(const quant::Quantizer& q, int n_outliers) {
  return q.code_bytes() + (n_outliers > 0 ? static_cast<std::size_t>(n_outliers) + 2 : 0);
}

}  // namespace

QuantizerStandaloneCache::QuantizerStandaloneCache(const KVCacheConfig& config,
                                                   std::unique_ptr<quant::Quantizer> quantizer, bool outlier_two_stream)
    : StandaloneCacheBase(config, slot_bytes(*quantizer, outlier_count(config, outlier_two_stream))),
      quantizer_(std::move(quantizer)),
      n_outliers_(outlier_count(config, outlier_two_stream)),
      calib_tokens_(config.n_calib_tokens.value_or(200)) {
  if (n_outliers_ > 0) channel_abs_sum_.assign(static_cast<std::size_t>(dim_), 0.0);
}

void QuantizerStandaloneCache::encode_key(const float* key, int64_t slot) {
  uint8_t* out = key_slot(slot);
  if (n_outliers_ == 0) {
    quantizer_->encode(key, 1, out);
    return;
  }
  uint8_t* outlier_part = out + quantizer_->code_bytes();
  if (outliers_.empty()) {
    // Calibration: encode whole, outlier part all zero (adds nothing to the score).
    quantizer_->encode(key, 1, out);
    std::memset(outlier_part, 0, static_cast<std::size_t>(n_outliers_) + 2);
    for (int c = 0; c < dim_; ++c) channel_abs_sum_[static_cast<std::size_t>(c)] += std::fabs(key[c]);
    if (++observed_ >= calib_tokens_) {
      std::vector<int> order(static_cast<std::size_t>(dim_));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return channel_abs_sum_[static_cast<std::size_t>(a)] > channel_abs_sum_[static_cast<std::size_t>(b)];
      });
      outliers_.assign(order.begin(), order.begin() + n_outliers_);
      std::sort(outliers_.begin(), outliers_.end());
    }
    return;
  }
  std::vector<float> inlier(key, key + dim_), picked(static_cast<std::size_t>(n_outliers_));
  for (int i = 0; i < n_outliers_; ++i) {
    const int c = outliers_[static_cast<std::size_t>(i)];
    picked[static_cast<std::size_t>(i)] = key[c];
    inlier[static_cast<std::size_t>(c)] = 0.0f;
  }
  quantizer_->encode(inlier.data(), 1, out);
  const uint16_t scale = core::quantize_int8_row(picked.data(), picked.size(), reinterpret_cast<int8_t*>(outlier_part));
  std::memcpy(outlier_part + n_outliers_, &scale, 2);
}

void QuantizerStandaloneCache::score_keys(const float* query, const std::vector<SlotRange>& ranges, float* out) const {
  const quant::PreparedQuery prepared = quantizer_->prepare_query(query);  // once per attend
  std::vector<float> picked(static_cast<std::size_t>(n_outliers_));
  for (const SlotRange& range : ranges) {
    if (n_outliers_ == 0) {
      // Plain mode: the slots of a range are back-to-back codes, scored in one call.
      quantizer_->score(prepared, key_slot(range.first), static_cast<std::size_t>(range.count), out);
      out += range.count;
      continue;
    }
    for (int64_t i = 0; i < range.count; ++i) {
      const uint8_t* slot = key_slot(range.first + i);
      float score = 0.0f;
      quantizer_->score(prepared, slot, 1, &score);
      if (!outliers_.empty()) {
        const uint8_t* part = slot + quantizer_->code_bytes();
        uint16_t scale;
        std::memcpy(&scale, part + n_outliers_, 2);
        core::dequantize_int8_row(reinterpret_cast<const int8_t*>(part), picked.size(), scale, picked.data());
        for (int j = 0; j < n_outliers_; ++j) {
          score += query[outliers_[static_cast<std::size_t>(j)]] * picked[static_cast<std::size_t>(j)];
        }
      }
      out[i] = score;
    }
    out += range.count;
  }
}

std::size_t QuantizerStandaloneCache::extra_bytes() const {
  return sizeof(double) * channel_abs_sum_.capacity() + sizeof(int) * outliers_.capacity();
}

std::vector<float> QuantizerStandaloneCache::decode_key(int64_t slot) const {
  std::vector<float> out(static_cast<std::size_t>(dim_));
  quantizer_->decode(key_slot(slot), 1, out.data());
  if (!outliers_.empty()) {
    const uint8_t* part = key_slot(slot) + quantizer_->code_bytes();
    uint16_t scale;
    std::memcpy(&scale, part + n_outliers_, 2);
    std::vector<float> picked(static_cast<std::size_t>(n_outliers_));
    core::dequantize_int8_row(reinterpret_cast<const int8_t*>(part), picked.size(), scale, picked.data());
    for (int j = 0; j < n_outliers_; ++j)
      out[static_cast<std::size_t>(outliers_[static_cast<std::size_t>(j)])] += picked[static_cast<std::size_t>(j)];
  }
  return out;
}

}  // namespace veloxquant
