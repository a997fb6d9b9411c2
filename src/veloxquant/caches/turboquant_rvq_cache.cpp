#include "veloxquant/caches/turboquant_rvq_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/rows/group_affine_codes.h"
#include "veloxquant/caches/turboquant_rvq_row_source.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/turboquant_rvq.h"

namespace veloxquant {

using cache_rows::row_ptr;

TurboQuantRvqCache::TurboQuantRvqCache(int head_dim, int bits, int64_t seed, int value_bits,
                                       quant::RvqStage2Scale stage2)
    : head_dim_(head_dim), bits_(bits), seed_(seed), value_bits_(value_bits), stage2_(stage2) {
  if (value_bits != 0 && (value_bits < 2 || value_bits > 8)) {
    throw QuantizerConfigError("rvq_value_bits must be 0 (keep dtype) or 2..8, got " + std::to_string(value_bits));
  }
  quantizer_ = std::make_shared<const quant::TurboQuantRvq>(head_dim, bits, static_cast<uint64_t>(seed), stage2);
  stream_bytes_ = static_cast<int64_t>(quantizer_->stream_bytes());
}

TurboQuantRvqCache::~TurboQuantRvqCache() = default;
TurboQuantRvqCache::TurboQuantRvqCache(const TurboQuantRvqCache&) = default;
TurboQuantRvqCache& TurboQuantRvqCache::operator=(const TurboQuantRvqCache&) = default;
TurboQuantRvqCache::TurboQuantRvqCache(TurboQuantRvqCache&&) noexcept = default;
TurboQuantRvqCache& TurboQuantRvqCache::operator=(TurboQuantRvqCache&&) noexcept = default;

std::size_t TurboQuantRvqCache::nbytes() const {
  return packed1_.storage_bytes() + packed2_.storage_bytes() + norms_.storage_bytes() + values_.storage_bytes() +
         value_codes_.storage_bytes() + value_params_.storage_bytes();
}

int64_t TurboQuantRvqCache::compressed_key_bytes() const {
  return offset_ * batch_ * heads_ * static_cast<int64_t>(quantizer_->accounted_bytes_per_vector());
}

int64_t TurboQuantRvqCache::fp16_key_bytes() const { return offset_ * batch_ * heads_ * head_dim_ * 2; }

// Reallocates every buffer to `capacity` rows keeping the first `keep` (mlx_lm's growth: the
// old buffer cut to offset, then the new steps appended).
void TurboQuantRvqCache::allocate_rows(int64_t capacity, int64_t keep) {
  packed1_ = cache_rows::copy_rows(packed1_, keep, capacity);
  packed2_ = cache_rows::copy_rows(packed2_, keep, capacity);
  norms_ = cache_rows::copy_rows(norms_, keep, capacity);
  if (value_bits_ == 0) {
    values_ = cache_rows::copy_rows(values_, keep, capacity);
  } else {
    value_codes_ = cache_rows::copy_rows(value_codes_, keep, capacity);
    value_params_ = cache_rows::copy_rows(value_params_, keep, capacity);
  }
  capacity_ = capacity;
}

void TurboQuantRvqCache::ensure_capacity(const lm::Tensor& keys, const lm::Tensor& values) {
  const int64_t s = keys.dim(2);
  if (!packed1_.defined()) {
    batch_ = keys.dim(0);
    heads_ = keys.dim(1);
    dv_ = values.dim(3);
    value_dtype_ = values.dtype();
    packed1_ = lm::Tensor({batch_, heads_, 0, stream_bytes_}, lm::DType::U8);
    packed2_ = lm::Tensor({batch_, heads_, 0, stream_bytes_}, lm::DType::U8);
    norms_ = lm::Tensor({batch_, heads_, 0, 1}, lm::DType::BF16);
    if (value_bits_ == 0) {
      values_ = lm::Tensor({batch_, heads_, 0, dv_}, value_dtype_);
    } else {
      value_codes_ =
          lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(dv_, value_bits_))}, lm::DType::U32);
      value_params_ =
          lm::Tensor({batch_, heads_, 0, 2 * static_cast<int64_t>(token_groups(dv_, kValueGroup))}, lm::DType::F16);
    }
    capacity_ = 0;
  } else if (keys.dim(0) != batch_ || keys.dim(1) != heads_ || values.dim(3) != dv_) {
    throw base::InvalidArgument("TurboQuantRvqCache::update_and_fetch: new keys " + lm::shape_text(keys.shape()) +
                                " / values " + lm::shape_text(values.shape()) +
                                " do not match the cache's B=" + std::to_string(batch_) +
                                ", H=" + std::to_string(heads_) + ", Dv=" + std::to_string(dv_));
  }
  if (offset_ + s > capacity_) {
    const int64_t steps = (s + kGrowthStep - 1) / kGrowthStep;
    allocate_rows(offset_ + steps * kGrowthStep, offset_);
  }
}

void TurboQuantRvqCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "TurboQuantRvqCache::update_and_fetch");
  if (keys.dim(3) != head_dim_) {
    throw base::InvalidArgument("TurboQuantRvqCache: keys have head_dim " + std::to_string(keys.dim(3)) +
                                ", the cache was built for " + std::to_string(head_dim_));
  }
  ensure_capacity(keys, values);
  const int64_t s = keys.dim(2);
  // Grow-only per-thread f32 copies: a decode step allocates nothing.
  thread_local std::vector<float> k, v;
  cache_rows::widen_to_f32(keys, k);
  if (value_bits_ != 0) cache_rows::widen_to_f32(values, v);
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      quantizer_->encode_streams(k.data() + bh * s * head_dim_, static_cast<std::size_t>(s),
                                 row_ptr<uint8_t>(packed1_, b, h, offset_), row_ptr<uint8_t>(packed2_, b, h, offset_),
                                 row_ptr<uint16_t>(norms_, b, h, offset_));
      if (value_bits_ != 0) {
        for (int64_t t = 0; t < s; ++t) {
          encode_token_row(v.data() + (bh * s + t) * dv_, static_cast<int>(dv_), kValueGroup, value_bits_,
                           row_ptr<uint32_t>(value_codes_, b, h, offset_ + t),
                           reinterpret_cast<GroupParams16*>(row_ptr<uint16_t>(value_params_, b, h, offset_ + t)));
        }
      }
    }
  }
  if (value_bits_ == 0) lm::copy_token_rows(values, values_, offset_);
  offset_ += s;
}

void TurboQuantRvqCache::decode_key_row(int64_t b, int64_t h, int64_t row, float* out) const {
  quantizer_->decode_streams(row_ptr<uint8_t>(packed1_, b, h, row), row_ptr<uint8_t>(packed2_, b, h, row),
                             row_ptr<uint16_t>(norms_, b, h, row), 1, out);
}

void TurboQuantRvqCache::decode_value_row(int64_t b, int64_t h, int64_t row, float* out) const {
  if (value_bits_ == 0) {
    cache_rows::load_f32(reinterpret_cast<const std::byte*>(values_.raw_data()) +
                             (b * values_.strides()[0] + h * values_.strides()[1] + row * values_.strides()[2]) *
                                 static_cast<int64_t>(values_.element_size()),
                         value_dtype_, static_cast<std::size_t>(dv_), out);
    return;
  }
  decode_token_row(row_ptr<uint32_t>(value_codes_, b, h, row),
                   reinterpret_cast<const GroupParams16*>(row_ptr<uint16_t>(value_params_, b, h, row)),
                   static_cast<int>(dv_), kValueGroup, value_bits_, out);
}

lm::KeysValues TurboQuantRvqCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

