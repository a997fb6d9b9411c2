#include "veloxquant/caches/turboquant_block_cache.h"

#include <algorithm>
#include <array>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/caches/turboquant_block_rows.h"
#include "veloxquant/caches/turboquant_block_split_rows.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/quant/log8_scale.h"
#include "veloxquant/errors.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {

void check_bits(const char* field, int bits) {
  if (bits < 1 || bits > 8) {
    throw QuantizerConfigError(std::string(field) + " for 'turboquant_block' must lie in [1, 8], got " +
                               std::to_string(bits));
  }
}

int check_head_dim(int head_dim) {
  if (head_dim < 1) {
    throw QuantizerConfigError("head_dim for 'turboquant_block' must be >= 1, got " + std::to_string(head_dim));
  }
  return head_dim;
}

}  // namespace

TurboQuantBlockCache::TurboQuantBlockCache(const Settings& settings)
    : settings_(settings),
      head_dim_(check_head_dim(settings.head_dim)),
      key_bits_((check_bits("key_bits", settings.key_bits), settings.key_bits)),
      value_bits_((check_bits("value_bits", settings.value_bits), settings.value_bits)),
      seed_(settings.seed),
      key_quant_(settings.key_bits, settings.key_block, settings.levels),
      value_quant_(settings.value_bits, settings.value_block, settings.levels) {
  if (settings.mean_rows < 0 || settings.sink_rows < 0) {
    throw QuantizerConfigError("turboquant_block: mean_rows and sink_rows must be >= 0, got " +
                               std::to_string(settings.mean_rows) + " and " + std::to_string(settings.sink_rows));
  }
  if (settings.key_mean_segment < 0) {
    throw QuantizerConfigError("key_mean_segment for 'turboquant_block' must be >= 0, got " +
                               std::to_string(settings.key_mean_segment));
  }
  if (settings.key_mean_segment > 0 && settings.mean_rows <= 0) {
    throw QuantizerConfigError("key_mean_segment for 'turboquant_block' (" + std::to_string(settings.key_mean_segment) +
                               ") needs mean_rows > 0: segments refine the calibrated mean, got mean_rows " +
                               std::to_string(settings.mean_rows));
  }
  if (settings.scale_format != "f16" && settings.scale_format != "log8") {
    throw QuantizerConfigError("scale_format for 'turboquant_block' must be 'f16' or 'log8', got '" +
                               settings.scale_format + "'");
  }
  if (settings.key_split_rank != "product" && settings.key_split_rank != "objective") {
    throw QuantizerConfigError("key_split_rank for 'turboquant_block' must be 'product' or 'objective', got '" +
                               settings.key_split_rank + "'");
  }
  if (settings.sink_format != "f16" && settings.sink_format != "q8") {
    throw QuantizerConfigError("sink_format for 'turboquant_block' must be 'f16' or 'q8', got '" +
                               settings.sink_format + "'");
  }
  log8_ = settings.scale_format == "log8";
  if (!settings.key_split.empty() && !log8_) {
    throw QuantizerConfigError("key_split for 'turboquant_block' ('" + settings.key_split +
                               "') needs scale_format=log8: the split path reads one-byte scales");
  }
  if (settings.key_split.empty() && log8_) {
    throw QuantizerConfigError(
        "scale_format=log8 for 'turboquant_block' needs key_split: only the split path reads one-byte scales");
  }
  if (!settings.key_split.empty()) {
    if (head_dim_ > 1024) {
      throw QuantizerConfigError("key_split for 'turboquant_block' supports head_dim up to 1024, got " +
                                 std::to_string(head_dim_));
    }
    // Groups written for a smaller head scale up to head_dim when they divide it (the q3 preset's
    // 32:4,32:3 is 128:4,128:3 at head_dim 256), so one preset serves every head size.
    std::vector<KeySplitGroup> groups = parse_key_split(settings.key_split);
    int channels = 0;
    for (const KeySplitGroup& g : groups) channels += g.channels;
    if (channels > 0 && channels < head_dim_ && head_dim_ % channels == 0) {
      for (KeySplitGroup& g : groups) g.channels *= head_dim_ / channels;
    }
    split_ = std::make_shared<const SplitKeyCoder>(std::move(groups), head_dim_, static_cast<uint64_t>(seed_));
  }
  key_rotation_ = std::make_shared<const core::Rotation>(head_dim_, static_cast<uint64_t>(seed_));
  build_value_rotation(head_dim_);
}

void TurboQuantBlockCache::observe_queries(const lm::Tensor& queries) {
  if (!wants_queries() || !query_power_.empty()) return;  // the first call's queries only
  if (queries.ndim() != 4 || queries.dim(3) != head_dim_) {
    throw base::InvalidArgument("TurboQuantBlockCache::observe_queries: queries must be [B, H_q, N, " +
                                std::to_string(head_dim_) + "], got " + lm::shape_text(queries.shape()));
  }
  // E[q_c^2] over the call's first 512 rows (the study's calibration: docs/frontier.md).
  const std::vector<float> q = queries.to_f32();
  query_batch_ = queries.dim(0);
  query_heads_ = queries.dim(1);
  const int64_t n = queries.dim(2);
  query_rows_ = std::min<int64_t>(n, 512);
  query_power_.assign(static_cast<std::size_t>(query_batch_ * query_heads_ * head_dim_), 0.0);
  for (int64_t bh = 0; bh < query_batch_ * query_heads_; ++bh) {
    double* out = query_power_.data() + bh * head_dim_;
    for (int64_t t = 0; t < query_rows_; ++t) {
      const float* row = q.data() + (bh * n + t) * head_dim_;
      for (int64_t c = 0; c < head_dim_; ++c) out[c] += static_cast<double>(row[c]) * row[c];
    }
  }
}

