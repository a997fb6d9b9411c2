#include "veloxquant/caches/kivi_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/memory_limit.h"
#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/rows/group_affine_codes.h"
#include "veloxquant/caches/dense_and_sparse_rows.h"
#include "veloxquant/caches/fitted_levels.h"
#include "veloxquant/caches/kivi_row_source.h"
#include "veloxquant/config/config_validation.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/errors.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kPlainType = "KiviCache";

// A flushed block's key codes again, against fitted levels: per channel of each group of
// `group` tokens, with the group's affine params (row-major block of `blocks * group` rows).
void encode_key_levels(const float* block, const core::GroupParams* params, const float* levels, int n_levels,
                       int64_t blocks, int64_t group, int64_t dim, uint8_t* codes) {
  for (int64_t g = 0; g < blocks; ++g) {
    for (int64_t c = 0; c < dim; ++c) {
      const int64_t at = g * group * dim + c;
      encode_group_levels(block + at, static_cast<std::size_t>(group), static_cast<std::size_t>(dim),
                          params[g * dim + c], levels, n_levels, codes + at);
    }
  }
}

// The value codes of `count` tokens again, against fitted levels: per token over `n_groups`
// channel groups of `group` channels (the last may be shorter).
void encode_value_levels(const float* block, const core::GroupParams* params, const float* levels, int n_levels,
                         int64_t count, int64_t n_groups, int64_t group, int64_t dim, uint8_t* codes) {
  for (int64_t t = 0; t < count; ++t) {
    for (int64_t g = 0; g < n_groups; ++g) {
      const int64_t begin = g * group, n = std::min<int64_t>(group, dim - begin);
      encode_group_levels(block + t * dim + begin, static_cast<std::size_t>(n), 1, params[t * n_groups + g], levels,
                          n_levels, codes + t * dim + begin);
    }
  }
}
}  // namespace

KiviCache::KiviCache(int head_dim, int bits, int group_size, int residual_length, KiviVariant variant)
    : head_dim_(head_dim),
      bits_(bits),
      group_(group_size),
      residual_length_(residual_length),
      variant_(std::move(variant)),
      sinks_(variant_.sinks, variant_.sink_slots),
      outliers_(variant_.outlier_fraction) {
  if (bits < 1 || bits > 8) throw QuantizerConfigError("kivi: bits must lie in [1, 8], got " + std::to_string(bits));
  if (group_size < 1) throw QuantizerConfigError("kivi_group_size must be >= 1, got " + std::to_string(group_size));
  if (residual_length < 0) {
    throw QuantizerConfigError("residual_length must be >= 0, got " + std::to_string(residual_length));
  }
  if (variant_.sink_slots < 0) {
    throw QuantizerConfigError(variant_.type_name + ": sink rows must be >= 0, got " +
                               std::to_string(variant_.sink_slots));
  }
  if (!(variant_.outlier_fraction >= 0.0 && variant_.outlier_fraction <= 0.5)) {
    throw QuantizerConfigError(variant_.type_name + ": outlier fraction must lie in [0, 0.5], got " +
                               std::to_string(variant_.outlier_fraction));
  }
  if (variant_.lloyd_iters < 0) {
    throw QuantizerConfigError(variant_.type_name + ": Lloyd iterations must be >= 0, got " +
                               std::to_string(variant_.lloyd_iters));
  }
}

const float* KiviCache::levels(int64_t b, int64_t h, int which) const {
  if (variant_.lloyd_iters == 0 || !levels_fitted_) return nullptr;
  return row_ptr<float>(levels_, b, h, which);
}

std::size_t KiviCache::nbytes() const {
  return key_codes_.storage_bytes() + key_params_.storage_bytes() + value_codes_.storage_bytes() +
         value_params_.storage_bytes() + residual_k_.storage_bytes() + residual_v_.storage_bytes() + sinks_.nbytes() +
         outliers_.nbytes() + levels_.storage_bytes();
}

void KiviCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  dtype_ = keys.dtype();
  // The tail never holds more than residual_length + group - 1 rows after a call (the frontier
  // is a multiple of the group), so this buffer never grows.
  const int64_t tail = int64_t{residual_length_} + group_;  // 64-bit: residual_length may be INT_MAX
  base::require_allocatable(static_cast<double>(batch_) * static_cast<double>(heads_) * static_cast<double>(tail) *
                                static_cast<double>(dk_ + dv_) * static_cast<double>(lm::dtype_size(dtype_)),
                            "kivi's full-precision tail of residual_length=" + std::to_string(residual_length_) +
                                " rows (" + std::to_string(batch_ * heads_) + " kv heads, one layer)");
  residual_k_ = lm::Tensor({batch_, heads_, tail, dk_}, dtype_);
  residual_v_ = lm::Tensor({batch_, heads_, tail, dv_}, dtype_);
  capacity_ = 0;
  key_codes_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(dk_, bits_))}, lm::DType::U32);
  key_params_ = lm::Tensor({batch_, heads_, 0, 2 * dk_}, lm::DType::F16);
  value_codes_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(dv_, bits_))}, lm::DType::U32);
  value_params_ = lm::Tensor({batch_, heads_, 0, 2 * static_cast<int64_t>(token_groups(dv_, group_))}, lm::DType::F16);
  sinks_.allocate(batch_, heads_, dk_, dv_, dtype_);
  outliers_.allocate(batch_, heads_, group_, dk_, dv_);
  if (variant_.lloyd_iters > 0) levels_ = lm::Tensor({batch_, heads_, 2, int64_t{1} << bits_}, lm::DType::F32);
  levels_fitted_ = false;
}

