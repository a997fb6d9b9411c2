#include "veloxquant/caches/turboquant_block_cache.h"

#include <algorithm>
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
  key_rotation_ = std::make_shared<const core::Rotation>(head_dim_, static_cast<uint64_t>(seed_));
  build_value_rotation(head_dim_);
}

void TurboQuantBlockCache::build_value_rotation(int64_t value_dim) {
  value_rotation_ = std::make_shared<const core::Rotation>(static_cast<int>(value_dim),
                                                           static_cast<uint64_t>(seed_) ^ kValueSeedSalt);
}

std::size_t TurboQuantBlockCache::nbytes() const {
  return key_codes_.storage_bytes() + key_scales_.storage_bytes() + value_codes_.storage_bytes() +
         value_scales_.storage_bytes() + key_mean_.storage_bytes() + value_mean_.storage_bytes() +
         sink_keys_.storage_bytes() + sink_values_.storage_bytes();
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
  auto mean_of = [&](const std::vector<float>& x, int64_t d, const core::Rotation& rotation, lm::Tensor& stored) {
    std::vector<float> mu(static_cast<std::size_t>(batch_ * heads_ * d), 0.0f);
    for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
      float* out = mu.data() + bh * d;
      for (int64_t e = 0; e < d; ++e) {
        double sum = 0.0;
        for (int64_t t = 1; t < last; ++t) sum += x[static_cast<std::size_t>((bh * s + t) * d + e)];
        out[e] = static_cast<float>(sum / static_cast<double>(last - 1));
      }
      // Kept rotated (Pi mu): codes live in the rotated basis, so encoding subtracts and attention
      // adds it there without rotating it per tile.
      rotation.forward(out, out);
    }
    // Stored in f16: encoding subtracts and decoding adds the same rounded values.
    stored = lm::Tensor::from_f32(mu, {batch_, heads_, 1, d}, lm::DType::F16);
  };
  mean_of(k, head_dim_, *key_rotation_, key_mean_);
  mean_of(v, dv_, *value_rotation_, value_mean_);
  // One key-mean row per segment of the allocated rows; segment 0 holds the calibrated mean.
  if (settings_.key_mean_segment > 0) key_mean_ = cache_rows::copy_rows(key_mean_, 1, key_segments_for(capacity_));
}

int64_t TurboQuantBlockCache::bytes_per_row() const {
  const int64_t dv = dv_ > 0 ? dv_ : head_dim_;
  return static_cast<int64_t>(key_quant_.row_bytes(head_dim_) + value_quant_.row_bytes(static_cast<int>(dv)));
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
  key_quant_.decode_row(key_codes(b, h, row), key_scales(b, h, row), head_dim_, out);
}

void TurboQuantBlockCache::decode_rotated_value(int64_t b, int64_t h, int64_t row, float* out) const {
  value_quant_.decode_row(value_codes(b, h, row), value_scales(b, h, row), static_cast<int>(dv_), out);
}

void TurboQuantBlockCache::decode_key(int64_t b, int64_t h, int64_t row, float* out, float* scratch) const {
  if (row < sink_rows_held()) {
    cache_rows::load_f32(reinterpret_cast<const std::byte*>(row_ptr<uint16_t>(sink_keys_, b, h, row)), lm::DType::F16,
                         static_cast<std::size_t>(head_dim_), out);
    return;
  }
  decode_rotated_key(b, h, row, scratch);
  if (const uint16_t* mu = key_mean(b, h, row)) {
    for (int64_t e = 0; e < head_dim_; ++e) scratch[e] += base::f16_to_f32(mu[e]);
  }
  key_rotation_->inverse(scratch, out);
}

void TurboQuantBlockCache::decode_value(int64_t b, int64_t h, int64_t row, float* out, float* scratch) const {
  if (row < sink_rows_held()) {
    cache_rows::load_f32(reinterpret_cast<const std::byte*>(row_ptr<uint16_t>(sink_values_, b, h, row)), lm::DType::F16,
                         static_cast<std::size_t>(dv_), out);
    return;
  }
  decode_rotated_value(b, h, row, scratch);
  if (const uint16_t* mu = value_mean(b, h)) {
    for (int64_t e = 0; e < dv_; ++e) scratch[e] += base::f16_to_f32(mu[e]);
  }
  value_rotation_->inverse(scratch, out);
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
    key_codes_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(key_quant_.code_bytes(kd))}, lm::DType::U8);
    key_scales_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(key_quant_.blocks(kd))}, lm::DType::F16);
    value_codes_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(value_quant_.code_bytes(vd))}, lm::DType::U8);
    value_scales_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(value_quant_.blocks(vd))}, lm::DType::F16);
    if (settings_.sink_rows > 0) {
      sink_keys_ = lm::Tensor({batch_, heads_, settings_.sink_rows, head_dim_}, lm::DType::F16);
      sink_values_ = lm::Tensor({batch_, heads_, settings_.sink_rows, dv_}, lm::DType::F16);
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
      cache_rows::store_f32(k.data() + (bh * s + t) * head_dim_, static_cast<std::size_t>(head_dim_),
                            reinterpret_cast<std::byte*>(row_ptr<uint16_t>(sink_keys_, b, h, offset_ + t)),
                            lm::DType::F16);
      cache_rows::store_f32(v.data() + (bh * s + t) * dv_, static_cast<std::size_t>(dv_),
                            reinterpret_cast<std::byte*>(row_ptr<uint16_t>(sink_values_, b, h, offset_ + t)),
                            lm::DType::F16);
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
      key_rotation_->forward(key, rotated.data());
      if (const uint16_t* mu = key_mean(b, h, row)) {
        for (int64_t e = 0; e < head_dim_; ++e) rotated[static_cast<std::size_t>(e)] -= base::f16_to_f32(mu[e]);
      }
      key_quant_.encode_row(rotated.data(), head_dim_, row_ptr<uint8_t>(key_codes_, b, h, row),
                            row_ptr<uint16_t>(key_scales_, b, h, row));
      value_rotation_->forward(value, rotated.data());
      if (const uint16_t* mu = value_mean(b, h)) {
        for (int64_t e = 0; e < dv_; ++e) rotated[static_cast<std::size_t>(e)] -= base::f16_to_f32(mu[e]);
      }
      value_quant_.encode_row(rotated.data(), static_cast<int>(dv_), row_ptr<uint8_t>(value_codes_, b, h, row),
                              row_ptr<uint16_t>(value_scales_, b, h, row));
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
  const TurboQuantBlockRows rows(*this, offset_);
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, rows, &base::ThreadPool::global());
}