void TurboQuantBlockCache::calibrate_split(const std::vector<float>& k, int64_t s) {
  // Weights w_c = E[q_c^2] * E[(k_c - mu_c)^2]: keys on rows [1, 1 + mean_rows) (256 without
  // means; row 0, the sink, is atypical), queries of the head's GQA group as observed (without
  // observed queries, or ones that do not fit the keys' heads, E[q_c^2] = 1: variance only).
  const int64_t calib = settings_.mean_rows > 0 ? settings_.mean_rows : 256;
  const int64_t first = s > 1 ? 1 : 0, last = std::min<int64_t>(s, 1 + calib);
  const bool queries_fit =
      !query_power_.empty() && query_batch_ == batch_ && query_heads_ >= heads_ && query_heads_ % heads_ == 0;
  const int64_t group = queries_fit ? query_heads_ / heads_ : 0;
  key_labels_ = lm::Tensor({batch_, heads_, 1, static_cast<int64_t>(split_->label_bytes())}, lm::DType::U8);
  std::vector<double> weight(static_cast<std::size_t>(head_dim_)), power(weight.size()), variance(weight.size());
  const bool search = settings_.key_split_rank == "objective";
  std::vector<uint8_t> labels(static_cast<std::size_t>(head_dim_));
  for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
    const int64_t b = bh / heads_, h = bh % heads_;
    for (int64_t c = 0; c < head_dim_; ++c) {
      double sum = 0.0, sq = 0.0;
      for (int64_t t = first; t < last; ++t) {
        const double x = k[static_cast<std::size_t>((bh * s + t) * head_dim_ + c)];
        sum += x;
        sq += x * x;
      }
      const double rows = static_cast<double>(std::max<int64_t>(1, last - first));
      const double mean = sum / rows;
      double qp = 1.0;
      if (queries_fit) {
        qp = 0.0;
        for (int64_t g = 0; g < group; ++g) {
          qp += query_power_[static_cast<std::size_t>((b * query_heads_ + h * group + g) * head_dim_ + c)];
        }
      }
      weight[static_cast<std::size_t>(c)] = qp * std::max(0.0, sq / rows - mean * mean);
      power[static_cast<std::size_t>(c)] = qp;
      variance[static_cast<std::size_t>(c)] = std::max(0.0, sq / rows - mean * mean);
    }
    if (search) {
      split_->labels_from_statistics(power.data(), variance.data(), labels.data());
    } else {
      split_->labels_from_weights(weight.data(), labels.data());
    }
    split_->pack_labels(labels.data(), row_ptr<uint8_t>(key_labels_, b, h, 0));
  }
  query_power_.clear();
  rebuild_permutations();
}

void TurboQuantBlockCache::rebuild_permutations() {
  perms_.assign(static_cast<std::size_t>(batch_ * heads_ * head_dim_), 0);
  std::vector<uint8_t> labels(static_cast<std::size_t>(head_dim_));
  for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
    if (!split_->unpack_labels(row_ptr<uint8_t>(key_labels_, bh / heads_, bh % heads_, 0), labels.data())) {
      throw base::FormatError("TurboQuantBlockCache: key_split labels of head " + std::to_string(bh) +
                              " do not match the groups '" + settings_.key_split + "'");
    }
    split_->permutation(labels.data(), perms_.data() + bh * head_dim_);
  }
}

void TurboQuantBlockCache::key_forward(int64_t b, int64_t h, const float* x, float* y) const {
  if (split_) {
    split_->forward(key_permutation(b, h), x, y);
  } else {
    key_rotation_->forward(x, y);
  }
}

void TurboQuantBlockCache::encode_value_row(const float* rotated, int64_t b, int64_t h, int64_t row) {
  const int dv = static_cast<int>(dv_);
  uint8_t* codes = row_ptr<uint8_t>(value_codes_, b, h, row);
  if (!log8_) {
    value_quant_.encode_row(rotated, dv, codes, row_ptr<uint16_t>(value_scales_, b, h, row));
    return;
  }
  std::array<uint8_t, 1024> c{};
  uint8_t* scales = row_ptr<uint8_t>(value_scales_, b, h, row);
  const int block = value_quant_.block_size();
  for (int j0 = 0, blk = 0; j0 < dv; j0 += block, ++blk) {
    scales[blk] = value_quant_.encode_block_log8(rotated + j0, std::min(block, dv - j0), c.data() + j0);
  }
  core::pack_dense(c.data(), static_cast<std::size_t>(dv), value_quant_.bits(), codes);
}

const uint8_t* TurboQuantBlockCache::key_scale_codes(int64_t b, int64_t h, int64_t row) const {
  return row_ptr<uint8_t>(key_scales_, b, h, row);
}
const uint8_t* TurboQuantBlockCache::value_scale_codes(int64_t b, int64_t h, int64_t row) const {
  return row_ptr<uint8_t>(value_scales_, b, h, row);
}

void TurboQuantBlockCache::build_value_rotation(int64_t value_dim) {
  value_rotation_ = std::make_shared<const core::Rotation>(static_cast<int>(value_dim),
                                                           static_cast<uint64_t>(seed_) ^ kValueSeedSalt);
}

std::size_t TurboQuantBlockCache::nbytes() const {
  return key_codes_.storage_bytes() + key_scales_.storage_bytes() + value_codes_.storage_bytes() +
         value_scales_.storage_bytes() + key_mean_.storage_bytes() + value_mean_.storage_bytes() +
         sink_keys_.storage_bytes() + sink_values_.storage_bytes() + key_labels_.storage_bytes();
}