void KiviCache::ensure_quantized_capacity(int64_t rows) {
  if (rows <= capacity_) return;
  // Grow by whole 256-token steps (as mlx_lm's caches), rounded up to whole key groups.
  int64_t grown = capacity_ + ((rows - capacity_ + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  grown = ((grown + group_ - 1) / group_) * group_;
  key_codes_ = cache_rows::copy_rows(key_codes_, frontier_, grown);
  key_params_ = cache_rows::copy_rows(key_params_, frontier_ / group_, grown / group_);
  value_codes_ = cache_rows::copy_rows(value_codes_, frontier_, grown);
  value_params_ = cache_rows::copy_rows(value_params_, frontier_, grown);
  outliers_.reserve(frontier_ / group_, grown / group_);
  capacity_ = grown;
}

void KiviCache::flush(std::vector<float>& pending_k, std::vector<float>& pending_v, int64_t pending_rows, int64_t first,
                      int64_t count) {
  sinks_.take(pending_k, pending_v, pending_rows, first, count, frontier_, group_);
  // Levels are fitted once, on the first flushed block of every head (kvquant_refit_interval = 0).
  // Each head fits its own levels before its own outlier decode reads them, so the flag can be
  // set for all of them now.
  const bool fit = variant_.lloyd_iters > 0 && !levels_fitted_;
  if (fit) levels_fitted_ = true;
  // Heads are independent (each writes only its own codes, parameters, levels and outliers): they
  // run across the pool — a 512-token prefill call's outlier isolation, codes and level encode
  // used to run on the calling thread alone while the other waited.
  const float* keys = pending_k.data();
  const float* values = pending_v.data();
  base::ThreadPool::global().parallel_for(batch_ * heads_, [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; ++bh) {
      flush_head(bh / heads_, bh % heads_, keys + (bh * pending_rows + first) * dk_,
                 values + (bh * pending_rows + first) * dv_, count, fit);
    }
  });
}

void KiviCache::flush_head(int64_t b, int64_t h, const float* keys, const float* values, int64_t count, bool fit) {
  const int64_t blocks = count / group_, gv = static_cast<int64_t>(token_groups(static_cast<int>(dv_), group_));
  const int n_levels = 1 << bits_;
  const int64_t k_keys = outliers_.enabled() ? outliers_.per_block(true) : 0;
  const int64_t k_values = outliers_.enabled() ? outliers_.per_block(false) : 0;
  // Grow-only per-thread buffers: the block to encode (sinks neutralized, outliers isolated),
  // its codes and params, the isolated outliers and a decoded block for their deltas.
  thread_local std::vector<float> kblock, vblock, kexact, vexact, decoded;
  thread_local std::vector<uint8_t> kcodes, vcodes, excluded;
  thread_local std::vector<uint32_t> kidx, vidx;
  thread_local std::vector<core::GroupParams> kparams, vparams;
  kblock.assign(keys, keys + count * dk_);
  vblock.assign(values, values + count * dv_);
  kcodes.resize(kblock.size());
  vcodes.resize(vblock.size());
  kparams.resize(static_cast<std::size_t>(blocks * dk_));
  vparams.resize(static_cast<std::size_t>(count * gv));
  kidx.resize(static_cast<std::size_t>(blocks * k_keys));
  kexact.resize(kidx.size());
  vidx.resize(static_cast<std::size_t>(blocks * k_values));
  vexact.resize(vidx.size());
  excluded.resize(static_cast<std::size_t>(group_));
  decoded.resize(static_cast<std::size_t>(group_ * std::max(dk_, dv_)));
  for (int64_t g = 0; g < blocks && outliers_.enabled(); ++g) {
    for (int64_t t = 0; t < group_; ++t)
      excluded[static_cast<std::size_t>(t)] = sinks_.is_sink(b, frontier_ + g * group_ + t);
    isolate_outliers(kblock.data() + g * group_ * dk_, group_, dk_, true, group_, excluded.data(), k_keys,
                     kidx.data() + g * k_keys, kexact.data() + g * k_keys);
    isolate_outliers(vblock.data() + g * group_ * dv_, group_, dv_, false, group_, excluded.data(), k_values,
                     vidx.data() + g * k_values, vexact.data() + g * k_values);
  }
  // Keys: per channel over each group's tokens (KIVI: channel-aligned outliers); values: per
  // token over channel groups.
  for (int64_t g = 0; g < blocks; ++g) {
    core::quantize_per_channel(kblock.data() + g * group_ * dk_, static_cast<std::size_t>(group_),
                               static_cast<std::size_t>(dk_), bits_, static_cast<std::size_t>(group_),
                               kcodes.data() + g * group_ * dk_, kparams.data() + g * dk_);
  }
  core::quantize_per_token(vblock.data(), static_cast<std::size_t>(count), static_cast<std::size_t>(dv_), bits_,
                           static_cast<std::size_t>(group_), vcodes.data(), vparams.data());
  if (variant_.lloyd_iters > 0) {
    if (fit) fit_levels_for(b, h, kblock.data(), kparams.data(), vblock.data(), vparams.data(), count);
    encode_key_levels(kblock.data(), kparams.data(), row_ptr<float>(levels_, b, h, 0), n_levels, blocks, group_, dk_,
                      kcodes.data());
    encode_value_levels(vblock.data(), vparams.data(), row_ptr<float>(levels_, b, h, 1), n_levels, count, gv, group_,
                        dv_, vcodes.data());
  }
  for (int64_t g = 0; g < blocks; ++g) {
    std::memcpy(row_ptr<uint16_t>(key_params_, b, h, frontier_ / group_ + g), kparams.data() + g * dk_,
                sizeof(core::GroupParams) * static_cast<std::size_t>(dk_));
  }
  for (int64_t t = 0; t < count; ++t) {
    core::pack_words(kcodes.data() + t * dk_, static_cast<std::size_t>(dk_), bits_,
                     row_ptr<uint32_t>(key_codes_, b, h, frontier_ + t));
    core::pack_words(vcodes.data() + t * dv_, static_cast<std::size_t>(dv_), bits_,
                     row_ptr<uint32_t>(value_codes_, b, h, frontier_ + t));
    std::memcpy(row_ptr<uint16_t>(value_params_, b, h, frontier_ + t), vparams.data() + t * gv,
                sizeof(core::GroupParams) * static_cast<std::size_t>(gv));
  }
  // The outliers' corrections against what the codes now give back.
  for (int64_t g = 0; g < blocks && outliers_.enabled(); ++g) {
    const int64_t row0 = frontier_ + g * group_;
    decode_keys_dense(b, h, row0, row0 + group_, decoded.data());
    outliers_.record(true, b, h, row0 / group_, kidx.data() + g * k_keys, kexact.data() + g * k_keys, decoded.data());
    decode_values_dense(b, h, row0, row0 + group_, decoded.data());
    outliers_.record(false, b, h, row0 / group_, vidx.data() + g * k_values, vexact.data() + g * k_values,
                     decoded.data());
  }
}

void KiviCache::fit_levels_for(int64_t b, int64_t h, const float* keys, const core::GroupParams* key_params,
                               const float* values, const core::GroupParams* value_params, int64_t rows) {
  const int n_levels = 1 << bits_;
  const int64_t gv = static_cast<int64_t>(token_groups(static_cast<int>(dv_), group_));
  std::vector<float> u(static_cast<std::size_t>(rows * std::max(dk_, dv_)));
  std::size_t n = 0;
  for (int64_t g = 0; g < rows / group_; ++g) {
    for (int64_t c = 0; c < dk_; ++c) {
      append_normalized(keys + g * group_ * dk_ + c, static_cast<std::size_t>(group_), static_cast<std::size_t>(dk_),
                        key_params[g * dk_ + c], n_levels, u.data() + n);
      n += static_cast<std::size_t>(group_);
    }
  }
  fit_levels(u.data(), n, n_levels, variant_.lloyd_iters, row_ptr<float>(levels_, b, h, 0));
  n = 0;
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t g = 0; g < gv; ++g) {
      const int64_t begin = g * group_, count = std::min<int64_t>(group_, dv_ - begin);
      append_normalized(values + t * dv_ + begin, static_cast<std::size_t>(count), 1, value_params[t * gv + g],
                        n_levels, u.data() + n);
      n += static_cast<std::size_t>(count);
    }
  }
  fit_levels(u.data(), n, n_levels, variant_.lloyd_iters, row_ptr<float>(levels_, b, h, 1));
}