lm::KeysValues TurboQuantRvqCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, head_dim_}, dtype);
  std::vector<float> rows(static_cast<std::size_t>(offset_ * std::max<int64_t>(head_dim_, dv_)));
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      quantizer_->decode_streams(row_ptr<uint8_t>(packed1_, b, h, 0), row_ptr<uint8_t>(packed2_, b, h, 0),
                                 row_ptr<uint16_t>(norms_, b, h, 0), static_cast<std::size_t>(offset_), rows.data());
      cache_rows::store_f32(
          rows.data(), static_cast<std::size_t>(offset_ * head_dim_),
          k.raw_data() + (b * heads_ + h) * offset_ * head_dim_ * static_cast<int64_t>(k.element_size()), dtype);
    }
  }
  // Plain values in the caller's dtype are returned as a view (no copy), as FullKVCache does.
  if (value_bits_ == 0 && dtype == value_dtype_) return {std::move(k), values_.slice(2, 0, offset_)};
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      for (int64_t r = 0; r < offset_; ++r) decode_value_row(b, h, r, rows.data() + r * dv_);
      cache_rows::store_f32(rows.data(), static_cast<std::size_t>(offset_ * dv_),
                            v.raw_data() + (b * heads_ + h) * offset_ * dv_ * static_cast<int64_t>(v.element_size()),
                            dtype);
    }
  }
  return {std::move(k), std::move(v)};
}

void TurboQuantRvqCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("TurboQuantRvqCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;  // position of the first new token
  store(*request.keys, *request.values);
  attention::check_fused_shapes("TurboQuantRvqCache::fused_attention", q, *request.keys, batch_, heads_, head_dim_, dv_,
                                out);
  // One driver for decode and prefill (attention/attention_driver.h): keys scored from their
  // codes in the rotated basis, values from their storage, GQA groups sharing every tile.
  if (!key_order_ || key_order_->size() != head_dim_ || key_order_->bits() != bits_) {
    key_order_ = std::make_shared<const attention::CodeOrder>(bits_, head_dim_);
    if (value_bits_ != 0) value_order_ = std::make_shared<const attention::CodeOrder>(value_bits_, dv_, kValueGroup);
  }
  const attention::CodeOrder* value_order = value_bits_ != 0 ? value_order_.get() : nullptr;
  const RvqValueRows values{values_, value_codes_, value_params_, value_order, kValueGroup, dv_};
  const TurboQuantRvqRows rows(*quantizer_, *key_order_, packed1_, packed2_, norms_, values, offset_);
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, rows, attention::request_pool(request));
}

int64_t TurboQuantRvqCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("TurboQuantRvqCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset_);
  offset_ -= removed;  // every row is encoded independently: the kept rows are exactly a fresh cache's
  return removed;
}

std::vector<lm::Tensor> TurboQuantRvqCache::state() const {
  if (!packed1_.defined()) return {};
  std::vector<lm::Tensor> out = {packed1_.slice(2, 0, offset_), packed2_.slice(2, 0, offset_),
                                 norms_.slice(2, 0, offset_)};
  if (value_bits_ == 0) {
    out.push_back(values_.slice(2, 0, offset_));
  } else {
    out.push_back(value_codes_.slice(2, 0, offset_));
    out.push_back(value_params_.slice(2, 0, offset_));
  }
  return out;
}

std::vector<std::string> TurboQuantRvqCache::meta_state() const {
  return {std::to_string(head_dim_),
          std::to_string(bits_),
          std::to_string(seed_),
          std::to_string(offset_),
          std::to_string(value_bits_),
          std::to_string(dv_),
          quant::rvq_stage2_scale_name(stage2_)};
}

void TurboQuantRvqCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "TurboQuantRvqCache::from_state";
  // (head_dim, bits, seed, offset) as the original, plus (value_bits, value_dim) here.
  if (meta.size() != 4 && meta.size() != 6 && meta.size() != 7) {
    throw base::FormatError(std::string(who) + ": expected 4, 6 or 7 meta entries (head_dim, bits, seed, offset[, " +
                            "value_bits, value_dim[, stage2_scale]]), got " + std::to_string(meta.size()));
  }
  const int head_dim = static_cast<int>(cache_rows::parse_meta_int(meta[0], who, "head_dim"));
  const int bits = static_cast<int>(cache_rows::parse_meta_int(meta[1], who, "bits"));
  const int64_t seed = cache_rows::parse_meta_int(meta[2], who, "seed");
  const int64_t offset = cache_rows::parse_meta_int(meta[3], who, "offset");
  const int value_bits =
      meta.size() >= 6 ? static_cast<int>(cache_rows::parse_meta_int(meta[4], who, "value_bits")) : 0;
  const int64_t value_dim = meta.size() >= 6 ? cache_rows::parse_meta_int(meta[5], who, "value_dim") : 0;
  // States without the entry were written with the original's stage-2 codebook.
  const quant::RvqStage2Scale stage2 =
      meta.size() == 7 ? quant::parse_rvq_stage2_scale(meta[6]) : quant::RvqStage2Scale::kOriginal;
  // Rebuild the quantizer from the meta (the original's setter does the same).
  TurboQuantRvqCache rebuilt(head_dim, bits, seed, value_bits, stage2);
  const std::size_t expected = value_bits == 0 ? 4 : 5;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[3]);
    *this = std::move(rebuilt);
    return;
  }
  if (state.size() != expected) {
    throw base::FormatError(std::string(who) + ": expected " + std::to_string(expected) + " tensors, got " +
                            std::to_string(state.size()));
  }
  for (const lm::Tensor& t : state) {
    if (t.ndim() != 4 || t.dim(2) != offset) {
      throw base::FormatError(std::string(who) + ": tensor " + lm::shape_text(t.shape()) + " does not hold offset " +
                              meta[3] + " rows");
    }
  }
  if (state[0].dtype() != lm::DType::U8 || state[0].dim(3) != rebuilt.stream_bytes_ ||
      state[1].dim(3) != rebuilt.stream_bytes_ || state[2].dtype() != lm::DType::BF16) {
    throw base::FormatError(std::string(who) + ": packed streams / norms do not match head_dim " + meta[0] + ", bits " +
                            meta[1]);
  }
  rebuilt.batch_ = state[0].dim(0);
  rebuilt.heads_ = state[0].dim(1);
  if (value_bits == 0) {
    rebuilt.dv_ = state[3].dim(3);
    rebuilt.value_dtype_ = state[3].dtype();
    rebuilt.values_ = cache_rows::copy_rows(state[3], offset, offset);
  } else {
    rebuilt.dv_ = value_dim;
    if (state[3].dim(3) != static_cast<int64_t>(core::packed_words(value_dim, value_bits)) ||
        state[4].dim(3) != 2 * static_cast<int64_t>(token_groups(static_cast<int>(value_dim), kValueGroup))) {
      throw base::FormatError(std::string(who) + ": value codes/params do not match value_dim " + meta[5]);
    }
    rebuilt.value_codes_ = cache_rows::copy_rows(state[3], offset, offset);
    rebuilt.value_params_ = cache_rows::copy_rows(state[4], offset, offset);
  }
  rebuilt.packed1_ = cache_rows::copy_rows(state[0], offset, offset);
  rebuilt.packed2_ = cache_rows::copy_rows(state[1], offset, offset);
  rebuilt.norms_ = cache_rows::copy_rows(state[2], offset, offset);
  rebuilt.capacity_ = offset;
  rebuilt.offset_ = offset;
  *this = std::move(rebuilt);
}

std::shared_ptr<lm::KVCache> TurboQuantRvqCache::clone() const {
  auto copy = std::make_shared<TurboQuantRvqCache>(*this);
  copy->packed1_ = packed1_.clone();
  copy->packed2_ = packed2_.clone();
  copy->norms_ = norms_.clone();
  copy->values_ = values_.clone();
  copy->value_codes_ = value_codes_.clone();
  copy->value_params_ = value_params_.clone();
  return copy;
}

std::shared_ptr<lm::KVCache> make_turboquant_rvq_cache(const KVCacheConfig& config) {
  return std::make_shared<TurboQuantRvqCache>(config.head_dim, config.bit_width_inlier.scalar(), config.seed,
                                              config.turboquant_rvq.rvq_value_bits,
                                              quant::parse_rvq_stage2_scale(config.turboquant_rvq.rvq_stage2_scale));
}

}  // namespace veloxquant