const uint16_t* TurboQuantBlockCache::key_mean(int64_t b, int64_t h, int64_t row) const {
  return key_mean_.defined() ? row_ptr<uint16_t>(key_mean_, b, h, key_segment_of(row)) : nullptr;
}

int64_t TurboQuantBlockCache::key_segment_of(int64_t row) const {
  const int64_t length = settings_.key_mean_segment;
  return length > 0 && row > 0 ? (row - 1) / length : 0;
}

int64_t TurboQuantBlockCache::key_segment_end(int64_t row) const {
  const int64_t length = settings_.key_mean_segment;
  return length > 0 ? 1 + (key_segment_of(row) + 1) * length : std::numeric_limits<int64_t>::max();
}

int64_t TurboQuantBlockCache::key_segments_for(int64_t rows) const {
  return rows > 0 ? key_segment_of(rows - 1) + 1 : 1;
}

void TurboQuantBlockCache::compute_segment_mean(int64_t segment) {
  // Rows of the segment before: [1 + (segment-1) L, 1 + segment L), from row 1 on (row 0, the
  // sink, is not a typical key). Their decoded rotated keys already include that segment's mean.
  const int64_t length = settings_.key_mean_segment;
  const int64_t first = std::max<int64_t>(1, 1 + (segment - 1) * length), end = 1 + segment * length;
  std::vector<float> row(static_cast<std::size_t>(head_dim_));
  std::vector<double> sum(static_cast<std::size_t>(head_dim_));
  for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
    const int64_t b = bh / heads_, h = bh % heads_;
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int64_t r = first; r < end; ++r) {
      decode_rotated_key(b, h, r, row.data());
      for (int64_t e = 0; e < head_dim_; ++e) sum[static_cast<std::size_t>(e)] += row[static_cast<std::size_t>(e)];
    }
    const uint16_t* previous = row_ptr<uint16_t>(key_mean_, b, h, segment - 1);
    uint16_t* out = row_ptr<uint16_t>(key_mean_, b, h, segment);
    for (int64_t e = 0; e < head_dim_; ++e) {
      const double mean = sum[static_cast<std::size_t>(e)] / static_cast<double>(end - first);
      out[e] = base::f32_to_f16(static_cast<float>(mean + base::f16_to_f32(previous[e])));
    }
  }
}

const uint16_t* TurboQuantBlockCache::value_mean(int64_t b, int64_t h) const {
  return value_mean_.defined() ? row_ptr<uint16_t>(value_mean_, b, h, 0) : nullptr;
}

void TurboQuantBlockCache::calibrate_means(const std::vector<float>& k, const std::vector<float>& v, int64_t s) {
  const int64_t last = std::min<int64_t>(s, 1 + static_cast<int64_t>(settings_.mean_rows));
  if (settings_.mean_rows <= 0 || last < 2) return;  // a single row (or smoothing off): mu stays 0
  auto mean_of = [&](const std::vector<float>& x, int64_t d, bool keys, lm::Tensor& stored) {
    std::vector<float> mu(static_cast<std::size_t>(batch_ * heads_ * d), 0.0f);
    for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
      float* out = mu.data() + bh * d;
      for (int64_t e = 0; e < d; ++e) {
        double sum = 0.0;
        for (int64_t t = 1; t < last; ++t) sum += x[static_cast<std::size_t>((bh * s + t) * d + e)];
        out[e] = static_cast<float>(sum / static_cast<double>(last - 1));
      }
      // Kept rotated (Pi mu): codes live in the rotated basis, so encoding subtracts and attention
      // adds it there without rotating it per tile (keys with a split: T_h mu).
      const std::vector<float> plain(out, out + d);
      if (keys) {
        key_forward(bh / heads_, bh % heads_, plain.data(), out);
      } else {
        value_rotation_->forward(plain.data(), out);
      }
    }
    // Stored in f16: encoding subtracts and decoding adds the same rounded values.
    stored = lm::Tensor::from_f32(mu, {batch_, heads_, 1, d}, lm::DType::F16);
  };
  mean_of(k, head_dim_, true, key_mean_);
  if (settings_.value_mean) mean_of(v, dv_, false, value_mean_);
  // One key-mean row per segment of the allocated rows; segment 0 holds the calibrated mean.
  if (settings_.key_mean_segment > 0) key_mean_ = cache_rows::copy_rows(key_mean_, 1, key_segments_for(capacity_));
}

int64_t TurboQuantBlockCache::bytes_per_row() const {
  const auto dv = static_cast<int>(dv_ > 0 ? dv_ : head_dim_);
  const int64_t keys =
      split_ ? split_->code_bytes() + split_->groups() : static_cast<int64_t>(key_quant_.row_bytes(head_dim_));
  const int64_t values = log8_ ? static_cast<int64_t>(value_quant_.code_bytes(dv) + value_quant_.blocks(dv))
                               : static_cast<int64_t>(value_quant_.row_bytes(dv));
  return keys + values;
}

const uint8_t* TurboQuantBlockCache::key_codes(int64_t b, int64_t h, int64_t row) const {
  return row_ptr<uint8_t>(key_codes_, b, h, row);
}
const uint16_t* TurboQuantBlockCache::key_scales(int64_t b, int64_t h, int64_t row) const {
  return row_ptr<uint16_t>(key_scales_, b, h, row);
}
const uint8_t* TurboQuantBlockCache::value_codes(int64_t b, int64_t h, int64_t row) const {
  return row_ptr<uint8_t>(value_codes_, b, h, row);
}
const uint16_t* TurboQuantBlockCache::value_scales(int64_t b, int64_t h, int64_t row) const {
  return row_ptr<uint16_t>(value_scales_, b, h, row);
}