void KiviCache::decode_keys_dense(int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const {
  std::vector<uint8_t> codes(static_cast<std::size_t>(dk_));
  const float* level = levels(b, h, 0);
  for (int64_t r = begin; r < end; ++r) {
    core::unpack_words(row_ptr<uint32_t>(key_codes_, b, h, r), static_cast<std::size_t>(dk_), bits_, codes.data());
    const auto* params = reinterpret_cast<const GroupParams16*>(row_ptr<uint16_t>(key_params_, b, h, r / group_));
    for (int64_t d = 0; d < dk_; ++d) {
      out[(r - begin) * dk_ + d] = level == nullptr ? decode_code(codes[d], params[d])
                                                    : level[codes[d]] * base::f16_to_f32(params[d].scale_f16) +
                                                          base::f16_to_f32(params[d].min_f16);
    }
  }
}

void KiviCache::decode_values_dense(int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const {
  const float* level = levels(b, h, 1);
  std::vector<uint8_t> codes(static_cast<std::size_t>(dv_));
  for (int64_t r = begin; r < end; ++r) {
    const auto* params = reinterpret_cast<const GroupParams16*>(row_ptr<uint16_t>(value_params_, b, h, r));
    if (level == nullptr) {
      decode_token_row(row_ptr<uint32_t>(value_codes_, b, h, r), params, static_cast<int>(dv_), group_, bits_,
                       out + (r - begin) * dv_);
      continue;
    }
    core::unpack_words(row_ptr<uint32_t>(value_codes_, b, h, r), static_cast<std::size_t>(dv_), bits_, codes.data());
    for (int64_t d = 0; d < dv_; ++d) {
      const GroupParams16 p = params[d / group_];
      out[(r - begin) * dv_ + d] = level[codes[d]] * base::f16_to_f32(p.scale_f16) + base::f16_to_f32(p.min_f16);
    }
  }
}

void KiviCache::decode_keys(int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const {
  decode_keys_dense(b, h, begin, end, out);
  outliers_.apply(true, b, h, begin, end, out);
  sinks_.overlay_keys(b, h, begin, end, out);
}

void KiviCache::decode_values(int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const {
  decode_values_dense(b, h, begin, end, out);
  outliers_.apply(false, b, h, begin, end, out);
  sinks_.overlay_values(b, h, begin, end, out);
}

lm::KeysValues KiviCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void KiviCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "KiviCache::update_and_fetch");
  if (!residual_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "KiviCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2);
  const int64_t tail = offset_ - frontier_;
  const int64_t pending_rows = tail + s;
  const int64_t new_offset = offset_ + s;
  const int64_t new_frontier = (std::max<int64_t>(0, new_offset - residual_length_) / group_) * group_;
  if (new_frontier == frontier_) {
    // Nothing reaches the frontier (31 of 32 decode steps at the defaults): the new rows go
    // straight into the tail, as they are — no widening of the tail, no temporary.
    lm::copy_token_rows(keys, residual_k_, tail);
    lm::copy_token_rows(values, residual_v_, tail);
    offset_ = new_offset;
    return;
  }
  // Pending = the full-precision tail followed by the new rows, in f32 (grow-only per-thread
  // buffers: a flushing decode step allocates nothing once the shape has been seen).
  thread_local std::vector<float> pk, pv, new_k, new_v;
  pk.resize(static_cast<std::size_t>(batch_ * heads_ * pending_rows * dk_));
  pv.resize(static_cast<std::size_t>(batch_ * heads_ * pending_rows * dv_));
  cache_rows::widen_to_f32(keys, new_k);
  cache_rows::widen_to_f32(values, new_v);
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      cache_rows::load_f32(
          residual_k_.raw_data() + (bh * residual_k_.dim(2)) * dk_ * static_cast<int64_t>(residual_k_.element_size()),
          dtype_, static_cast<std::size_t>(tail * dk_), pk.data() + bh * pending_rows * dk_);
      cache_rows::load_f32(
          residual_v_.raw_data() + (bh * residual_v_.dim(2)) * dv_ * static_cast<int64_t>(residual_v_.element_size()),
          dtype_, static_cast<std::size_t>(tail * dv_), pv.data() + bh * pending_rows * dv_);
      std::memcpy(pk.data() + (bh * pending_rows + tail) * dk_, new_k.data() + bh * s * dk_,
                  sizeof(float) * static_cast<std::size_t>(s * dk_));
      std::memcpy(pv.data() + (bh * pending_rows + tail) * dv_, new_v.data() + bh * s * dv_,
                  sizeof(float) * static_cast<std::size_t>(s * dv_));
    }
  }
  const int64_t flushed = new_frontier - frontier_;
  if (flushed > 0) {
    ensure_quantized_capacity(new_frontier);
    flush(pk, pv, pending_rows, 0, flushed);
  }
  const int64_t kept = pending_rows - flushed;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      cache_rows::store_f32(
          pk.data() + (bh * pending_rows + flushed) * dk_, static_cast<std::size_t>(kept * dk_),
          residual_k_.raw_data() + bh * residual_k_.dim(2) * dk_ * static_cast<int64_t>(residual_k_.element_size()),
          dtype_);
      cache_rows::store_f32(
          pv.data() + (bh * pending_rows + flushed) * dv_, static_cast<std::size_t>(kept * dv_),
          residual_v_.raw_data() + bh * residual_v_.dim(2) * dv_ * static_cast<int64_t>(residual_v_.element_size()),
          dtype_);
    }
  }
  offset_ = new_offset;
  frontier_ = new_frontier;
}