int64_t TurboQuantBlockCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("TurboQuantBlockCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset_);
  offset_ -= removed;  // rows are encoded independently: the kept ones are exactly a fresh cache's
  if (offset_ == 0) {
    // Nothing left: the next call calibrates again, as a fresh cache's first call would.
    key_mean_ = value_mean_ = lm::Tensor();
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
    out.push_back(value_mean_);
  }
  if (sink_keys_.defined()) {
    out.push_back(sink_keys_.slice(2, 0, sink_rows_held()));
    out.push_back(sink_values_.slice(2, 0, sink_rows_held()));
  }
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
          std::to_string(settings_.key_mean_segment)};
}

void TurboQuantBlockCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "TurboQuantBlockCache::from_state";
  // 13 entries; 12 (no key_mean_segment) as written before segments existed; 11 (no levels
  // either: Lloyd-Max) before `levels` existed.
  if (meta.size() < 11 || meta.size() > 13) {
    throw base::FormatError(std::string(who) + ": expected 13 meta entries (head_dim, key_bits, value_bits, seed, " +
                            "offset, value_dim, mean_rows, key_block, value_block, sink_rows, levels, means, " +
                            "key_mean_segment), got " + std::to_string(meta.size()));
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
  if (meta.size() == 13) {
    settings.key_mean_segment = static_cast<int>(cache_rows::parse_meta_int(meta[12], who, "key_mean_segment"));
  }
  const int head_dim = settings.head_dim;
  TurboQuantBlockCache rebuilt(settings);
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[4]);
    *this = std::move(rebuilt);
    return;
  }
  const int64_t sinks = std::min<int64_t>(offset, settings.sink_rows);
  const std::size_t expected = 4 + (has_means ? 2 : 0) + (settings.sink_rows > 0 ? 2 : 0);
  if (state.size() != expected) {
    throw base::FormatError(std::string(who) + ": expected " + std::to_string(expected) + " tensors, got " +
                            std::to_string(state.size()));
  }
  if (value_dim < 1) throw base::FormatError(std::string(who) + ": value_dim must be >= 1, got " + meta[5]);
  const auto vd = static_cast<int>(value_dim);
  const int64_t widths[4] = {static_cast<int64_t>(rebuilt.key_quant_.code_bytes(head_dim)),
                             static_cast<int64_t>(rebuilt.key_quant_.blocks(head_dim)),
                             static_cast<int64_t>(rebuilt.value_quant_.code_bytes(vd)),
                             static_cast<int64_t>(rebuilt.value_quant_.blocks(vd))};
  const lm::DType dtypes[4] = {lm::DType::U8, lm::DType::F16, lm::DType::U8, lm::DType::F16};
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
    const lm::Tensor& vm = state[next + 1];
    const int64_t segments = rebuilt.key_segments_for(offset);
    if (km.dtype() != lm::DType::F16 || vm.dtype() != lm::DType::F16 ||
        km.shape() != lm::Shape{rebuilt.batch_, rebuilt.heads_, segments, head_dim} ||
        vm.shape() != lm::Shape{rebuilt.batch_, rebuilt.heads_, 1, value_dim}) {
      throw base::FormatError(std::string(who) + ": means " + lm::shape_text(km.shape()) + " / " +
                              lm::shape_text(vm.shape()) + " do not match head_dim " + meta[0] + " / value_dim " +
                              meta[5]);
    }
    rebuilt.key_mean_ = cache_rows::copy_rows(km, segments, segments);
    rebuilt.value_mean_ = vm.clone();
    next += 2;
  }
  if (settings.sink_rows > 0) {
    const lm::Tensor& sk = state[next];
    const lm::Tensor& sv = state[next + 1];
    if (sk.dtype() != lm::DType::F16 || sv.dtype() != lm::DType::F16 ||
        sk.shape() != lm::Shape{rebuilt.batch_, rebuilt.heads_, sinks, head_dim} ||
        sv.shape() != lm::Shape{rebuilt.batch_, rebuilt.heads_, sinks, value_dim}) {
      throw base::FormatError(std::string(who) + ": sink rows " + lm::shape_text(sk.shape()) + " / " +
                              lm::shape_text(sv.shape()) + " do not hold " + std::to_string(sinks) + " rows");
    }
    rebuilt.sink_keys_ = cache_rows::copy_rows(sk, sinks, settings.sink_rows);
    rebuilt.sink_values_ = cache_rows::copy_rows(sv, sinks, settings.sink_rows);
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
  return std::make_shared<TurboQuantBlockCache>(settings);
}

}  // namespace veloxquant