void TurboQuantBlockCache::decode_rotated_key(int64_t b, int64_t h, int64_t row, float* out) const {
  if (split_) {
    split_->decode(key_codes(b, h, row), key_scale_codes(b, h, row), out);
    return;
  }
  key_quant_.decode_row(key_codes(b, h, row), key_scales(b, h, row), head_dim_, out);
}

void TurboQuantBlockCache::decode_rotated_value(int64_t b, int64_t h, int64_t row, float* out) const {
  if (log8_) {
    const auto dv = static_cast<std::size_t>(dv_);
    std::array<uint8_t, 1024> c{};
    core::unpack_dense(value_codes(b, h, row), dv, value_quant_.bits(), c.data());
    const uint8_t* scales = value_scale_codes(b, h, row);
    const std::vector<float>& lv = value_quant_.levels();
    const auto block = static_cast<std::size_t>(value_quant_.block_size());
    // One scale lookup per block, not per element (prefill decodes every row of its tiles here:
    // the per-element call was 8% of q3's prefill under perf).
    for (std::size_t e0 = 0; e0 < dv; e0 += block) {
      const float s = quant::log8_scale(scales[e0 / block]);
      for (std::size_t e = e0; e < std::min(dv, e0 + block); ++e) out[e] = s * lv[c[e]];
    }
    return;
  }
  value_quant_.decode_row(value_codes(b, h, row), value_scales(b, h, row), static_cast<int>(dv_), out);
}

void TurboQuantBlockCache::decode_key(int64_t b, int64_t h, int64_t row, float* out, float* scratch) const {
  if (row < sink_rows_held()) {
    load_sink(true, b, h, row, out, scratch);
    return;
  }
  decode_rotated_key(b, h, row, scratch);
  if (const uint16_t* mu = key_mean(b, h, row)) {
    for (int64_t e = 0; e < head_dim_; ++e) scratch[e] += base::f16_to_f32(mu[e]);
  }
  if (split_) {
    split_->inverse(key_permutation(b, h), scratch, out);
    return;
  }
  key_rotation_->inverse(scratch, out);
}

void TurboQuantBlockCache::decode_value(int64_t b, int64_t h, int64_t row, float* out, float* scratch) const {
  if (row < sink_rows_held() && sink_values_.defined()) {
    load_sink(false, b, h, row, out, scratch);
    return;
  }
  decode_rotated_value(b, h, row, scratch);
  if (const uint16_t* mu = value_mean(b, h)) {
    for (int64_t e = 0; e < dv_; ++e) scratch[e] += base::f16_to_f32(mu[e]);
  }
  value_rotation_->inverse(scratch, out);
}

int64_t TurboQuantBlockCache::sink_row_bytes(int64_t dim) const {
  return settings_.sink_format == "q8" ? static_cast<int64_t>(sink_quant_.row_bytes(static_cast<int>(dim))) : 2 * dim;
}

void TurboQuantBlockCache::store_sink(bool key, int64_t b, int64_t h, int64_t row, const float* x) {
  const int64_t dim = key ? head_dim_ : dv_;
  lm::Tensor& t = key ? sink_keys_ : sink_values_;
  if (settings_.sink_format != "q8") {
    cache_rows::store_f32(x, static_cast<std::size_t>(dim),
                          reinterpret_cast<std::byte*>(row_ptr<uint16_t>(t, b, h, row)), lm::DType::F16);
    return;
  }
  // Rotated first (the sink's outlier channels spread over the block), 8-bit codes, then the
  // block scales' f16 bits after the codes.
  std::array<float, 1024> rotated;
  std::array<uint16_t, 64> scales;
  if (key) {
    key_forward(b, h, x, rotated.data());
  } else {
    value_rotation_->forward(x, rotated.data());
  }
  uint8_t* out = row_ptr<uint8_t>(t, b, h, row);
  const auto d = static_cast<int>(dim);
  sink_quant_.encode_row(rotated.data(), d, out, scales.data());
  std::memcpy(out + sink_quant_.code_bytes(d), scales.data(), 2 * sink_quant_.blocks(d));
}

void TurboQuantBlockCache::load_sink(bool key, int64_t b, int64_t h, int64_t row, float* out, float* scratch) const {
  const int64_t dim = key ? head_dim_ : dv_;
  const lm::Tensor& t = key ? sink_keys_ : sink_values_;
  if (settings_.sink_format != "q8") {
    cache_rows::load_f32(reinterpret_cast<const std::byte*>(row_ptr<uint16_t>(t, b, h, row)), lm::DType::F16,
                         static_cast<std::size_t>(dim), out);
    return;
  }
  const uint8_t* in = row_ptr<uint8_t>(t, b, h, row);
  const auto d = static_cast<int>(dim);
  std::array<uint16_t, 64> scales;
  std::memcpy(scales.data(), in + sink_quant_.code_bytes(d), 2 * sink_quant_.blocks(d));
  sink_quant_.decode_row(in, scales.data(), d, scratch);
  if (!key) {
    value_rotation_->inverse(scratch, out);
  } else if (split_) {
    split_->inverse(key_permutation(b, h), scratch, out);
  } else {
    key_rotation_->inverse(scratch, out);
  }
}