lm::KeysValues KiviCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  std::vector<float> tmp(static_cast<std::size_t>(std::max(offset_, int64_t{1}) * std::max(dk_, dv_)));
  const int64_t tail = offset_ - frontier_;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      std::byte* kout = k.raw_data() + bh * offset_ * dk_ * static_cast<int64_t>(k.element_size());
      std::byte* vout = v.raw_data() + bh * offset_ * dv_ * static_cast<int64_t>(v.element_size());
      decode_keys(b, h, 0, frontier_, tmp.data());
      cache_rows::store_f32(tmp.data(), static_cast<std::size_t>(frontier_ * dk_), kout, dtype);
      decode_values(b, h, 0, frontier_, tmp.data());
      cache_rows::store_f32(tmp.data(), static_cast<std::size_t>(frontier_ * dv_), vout, dtype);
      const std::byte* rk =
          residual_k_.raw_data() + bh * residual_k_.dim(2) * dk_ * static_cast<int64_t>(residual_k_.element_size());
      const std::byte* rv =
          residual_v_.raw_data() + bh * residual_v_.dim(2) * dv_ * static_cast<int64_t>(residual_v_.element_size());
      lm::convert_elements(rk, dtype_, kout + frontier_ * dk_ * static_cast<int64_t>(k.element_size()), dtype,
                           static_cast<std::size_t>(tail * dk_));
      lm::convert_elements(rv, dtype_, vout + frontier_ * dv_ * static_cast<int64_t>(v.element_size()), dtype,
                           static_cast<std::size_t>(tail * dv_));
    }
  }
  return {std::move(k), std::move(v)};
}