// Reallocates every buffer to `capacity` rows keeping the first `keep` (mlx_lm's growth).
void TurboQuantBlockCache::allocate_rows(int64_t capacity, int64_t keep) {
  key_codes_ = cache_rows::copy_rows(key_codes_, keep, capacity);
  key_scales_ = cache_rows::copy_rows(key_scales_, keep, capacity);
  value_codes_ = cache_rows::copy_rows(value_codes_, keep, capacity);
  value_scales_ = cache_rows::copy_rows(value_scales_, keep, capacity);
  if (key_mean_.defined() && settings_.key_mean_segment > 0) {
    key_mean_ = cache_rows::copy_rows(key_mean_, key_segments_for(keep), key_segments_for(capacity));
  }
  capacity_ = capacity;
}

void TurboQuantBlockCache::ensure_capacity(const lm::Tensor& keys, const lm::Tensor& values) {
  if (!key_codes_.defined()) {
    batch_ = keys.dim(0);
    heads_ = keys.dim(1);
    dv_ = values.dim(3);
    if (dv_ != value_rotation_->dim()) build_value_rotation(dv_);
    const auto kd = static_cast<int>(head_dim_), vd = static_cast<int>(dv_);
    if (log8_ && vd > 1024) {
      throw base::InvalidArgument("TurboQuantBlockCache: scale_format=log8 supports value head_dim up to 1024, got " +
                                  std::to_string(vd));
    }
    const lm::DType scale_type = log8_ ? lm::DType::U8 : lm::DType::F16;
    key_codes_ =
        lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(split_ ? split_->code_bytes() : key_quant_.code_bytes(kd))},
                   lm::DType::U8);
    key_scales_ = lm::Tensor(
        {batch_, heads_, 0, static_cast<int64_t>(split_ ? split_->groups() : key_quant_.blocks(kd))}, scale_type);
    value_codes_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(value_quant_.code_bytes(vd))}, lm::DType::U8);
    value_scales_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(value_quant_.blocks(vd))}, scale_type);
    if (settings_.sink_rows > 0) {
      if (settings_.sink_format == "q8" && (head_dim_ > 1024 || dv_ > 1024)) {
        throw base::InvalidArgument("TurboQuantBlockCache: sink_format=q8 supports head dims up to 1024, got " +
                                    std::to_string(std::max<int64_t>(head_dim_, dv_)));
      }
      const bool f16 = settings_.sink_format != "q8";
      const lm::DType type = f16 ? lm::DType::F16 : lm::DType::U8;
      sink_keys_ = lm::Tensor({batch_, heads_, settings_.sink_rows, f16 ? head_dim_ : sink_row_bytes(head_dim_)}, type);
      if (settings_.sink_values) {
        sink_values_ = lm::Tensor({batch_, heads_, settings_.sink_rows, f16 ? dv_ : sink_row_bytes(dv_)}, type);
      }
    }
    capacity_ = 0;
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, head_dim_, dv_},
                                 "TurboQuantBlockCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2);
  if (offset_ + s > capacity_) {
    // mlx_lm's rule, as the other caches: keep offset rows, append ceil(s / 256) steps.
    const int64_t steps = (s + kGrowthStep - 1) / kGrowthStep;
    allocate_rows(offset_ + steps * kGrowthStep, offset_);
  }
}

void TurboQuantBlockCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "TurboQuantBlockCache::update_and_fetch");
  if (keys.dim(3) != head_dim_) {
    throw base::InvalidArgument("TurboQuantBlockCache: keys have head_dim " + std::to_string(keys.dim(3)) +
                                ", the cache was built for " + std::to_string(head_dim_));
  }
  ensure_capacity(keys, values);
  const int64_t s = keys.dim(2);
  // Widened into this thread's grow-only buffers: a decode step allocates nothing.
  thread_local std::vector<float> k, v;
  cache_rows::widen_to_f32(keys, k);
  cache_rows::widen_to_f32(values, v);
  if (offset_ == 0 && split_ && !key_labels_.defined()) calibrate_split(k, s);
  if (offset_ == 0 && !key_mean_.defined()) calibrate_means(k, v, s);
  // Rows are independent within a key-mean segment: encode each segment's rows in parallel;
  // a segment's mean is computed from the segment before once that one is stored.
  for (int64_t t0 = 0; t0 < s;) {
    const int64_t row = offset_ + t0;
    const int64_t t1 = std::min(s, key_segment_end(row) - offset_);
    if (key_mean_.defined() && settings_.key_mean_segment > 0 && row > 1 &&
        (row - 1) % settings_.key_mean_segment == 0) {
      compute_segment_mean(key_segment_of(row));
    }
    encode_rows(k, v, s, t0, t1);
    t0 = t1;
  }
  // Sink rows: the positions below sink_rows of this call, kept exactly (f16).
  for (int64_t t = 0; offset_ + t < settings_.sink_rows && t < s; ++t) {
    for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
      const int64_t b = bh / heads_, h = bh % heads_;
      store_sink(true, b, h, offset_ + t, k.data() + (bh * s + t) * head_dim_);
      if (sink_values_.defined()) store_sink(false, b, h, offset_ + t, v.data() + (bh * s + t) * dv_);
    }
  }
  offset_ += s;
}

void TurboQuantBlockCache::encode_rows(const std::vector<float>& k, const std::vector<float>& v, int64_t s, int64_t t0,
                                       int64_t t1) {
  const int64_t n = t1 - t0;
  base::ThreadPool::global().parallel_for(batch_ * heads_ * n, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> rotated;
    rotated.resize(static_cast<std::size_t>(std::max<int64_t>(head_dim_, dv_)));
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / n, t = t0 + task % n;
      const int64_t b = bh / heads_, h = bh % heads_, row = offset_ + t;
      const float* key = k.data() + (bh * s + t) * head_dim_;
      const float* value = v.data() + (bh * s + t) * dv_;
      // Rotated, then the rotated mean subtracted: Pi (k - mu) = Pi k - Pi mu.
      key_forward(b, h, key, rotated.data());
      if (const uint16_t* mu = key_mean(b, h, row)) {
        for (int64_t e = 0; e < head_dim_; ++e) rotated[static_cast<std::size_t>(e)] -= base::f16_to_f32(mu[e]);
      }
      if (split_) {
        split_->encode(rotated.data(), row_ptr<uint8_t>(key_codes_, b, h, row),
                       row_ptr<uint8_t>(key_scales_, b, h, row));
      } else {
        key_quant_.encode_row(rotated.data(), head_dim_, row_ptr<uint8_t>(key_codes_, b, h, row),
                              row_ptr<uint16_t>(key_scales_, b, h, row));
      }
      value_rotation_->forward(value, rotated.data());
      if (const uint16_t* mu = value_mean(b, h)) {
        for (int64_t e = 0; e < dv_; ++e) rotated[static_cast<std::size_t>(e)] -= base::f16_to_f32(mu[e]);
      }
      encode_value_row(rotated.data(), b, h, row);
    }
  });
}

lm::KeysValues TurboQuantBlockCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

lm::KeysValues TurboQuantBlockCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, head_dim_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  const auto k_elem = static_cast<int64_t>(k.element_size()), v_elem = static_cast<int64_t>(v.element_size());
  base::ThreadPool::global().parallel_for(batch_ * heads_ * offset_, [&](int64_t begin, int64_t end) {
    std::vector<float> scratch(static_cast<std::size_t>(std::max<int64_t>(head_dim_, dv_)));
    std::vector<float> row(scratch.size());
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / offset_, r = task % offset_;
      const int64_t b = bh / heads_, h = bh % heads_;
      decode_key(b, h, r, row.data(), scratch.data());
      cache_rows::store_f32(row.data(), static_cast<std::size_t>(head_dim_), k.raw_data() + task * head_dim_ * k_elem,
                            dtype);
      decode_value(b, h, r, row.data(), scratch.data());
      cache_rows::store_f32(row.data(), static_cast<std::size_t>(dv_), v.raw_data() + task * dv_ * v_elem, dtype);
    }
  });
  return {std::move(k), std::move(v)};
}

void TurboQuantBlockCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("TurboQuantBlockCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;  // position of the first new token
  store(*request.keys, *request.values);
  attention::check_fused_shapes("TurboQuantBlockCache::fused_attention", q, *request.keys, batch_, heads_, head_dim_,
                                dv_, out);
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  if (split_) {
    const TurboQuantBlockSplitRows rows(*this, offset_);
    attention::attend(call, rows, attention::request_pool(request));
    return;
  }
  const TurboQuantBlockRows rows(*this, offset_);
  attention::attend(call, rows, attention::request_pool(request));
}

int64_t TurboQuantBlockCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("TurboQuantBlockCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset_);
  offset_ -= removed;  // rows are encoded independently: the kept ones are exactly a fresh cache's
  if (offset_ == 0) {
    // Nothing left: the next call calibrates again, as a fresh cache's first call would.
    key_mean_ = value_mean_ = lm::Tensor();
    key_labels_ = lm::Tensor();  // the split calibrates again too
    query_power_.clear();
  }
  return removed;
}

std::vector<lm::Tensor> TurboQuantBlockCache::state() const {
  if (!key_codes_.defined() || offset_ == 0) return {};
  std::vector<lm::Tensor> out = {key_codes_.slice(2, 0, offset_), key_scales_.slice(2, 0, offset_),
                                 value_codes_.slice(2, 0, offset_), value_scales_.slice(2, 0, offset_)};
  // Optional parts, in this order, each present iff its meta says so: means, sink rows.
  if (key_mean_.defined()) {
    out.push_back(key_mean_.slice(2, 0, key_segments_for(offset_)));
    if (value_mean_.defined()) out.push_back(value_mean_);
  }
  if (sink_keys_.defined()) {
    out.push_back(sink_keys_.slice(2, 0, sink_rows_held()));
    if (sink_values_.defined()) out.push_back(sink_values_.slice(2, 0, sink_rows_held()));
  }
  if (key_labels_.defined()) out.push_back(key_labels_);
  return out;
}

std::vector<std::string> TurboQuantBlockCache::meta_state() const {
  return {std::to_string(head_dim_),
          std::to_string(key_bits_),
          std::to_string(value_bits_),
          std::to_string(seed_),
          std::to_string(offset_),
          std::to_string(dv_),
          std::to_string(settings_.mean_rows),
          std::to_string(settings_.key_block),
          std::to_string(settings_.value_block),
          std::to_string(settings_.sink_rows),
          quant::block_levels_name(settings_.levels),
          key_mean_.defined() ? "calibrated" : "uncalibrated",
          std::to_string(settings_.key_mean_segment),
          settings_.key_split.empty() ? "-" : settings_.key_split,
          settings_.scale_format,
          settings_.key_split_rank,
          settings_.value_mean ? "1" : "0",
          settings_.sink_values ? "1" : "0",
          settings_.sink_format};
}

namespace {
// The meta entries written since key_split existed (15 entries: key_split, scale_format; 19: also
// key_split_rank, value_mean, sink_values, sink_format) into `settings`; older states keep the
// defaults.
void read_split_and_sink_meta(const std::vector<std::string>& meta, const char* who,
                              TurboQuantBlockCache::Settings& settings) {
  if (meta.size() >= 15) {
    settings.key_split = meta[13] == "-" ? "" : meta[13];
    settings.scale_format = meta[14];
  }
  if (meta.size() == 19) {
    settings.key_split_rank = meta[15];
    for (const auto& [field, at] : {std::pair{"value_mean", 16}, std::pair{"sink_values", 17}}) {
      if (meta[static_cast<std::size_t>(at)] != "0" && meta[static_cast<std::size_t>(at)] != "1") {
        throw base::FormatError(std::string(who) + ": " + field + " must be 0 or 1, got '" +
                                meta[static_cast<std::size_t>(at)] + "'");
      }
    }
    settings.value_mean = meta[16] == "1";
    settings.sink_values = meta[17] == "1";
    settings.sink_format = meta[18];
  }
}
}  // namespace

void TurboQuantBlockCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "TurboQuantBlockCache::from_state";
  // 13 entries; 12 (no key_mean_segment) as written before segments existed; 11 (no levels
  // either: Lloyd-Max) before `levels` existed.
  // 15 entries; 13 before key_split / scale_format existed.
  // 19 entries; 15 before key_split_rank, value_mean, sink_values, sink_format existed.
  const std::size_t n_meta = meta.size();
  if (n_meta < 11 || n_meta > 19 || n_meta == 14 || (n_meta > 15 && n_meta < 19)) {
    throw base::FormatError(std::string(who) + ": expected 19 meta entries (head_dim, key_bits, value_bits, seed, " +
                            "offset, value_dim, mean_rows, key_block, value_block, sink_rows, levels, means, " +
                            "key_mean_segment, key_split, scale_format, key_split_rank, value_mean, sink_values, " +
                            "sink_format), got " + std::to_string(n_meta));
  }
  const std::string& means = meta.size() == 11 ? meta[10] : meta[11];
  Settings settings;
  settings.head_dim = static_cast<int>(cache_rows::parse_meta_int(meta[0], who, "head_dim"));
  settings.key_bits = static_cast<int>(cache_rows::parse_meta_int(meta[1], who, "key_bits"));
  settings.value_bits = static_cast<int>(cache_rows::parse_meta_int(meta[2], who, "value_bits"));
  settings.seed = cache_rows::parse_meta_int(meta[3], who, "seed");
  const int64_t offset = cache_rows::parse_meta_int(meta[4], who, "offset");
  const int64_t value_dim = cache_rows::parse_meta_int(meta[5], who, "value_dim");
  settings.mean_rows = static_cast<int>(cache_rows::parse_meta_int(meta[6], who, "mean_rows"));
  settings.key_block = static_cast<int>(cache_rows::parse_meta_int(meta[7], who, "key_block"));
  settings.value_block = static_cast<int>(cache_rows::parse_meta_int(meta[8], who, "value_block"));
  settings.sink_rows = static_cast<int>(cache_rows::parse_meta_int(meta[9], who, "sink_rows"));
  if (meta.size() >= 12) {
    if (meta[10] != "lloyd" && meta[10] != "uniform") {
      throw base::FormatError(std::string(who) + ": levels must be 'lloyd' or 'uniform', got '" + meta[10] + "'");
    }
    settings.levels = quant::parse_block_levels(meta[10]);
  }
  if (means != "calibrated" && means != "uncalibrated") {
    throw base::FormatError(std::string(who) + ": means must be 'calibrated' or 'uncalibrated', got '" + means + "'");
  }
  const bool has_means = means == "calibrated";
  if (meta.size() >= 13) {
    settings.key_mean_segment = static_cast<int>(cache_rows::parse_meta_int(meta[12], who, "key_mean_segment"));
  }
  read_split_and_sink_meta(meta, who, settings);
  const int head_dim = settings.head_dim;
  std::optional<TurboQuantBlockCache> made;
  try {
    made.emplace(settings);
  } catch (const QuantizerConfigError& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  TurboQuantBlockCache& rebuilt = *made;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[4]);
    *this = std::move(rebuilt);
    return;
  }
  const int64_t sinks = std::min<int64_t>(offset, settings.sink_rows);
  const bool split = !settings.key_split.empty();
  const std::size_t expected = 4 + (has_means ? (settings.value_mean ? 2 : 1) : 0) +
                               (settings.sink_rows > 0 ? (settings.sink_values ? 2 : 1) : 0) + (split ? 1 : 0);
  if (state.size() != expected) {
    throw base::FormatError(std::string(who) + ": expected " + std::to_string(expected) + " tensors, got " +
                            std::to_string(state.size()));
  }
  if (value_dim < 1) throw base::FormatError(std::string(who) + ": value_dim must be >= 1, got " + meta[5]);
  const auto vd = static_cast<int>(value_dim);
  const int64_t widths[4] = {
      static_cast<int64_t>(split ? rebuilt.split_->code_bytes() : rebuilt.key_quant_.code_bytes(head_dim)),
      static_cast<int64_t>(split ? rebuilt.split_->groups() : rebuilt.key_quant_.blocks(head_dim)),
      static_cast<int64_t>(rebuilt.value_quant_.code_bytes(vd)), static_cast<int64_t>(rebuilt.value_quant_.blocks(vd))};
  const lm::DType scale_type = rebuilt.log8_ ? lm::DType::U8 : lm::DType::F16;
  const lm::DType dtypes[4] = {lm::DType::U8, scale_type, lm::DType::U8, scale_type};
  for (std::size_t i = 0; i < 4; ++i) {
    const lm::Tensor& t = state[i];
    if (t.ndim() != 4 || t.dim(2) != offset || t.dim(3) != widths[i] || t.dtype() != dtypes[i] ||
        t.dim(0) != state[0].dim(0) || t.dim(1) != state[0].dim(1)) {
      throw base::FormatError(std::string(who) + ": tensor " + std::to_string(i) + " " + lm::shape_text(t.shape()) +
                              " does not hold " + meta[4] + " rows of head_dim " + meta[0] + " / value_dim " + meta[5] +
                              " at key_bits " + meta[1] + ", value_bits " + meta[2]);
    }
  }
  rebuilt.batch_ = state[0].dim(0);
  rebuilt.heads_ = state[0].dim(1);
  rebuilt.dv_ = value_dim;
  if (value_dim != rebuilt.value_rotation_->dim()) rebuilt.build_value_rotation(value_dim);
  rebuilt.key_codes_ = cache_rows::copy_rows(state[0], offset, offset);
  rebuilt.key_scales_ = cache_rows::copy_rows(state[1], offset, offset);
  rebuilt.value_codes_ = cache_rows::copy_rows(state[2], offset, offset);
  rebuilt.value_scales_ = cache_rows::copy_rows(state[3], offset, offset);
  std::size_t next = 4;
  if (has_means) {
    const lm::Tensor& km = state[next];
    const int64_t segments = rebuilt.key_segments_for(offset);
    if (km.dtype() != lm::DType::F16 || km.shape() != lm::Shape{rebuilt.batch_, rebuilt.heads_, segments, head_dim}) {
      throw base::FormatError(std::string(who) + ": key means " + lm::shape_text(km.shape()) +
                              " do not match head_dim " + meta[0]);
    }
    rebuilt.key_mean_ = cache_rows::copy_rows(km, segments, segments);
    ++next;
    if (settings.value_mean) {
      const lm::Tensor& vm = state[next];
      if (vm.dtype() != lm::DType::F16 || vm.shape() != lm::Shape{rebuilt.batch_, rebuilt.heads_, 1, value_dim}) {
        throw base::FormatError(std::string(who) + ": value means " + lm::shape_text(vm.shape()) +
                                " do not match value_dim " + meta[5]);
      }
      rebuilt.value_mean_ = vm.clone();
      ++next;
    }
  }
  if (settings.sink_rows > 0) {
    const bool f16 = settings.sink_format != "q8";
    const lm::DType type = f16 ? lm::DType::F16 : lm::DType::U8;
    const auto check = [&](const lm::Tensor& t, int64_t dim, const char* what) {
      const int64_t width = f16 ? dim : rebuilt.sink_row_bytes(dim);
      if (t.dtype() != type || t.shape() != lm::Shape{rebuilt.batch_, rebuilt.heads_, sinks, width}) {
        throw base::FormatError(std::string(who) + ": sink " + what + " " + lm::shape_text(t.shape()) +
                                " do not hold " + std::to_string(sinks) + " rows in " + settings.sink_format);
      }
    };
    check(state[next], head_dim, "keys");
    rebuilt.sink_keys_ = cache_rows::copy_rows(state[next], sinks, settings.sink_rows);
    ++next;
    if (settings.sink_values) {
      check(state[next], value_dim, "values");
      rebuilt.sink_values_ = cache_rows::copy_rows(state[next], sinks, settings.sink_rows);
      ++next;
    }
  }
  if (split) {
    const lm::Tensor& labels = state[next];
    if (labels.dtype() != lm::DType::U8 ||
        labels.shape() != lm::Shape{rebuilt.batch_, rebuilt.heads_, 1, rebuilt.split_->label_bytes()}) {
      throw base::FormatError(std::string(who) + ": key_split labels " + lm::shape_text(labels.shape()) +
                              " do not match head_dim " + meta[0]);
    }
    rebuilt.key_labels_ = labels.clone();
    rebuilt.rebuild_permutations();
  }
  rebuilt.capacity_ = offset;
  rebuilt.offset_ = offset;
  *this = std::move(rebuilt);
}