// Attention straight from the storage, through the shared driver: the quantized rows scored and
// accumulated from their codes (kivi_row_source.h), the full-precision tail read in place — one
// sequence, one online softmax, GQA groups and split-K handled by the driver.
void KiviCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("KiviCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("KiviCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  if (!key_order_ || key_order_->size() != dk_ || key_order_->bits() != bits_) {
    key_order_ = std::make_shared<const attention::CodeOrder>(bits_, dk_);
    value_order_ = std::make_shared<const attention::CodeOrder>(bits_, dv_, group_);
    // Widths that do not read by planes score their keys by word planes (padded code order).
    word_keys_ = key_order_->planar() ? nullptr : std::make_shared<const WordPlaneKeys>(bits_, dk_);
    key_position_.reset();
  }
  const bool fitted = variant_.lloyd_iters > 0 && levels_fitted_;
  KiviQuantizedRows quantized(key_codes_, key_params_, value_codes_, value_params_, frontier_, bits_, group_,
                              *key_order_, *value_order_, fitted ? &levels_ : nullptr);
  quantized.with_word_plane_keys(word_keys_.get());
  if (!key_position_) {
    auto position = std::make_shared<std::vector<int32_t>>(static_cast<std::size_t>(dk_));
    for (int64_t i = 0; i < dk_; ++i)
      (*position)[static_cast<std::size_t>(i)] = static_cast<int32_t>(quantized.prepared_position(i));
    key_position_ = std::move(position);
  }
  // Sinks and outliers (kivi_sink, kvquant) patch the dense rows' scores and sums.
  const DenseAndSparseRows patched(quantized, *key_position_, sinks_, outliers_);
  const bool sparse = sinks_.enabled() || outliers_.enabled();
  const attention::DtypeRowSource tail(residual_k_, residual_v_, offset_ - frontier_, frontier_);
  // With word-plane keys the quantized rows' prepared queries are longer than the tail's.
  const PaddedQueryRows padded_tail(tail, quantized.prepared_dim());
  const attention::RowSource* segments[] = {
      sparse ? static_cast<const attention::RowSource*>(&patched) : &quantized,
      word_keys_ ? static_cast<const attention::RowSource*>(&padded_tail) : &tail};
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, 2, attention::request_pool(request));
}

int64_t KiviCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("KiviCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset_);
  const int64_t new_offset = offset_ - removed;
  const int64_t new_frontier = (std::max<int64_t>(0, new_offset - residual_length_) / group_) * group_;
  if (new_frontier < frontier_) {
    // Groups [new_frontier, frontier_) go back to the full-precision tail, decoded; the old tail
    // rows that survive the trim follow them.
    const int64_t reopened = std::min(frontier_, new_offset) - new_frontier;
    const int64_t old_tail_kept = std::max<int64_t>(0, new_offset - frontier_);
    std::vector<float> tk(static_cast<std::size_t>((reopened + old_tail_kept) * dk_));
    std::vector<float> tv(static_cast<std::size_t>((reopened + old_tail_kept) * dv_));
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < heads_; ++h) {
        const int64_t bh = b * heads_ + h;
        std::byte* rk =
            residual_k_.raw_data() + bh * residual_k_.dim(2) * dk_ * static_cast<int64_t>(residual_k_.element_size());
        std::byte* rv =
            residual_v_.raw_data() + bh * residual_v_.dim(2) * dv_ * static_cast<int64_t>(residual_v_.element_size());
        decode_keys(b, h, new_frontier, new_frontier + reopened, tk.data());
        decode_values(b, h, new_frontier, new_frontier + reopened, tv.data());
        cache_rows::load_f32(rk, dtype_, static_cast<std::size_t>(old_tail_kept * dk_), tk.data() + reopened * dk_);
        cache_rows::load_f32(rv, dtype_, static_cast<std::size_t>(old_tail_kept * dv_), tv.data() + reopened * dv_);
        cache_rows::store_f32(tk.data(), tk.size(), rk, dtype_);
        cache_rows::store_f32(tv.data(), tv.size(), rv, dtype_);
      }
    }
    frontier_ = new_frontier;
    // Sinks above the new frontier went back to the tail with the rows above (exactly, from
    // their copies); a cache emptied of codes fits its levels again on its next flush.
    sinks_.drop_from(new_frontier);
    if (new_frontier == 0) levels_fitted_ = false;
  }
  offset_ = new_offset;
  return removed;
}

std::vector<lm::Tensor> KiviCache::state() const {
  if (!residual_k_.defined()) return {};
  const int64_t tail = offset_ - frontier_;
  std::vector<lm::Tensor> out = {key_codes_.slice(2, 0, frontier_),   key_params_.slice(2, 0, frontier_ / group_),
                                 value_codes_.slice(2, 0, frontier_), value_params_.slice(2, 0, frontier_),
                                 residual_k_.slice(2, 0, tail),       residual_v_.slice(2, 0, tail)};
  // A variant appends its extras: sinks (3 tensors), outliers (4), levels (1), each when used.
  if (sinks_.enabled()) {
    for (lm::Tensor& t : sinks_.state()) out.push_back(std::move(t));
  }
  if (outliers_.enabled()) {
    for (lm::Tensor& t : outliers_.state(frontier_ / group_)) out.push_back(std::move(t));
  }
  if (variant_.lloyd_iters > 0) out.push_back(levels_);
  return out;
}