std::shared_ptr<lm::KVCache> TurboQuantBlockCache::clone() const {
  auto copy = std::make_shared<TurboQuantBlockCache>(*this);
  copy->key_codes_ = key_codes_.clone();
  copy->key_scales_ = key_scales_.clone();
  copy->value_codes_ = value_codes_.clone();
  copy->value_scales_ = value_scales_.clone();
  copy->key_mean_ = key_mean_.clone();
  copy->value_mean_ = value_mean_.clone();
  copy->sink_keys_ = sink_keys_.clone();
  copy->sink_values_ = sink_values_.clone();
  copy->key_labels_ = key_labels_.clone();
  return copy;
}

std::shared_ptr<lm::KVCache> make_turboquant_block_cache(const KVCacheConfig& config) {
  const int bits = config.bit_width_inlier.scalar();
  const TurboQuantBlockOptions& o = config.turboquant_block;
  TurboQuantBlockCache::Settings settings;
  settings.head_dim = config.head_dim;
  // Per-layer lists were resolved by for_model; a single cache takes ints (validate_for_create).
  settings.key_bits = o.key_bits.scalar() != 0 ? o.key_bits.scalar() : bits;
  settings.value_bits = o.value_bits.scalar() != 0 ? o.value_bits.scalar() : bits;
  settings.seed = config.seed;
  settings.mean_rows = o.mean_rows;
  settings.key_block = o.key_block;
  settings.value_block = o.value_block;
  settings.sink_rows = o.sink_rows;
  settings.key_mean_segment = o.key_mean_segment;
  settings.levels = quant::parse_block_levels(o.levels);
  settings.key_split = o.key_split;
  settings.scale_format = o.scale_format;
  settings.key_split_rank = o.key_split_rank;
  settings.value_mean = o.value_mean != 0;
  settings.sink_values = o.sink_values != 0;
  settings.sink_format = o.sink_format;
  return std::make_shared<TurboQuantBlockCache>(settings);
}

}  // namespace veloxquant