std::vector<std::string> KiviCache::meta_state() const {
  std::vector<std::string> meta = {
      std::to_string(head_dim_),          std::to_string(bits_),   std::to_string(group_),
      std::to_string(residual_length_),   std::to_string(offset_), std::to_string(frontier_),
      std::string(lm::dtype_name(dtype_))};
  if (variant_.type_name == kPlainType) return meta;  // KIVI's own format, unchanged
  char fraction[32];
  std::snprintf(fraction, sizeof(fraction), "%.17g", variant_.outlier_fraction);
  for (std::string entry :
       {variant_.type_name, std::string(sink_rule_name(variant_.sinks)), std::to_string(variant_.sink_slots),
        std::string(fraction), std::to_string(variant_.lloyd_iters), std::string(levels_fitted_ ? "1" : "0")}) {
    meta.push_back(std::move(entry));
  }
  return meta;
}

void KiviCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "KiviCache::from_state";
  if (meta.size() != 7 && meta.size() != 13) {
    throw base::FormatError(std::string(who) + ": expected 7 meta entries (head_dim, bits, group, " +
                            "residual_length, offset, frontier, dtype) or 13 (+ type, sink rule, sink rows, " +
                            "outlier fraction, Lloyd iterations, levels fitted), got " + std::to_string(meta.size()));
  }
  KiviVariant variant;
  bool fitted = false;
  if (meta.size() == 13) {
    variant.type_name = meta[7];
    variant.sinks = parse_sink_rule(meta[8], who);
    variant.sink_slots = static_cast<int>(cache_rows::parse_meta_int(meta[9], who, "sink rows"));
    char* end = nullptr;
    variant.outlier_fraction = std::strtod(meta[10].c_str(), &end);
    if (end == meta[10].c_str() || *end != '\0' ||
        !(variant.outlier_fraction >= 0.0 && variant.outlier_fraction <= 0.5) || variant.sink_slots < 0) {
      throw base::FormatError(std::string(who) + ": bad outlier fraction '" + meta[10] + "' or sink rows " + meta[9]);
    }
    variant.lloyd_iters = static_cast<int>(cache_rows::parse_meta_int(meta[11], who, "Lloyd iterations"));
    fitted = meta[12] == "1";
  }
  variant_ = variant;
  sinks_ = SinkRows(variant_.sinks, variant_.sink_slots);
  outliers_ = SparseOutliers(variant_.outlier_fraction);
  levels_ = lm::Tensor();
  levels_fitted_ = false;
  head_dim_ = static_cast<int>(cache_rows::parse_meta_int(meta[0], who, "head_dim"));
  bits_ = static_cast<int>(cache_rows::parse_meta_int(meta[1], who, "bits"));
  group_ = static_cast<int>(cache_rows::parse_meta_int(meta[2], who, "group"));
  residual_length_ = static_cast<int>(cache_rows::parse_meta_int(meta[3], who, "residual_length"));
  const int64_t offset = cache_rows::parse_meta_int(meta[4], who, "offset");
  const int64_t frontier = cache_rows::parse_meta_int(meta[5], who, "frontier");
  lm::DType dtype;
  try {
    dtype = lm::parse_float_dtype(meta[6]);
  } catch (const base::InvalidArgument& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  if (bits_ < 1 || bits_ > 8 || group_ < 1 || residual_length_ < 0 || frontier < 0 || frontier > offset ||
      frontier % group_ != 0 || offset - frontier > residual_length_ + group_) {
    throw base::FormatError(std::string(who) + ": inconsistent meta_state (bits " + meta[1] + ", group " + meta[2] +
                            ", offset " + meta[4] + ", frontier " + meta[5] + ")");
  }
  offset_ = 0;
  frontier_ = 0;
  capacity_ = 0;
  if (state.empty()) {
    residual_k_ = residual_v_ = key_codes_ = key_params_ = value_codes_ = value_params_ = lm::Tensor();
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[4]);
    return;
  }
  const std::size_t expected =
      6 + (sinks_.enabled() ? 3 : 0) + (outliers_.enabled() ? 4 : 0) + (variant_.lloyd_iters > 0 ? 1 : 0);
  if (state.size() != expected) {
    throw base::FormatError(std::string(who) + ": expected " + std::to_string(expected) + " tensors, got " +
                            std::to_string(state.size()));
  }
  const lm::Tensor& rk = state[4];
  const lm::Tensor& rv = state[5];
  if (rk.ndim() != 4 || rv.ndim() != 4 || rk.dim(2) != offset - frontier || state[0].dim(2) != frontier ||
      state[1].dim(2) != frontier / group_ || state[2].dim(2) != frontier || state[3].dim(2) != frontier) {
    throw base::FormatError(std::string(who) + ": tensor row counts do not match offset " + meta[4] + " / frontier " +
                            meta[5]);
  }
  allocate(rk.astype(dtype), rv.astype(dtype));
  if (state[0].dim(3) != key_codes_.dim(3) || state[1].dim(3) != key_params_.dim(3) ||
      state[2].dim(3) != value_codes_.dim(3) || state[3].dim(3) != value_params_.dim(3)) {
    throw base::FormatError(std::string(who) + ": code/param widths do not match bits " + meta[1]);
  }
  key_codes_ = cache_rows::copy_rows(state[0], frontier, frontier);
  key_params_ = cache_rows::copy_rows(state[1], frontier / group_, frontier / group_);
  value_codes_ = cache_rows::copy_rows(state[2], frontier, frontier);
  value_params_ = cache_rows::copy_rows(state[3], frontier, frontier);
  capacity_ = frontier;
  const lm::Tensor rk_typed = rk.astype(dtype_);
  const lm::Tensor rv_typed = rv.astype(dtype_);
  lm::copy_token_rows(rk_typed, residual_k_, 0);
  lm::copy_token_rows(rv_typed, residual_v_, 0);
  std::size_t next = 6;
  if (sinks_.enabled()) {
    sinks_.from_state(state[next], state[next + 1], state[next + 2], who);
    next += 3;
  }
  if (outliers_.enabled()) {
    outliers_.from_state(state, next, frontier / group_, who);
    next += 4;
  }
  if (variant_.lloyd_iters > 0) {
    const lm::Tensor& lv = state[next];
    if (lv.shape() != levels_.shape() || lv.dtype() != lm::DType::F32) {
      throw base::FormatError(std::string(who) + ": levels tensor " + lm::shape_text(lv.shape()) + " does not match " +
                              lm::shape_text(levels_.shape()));
    }
    levels_ = lv.clone();
    levels_fitted_ = fitted;
  }
  offset_ = offset;
  frontier_ = frontier;
}

std::shared_ptr<lm::KVCache> KiviCache::clone() const {
  auto copy = std::make_shared<KiviCache>(*this);
  copy->key_codes_ = key_codes_.clone();
  copy->key_params_ = key_params_.clone();
  copy->value_codes_ = value_codes_.clone();
  copy->value_params_ = value_params_.clone();
  copy->residual_k_ = residual_k_.clone();
  copy->residual_v_ = residual_v_.clone();
  copy->sinks_ = sinks_.deep_copy();
  copy->outliers_ = outliers_.deep_copy();
  copy->levels_ = levels_.clone();
  return copy;
}

std::shared_ptr<lm::KVCache> make_kivi_cache(const KVCacheConfig& config) {
  return std::make_shared<KiviCache>(config.head_dim, config.bit_width_inlier.scalar(), config.kivi.kivi_group_size,
                                     config.kivi.residual_length);
}

MethodDescriptor kivi_method() {
  MethodDescriptor m;
  m.name = "kivi";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Asymmetric min/max group quantization: keys per channel, values per token; the "
      "newest residual_length tokens stay full precision";
  m.paper =
      "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache (Liu et al., ICML "
      "2024, arXiv 2402.02750)";
  m.deviations =
      "Codes bit-packed (the original stores dequantized fp16). Flush boundary "
      "floor(max(0, offset - residual_length) / group) * group as the original.";
  m.docs = "docs/methods/kivi.md";
  m.generic_fields = {"head_dim", "bit_width_inlier"};
  m.fields = {
      option_field("kivi_group_size", &KVCacheConfig::kivi, &KIVIOptions::kivi_group_size,
                   "Group size: tokens per key group (per channel), channels per value group", 1, 4096),
      option_field("residual_length", &KVCacheConfig::kivi, &KIVIOptions::residual_length,
                   "Newest tokens kept in full precision (the fp16 residual window)", 0),
  };
  m.validate = [](const KVCacheConfig& c) { require_bit_width_in(c, 1, 8); };
  m.make_serving = make_kivi_cache;
  m.cache_type_name = "KiviCache";
  m.make_restorable = [] { return std::make_shared<KiviCache>(1, 2, 32, 0); };
  return m;
}

}  // namespace veloxquant
