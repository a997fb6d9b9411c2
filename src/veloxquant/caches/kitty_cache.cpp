#include "veloxquant/caches/kitty_cache.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/caches/kitty_rows.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/rows/group_affine_codes.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "KittyCache";

int64_t mask_words(int64_t d) { return (d + 31) / 32; }
}  // namespace

KittyCache::KittyCache(double hi_fraction, int hi_bit, int lo_bit, int group_size)
    : hi_fraction_(hi_fraction), hi_bit_(hi_bit), lo_bit_(lo_bit), group_(group_size) {
  if (hi_bit < 1 || hi_bit > 8 || lo_bit < 1 || lo_bit > 8) {
    throw QuantizerConfigError("kitty: bits must lie in [1, 8], got hi " + std::to_string(hi_bit) + ", lo " +
                               std::to_string(lo_bit));
  }
  if (group_size < 1) throw QuantizerConfigError("kitty_group_size must be >= 1, got " + std::to_string(group_size));
  if (!(hi_fraction >= 0.0 && hi_fraction <= 1.0)) {
    throw QuantizerConfigError("kitty_hi_fraction must lie in [0, 1], got " + std::to_string(hi_fraction));
  }
}

double KittyCache::assigned_avg_bits() const {
  if (dk_ == 0) return hi_fraction_ * hi_bit_ + (1.0 - hi_fraction_) * lo_bit_;
  return static_cast<double>(n_hi_ * hi_bit_ + (dk_ - n_hi_) * lo_bit_) / static_cast<double>(dk_);
}

std::size_t KittyCache::nbytes() const {
  return hi_codes_.storage_bytes() + lo_codes_.storage_bytes() + key_params_.storage_bytes() +
         hi_mask_.storage_bytes() + values_.storage_bytes() + tail_k_.storage_bytes();
}

bool KittyCache::is_high(int64_t b, int64_t h, int64_t block, int64_t c) const {
  return (row_ptr<uint32_t>(hi_mask_, b, h, block)[c / 32] >> (c % 32)) & 1u;
}

void KittyCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  dtype_ = keys.dtype();
  n_hi_ = std::clamp<int64_t>(std::llround(hi_fraction_ * static_cast<double>(dk_)), 0, dk_);
  tail_k_ = lm::Tensor({batch_, heads_, group_, dk_}, dtype_);
  values_ = lm::Tensor({batch_, heads_, 0, dv_}, dtype_);
  hi_codes_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(n_hi_, hi_bit_))}, lm::DType::U32);
  lo_codes_ =
      lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(dk_ - n_hi_, lo_bit_))}, lm::DType::U32);
  key_params_ = lm::Tensor({batch_, heads_, 0, 2 * dk_}, lm::DType::F16);
  hi_mask_ = lm::Tensor({batch_, heads_, 0, mask_words(dk_)}, lm::DType::U32);
  hi_order_ = std::make_shared<const attention::CodeOrder>(hi_bit_, n_hi_);
  lo_order_ = std::make_shared<const attention::CodeOrder>(lo_bit_, dk_ - n_hi_);
  capacity_ = 0;
}

void KittyCache::ensure_rows(int64_t rows) {
  if (rows <= capacity_) return;
  // Whole 256-token steps, rounded up to whole blocks: values and key blocks grow together.
  int64_t grown = capacity_ + ((rows - capacity_ + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  grown = ((grown + group_ - 1) / group_) * group_;
  values_ = cache_rows::copy_rows(values_, offset_, grown);
  hi_codes_ = cache_rows::copy_rows(hi_codes_, frontier_, grown);
  lo_codes_ = cache_rows::copy_rows(lo_codes_, frontier_, grown);
  key_params_ = cache_rows::copy_rows(key_params_, frontier_ / group_, grown / group_);
  hi_mask_ = cache_rows::copy_rows(hi_mask_, frontier_ / group_, grown / group_);
  capacity_ = grown;
}

void KittyCache::flush_block(int64_t b, int64_t h, int64_t block, const float* keys) {
  // Channels ranked by their variance over the block's rows (two passes in double: the rank does
  // not depend on summation order); the n_hi largest are high, ties to the lower channel.
  thread_local std::vector<double> variance;
  thread_local std::vector<int64_t> order;
  variance.assign(static_cast<std::size_t>(dk_), 0.0);
  for (int64_t c = 0; c < dk_; ++c) {
    double mean = 0.0;
    for (int64_t t = 0; t < group_; ++t) mean += keys[t * dk_ + c];
    mean /= static_cast<double>(group_);
    double v = 0.0;
    for (int64_t t = 0; t < group_; ++t) v += (keys[t * dk_ + c] - mean) * (keys[t * dk_ + c] - mean);
    variance[static_cast<std::size_t>(c)] = v;
  }
  order.resize(static_cast<std::size_t>(dk_));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) {
    return variance[static_cast<std::size_t>(a)] > variance[static_cast<std::size_t>(c)];
  });
  uint32_t* mask = row_ptr<uint32_t>(hi_mask_, b, h, block);
  std::fill(mask, mask + mask_words(dk_), 0u);
  for (int64_t i = 0; i < n_hi_; ++i) {
    const int64_t c = order[static_cast<std::size_t>(i)];
    mask[c / 32] |= 1u << (c % 32);
  }
  // KIVI's per-channel code over the block's rows, each channel at its tier's bits.
  thread_local std::vector<uint8_t> codes, hi_row, lo_row;
  codes.resize(static_cast<std::size_t>(group_ * dk_));
  auto* params = reinterpret_cast<core::GroupParams*>(row_ptr<uint16_t>(key_params_, b, h, block));
  for (int64_t c = 0; c < dk_; ++c) {
    const bool high = (mask[c / 32] >> (c % 32)) & 1u;
    params[c] = core::quantize_group(keys + c, static_cast<std::size_t>(group_), static_cast<std::size_t>(dk_),
                                     high ? hi_bit_ : lo_bit_, codes.data() + c);
  }
  hi_row.resize(static_cast<std::size_t>(n_hi_));
  lo_row.resize(static_cast<std::size_t>(dk_ - n_hi_));
  for (int64_t t = 0; t < group_; ++t) {
    std::size_t nh = 0, nl = 0;
    for (int64_t c = 0; c < dk_; ++c) {
      const uint8_t code = codes[static_cast<std::size_t>(t * dk_ + c)];
      if ((mask[c / 32] >> (c % 32)) & 1u) {
        hi_row[nh++] = code;
      } else {
        lo_row[nl++] = code;
      }
    }
    const int64_t row = block * group_ + t;
    if (nh > 0) core::pack_words(hi_row.data(), nh, hi_bit_, row_ptr<uint32_t>(hi_codes_, b, h, row));
    if (nl > 0) core::pack_words(lo_row.data(), nl, lo_bit_, row_ptr<uint32_t>(lo_codes_, b, h, row));
  }
}

void KittyCache::decode_block(int64_t b, int64_t h, int64_t block, float* out) const {
  thread_local std::vector<uint8_t> hi_row, lo_row;
  hi_row.resize(static_cast<std::size_t>(n_hi_));
  lo_row.resize(static_cast<std::size_t>(dk_ - n_hi_));
  const auto* params = reinterpret_cast<const GroupParams16*>(row_ptr<uint16_t>(key_params_, b, h, block));
  const uint32_t* mask = row_ptr<uint32_t>(hi_mask_, b, h, block);
  for (int64_t t = 0; t < group_; ++t) {
    const int64_t row = block * group_ + t;
    if (n_hi_ > 0) core::unpack_words(row_ptr<uint32_t>(hi_codes_, b, h, row), hi_row.size(), hi_bit_, hi_row.data());
    if (n_hi_ < dk_) core::unpack_words(row_ptr<uint32_t>(lo_codes_, b, h, row), lo_row.size(), lo_bit_, lo_row.data());
    std::size_t nh = 0, nl = 0;
    for (int64_t c = 0; c < dk_; ++c) {
      const uint8_t code = (mask[c / 32] >> (c % 32)) & 1u ? hi_row[nh++] : lo_row[nl++];
      out[t * dk_ + c] = decode_code(code, params[c]);
    }
  }
}

lm::KeysValues KittyCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void KittyCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "KittyCache::update_and_fetch");
  if (!tail_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "KittyCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2), tail = offset_ - frontier_, pending_rows = tail + s;
  const int64_t blocks = pending_rows / group_;
  ensure_rows(offset_ + s);
  lm::copy_token_rows(values, values_, offset_);  // values are kept as given
  if (blocks == 0) {  // the block is not complete yet: the keys wait in the tail as they are
    lm::copy_token_rows(keys, tail_k_, tail);
    offset_ += s;
    return;
  }
  // Pending keys = the tail followed by the new rows, in f32 (grow-only per-thread buffers).
  thread_local std::vector<float> pk, new_k;
  pk.resize(static_cast<std::size_t>(pending_rows * dk_));
  cache_rows::widen_to_f32(keys, new_k);
  const int64_t kept = pending_rows - blocks * group_;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      blocks_tail::gather_pending(tail_k_, dtype_, bh, group_, dk_, tail, new_k.data(), s, pk.data());
      for (int64_t k = 0; k < blocks; ++k) flush_block(b, h, frontier_ / group_ + k, pk.data() + k * group_ * dk_);
      blocks_tail::keep_in_tail(pk.data() + blocks * group_ * dk_, kept, tail_k_, dtype_, bh, group_, dk_);
    }
  }
  offset_ += s;
  frontier_ += blocks * group_;
}

lm::KeysValues KittyCache::fetch(lm::DType dtype) const {
  return blocks_tail::fetch_coded_keys(
      {batch_, heads_, dk_, dv_, offset_, frontier_, group_, dtype_}, tail_k_, values_, dtype,
      [this](int64_t b, int64_t h, int64_t g, float* out) { decode_block(b, h, g, out); });
}

void KittyCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("KittyCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("KittyCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  const KittyRows rows({hi_codes_, lo_codes_, key_params_, hi_mask_}, tail_k_, values_, frontier_, offset_, group_,
                       *hi_order_, *lo_order_);
  const attention::RowSource* segments[] = {&rows};
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, 1, attention::request_pool(request));
}

int64_t KittyCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("KittyCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset_);
  const int64_t new_offset = offset_ - removed;
  const int64_t new_frontier = new_offset / group_ * group_;
  if (new_frontier < frontier_) {
    // Block new_frontier / G returns to the tail (only its rows below new_offset survive),
    // decoded from its codes; every block above it is dropped whole.
    std::vector<float> block(static_cast<std::size_t>(group_ * dk_));
    const int64_t kept = new_offset - new_frontier;
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < heads_; ++h) {
        const int64_t bh = b * heads_ + h;
        decode_block(b, h, new_frontier / group_, block.data());
        cache_rows::store_f32(block.data(), static_cast<std::size_t>(kept * dk_),
                              blocks_tail::head_rows(tail_k_, bh, group_, dk_), dtype_);
      }
    }
    frontier_ = new_frontier;
  }
  offset_ = new_offset;
  return removed;
}

std::vector<lm::Tensor> KittyCache::state() const {
  if (!tail_k_.defined()) return {};
  const int64_t blocks = frontier_ / group_;
  return {hi_codes_.slice(2, 0, frontier_), lo_codes_.slice(2, 0, frontier_), key_params_.slice(2, 0, blocks),
          hi_mask_.slice(2, 0, blocks),     values_.slice(2, 0, offset_),     tail_k_.slice(2, 0, offset_ - frontier_)};
}

std::vector<std::string> KittyCache::meta_state() const {
  return {blocks_tail::exact_double(hi_fraction_),
          std::to_string(hi_bit_),
          std::to_string(lo_bit_),
          std::to_string(group_),
          std::to_string(offset_),
          std::to_string(frontier_),
          std::string(lm::dtype_name(dtype_))};
}

void KittyCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "KittyCache::from_state";
  if (meta.size() != 7) {
    throw base::FormatError(std::string(who) + ": expected 7 meta entries (hi fraction, hi bit, lo bit, group, " +
                            "offset, frontier, dtype), got " + std::to_string(meta.size()));
  }
  const double fraction = blocks_tail::parse_meta_double(meta[0], who, "hi fraction");
  KittyCache fresh(fraction, static_cast<int>(cache_rows::parse_meta_int(meta[1], who, "hi bit")),
                   static_cast<int>(cache_rows::parse_meta_int(meta[2], who, "lo bit")),
                   static_cast<int>(cache_rows::parse_meta_int(meta[3], who, "group")));
  const blocks_tail::TailMeta saved = blocks_tail::parse_tail_meta(meta, 4, fresh.group_, who);
  const int64_t offset = saved.offset, frontier = saved.frontier;
  const lm::DType dtype = saved.dtype;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[4]);
    *this = fresh;
    return;
  }
  if (state.size() != 6)
    throw base::FormatError(std::string(who) + ": expected 6 tensors, got " + std::to_string(state.size()));
  const lm::Tensor& values = state[4];
  const lm::Tensor& tail = state[5];
  if (values.ndim() != 4 || tail.ndim() != 4 || values.dim(2) != offset || tail.dim(2) != offset - frontier) {
    throw base::FormatError(std::string(who) + ": value / tail rows do not match offset " + meta[4] + " / frontier " +
                            meta[5]);
  }
  fresh.allocate(tail.astype(dtype), values.astype(dtype));
  const int64_t blocks = frontier / fresh.group_;
  const lm::Tensor* like[] = {&fresh.hi_codes_, &fresh.lo_codes_, &fresh.key_params_, &fresh.hi_mask_};
  const int64_t rows[] = {frontier, frontier, blocks, blocks};
  for (int i = 0; i < 4; ++i) {
    const lm::Tensor& s = state[static_cast<std::size_t>(i)];
    if (s.ndim() != 4 || s.dim(0) != fresh.batch_ || s.dim(1) != fresh.heads_ || s.dim(2) != rows[i] ||
        s.dim(3) != like[i]->dim(3) || s.dtype() != like[i]->dtype()) {
      throw base::FormatError(std::string(who) + ": tensor " + std::to_string(i) + " " + lm::shape_text(s.shape()) +
                              " does not match " + std::to_string(rows[i]) + " rows");
    }
  }
  fresh.capacity_ = ((offset + fresh.group_ - 1) / fresh.group_) * fresh.group_;
  fresh.hi_codes_ = cache_rows::copy_rows(state[0], frontier, fresh.capacity_);
  fresh.lo_codes_ = cache_rows::copy_rows(state[1], frontier, fresh.capacity_);
  fresh.key_params_ = cache_rows::copy_rows(state[2], blocks, fresh.capacity_ / fresh.group_);
  fresh.hi_mask_ = cache_rows::copy_rows(state[3], blocks, fresh.capacity_ / fresh.group_);
  fresh.values_ = cache_rows::copy_rows(values.astype(dtype), offset, fresh.capacity_);
  // Every block's mask must name exactly n_hi channels (the code planes' widths depend on it).
  for (int64_t b = 0; b < fresh.batch_; ++b) {
    for (int64_t h = 0; h < fresh.heads_; ++h) {
      for (int64_t g = 0; g < blocks; ++g) {
        int64_t count = 0;
        for (int64_t c = 0; c < fresh.dk_; ++c) count += fresh.is_high(b, h, g, c) ? 1 : 0;
        const uint32_t* mask = row_ptr<uint32_t>(fresh.hi_mask_, b, h, g);
        const bool stray = fresh.dk_ % 32 != 0 && (mask[fresh.dk_ / 32] >> (fresh.dk_ % 32)) != 0;
        if (count != fresh.n_hi_ || stray) {
          throw base::FormatError(std::string(who) + ": block " + std::to_string(g) + "'s channel mask does not hold " +
                                  std::to_string(fresh.n_hi_) + " channels");
        }
      }
    }
  }
  lm::copy_token_rows(tail.astype(dtype), fresh.tail_k_, 0);
  fresh.offset_ = offset;
  fresh.frontier_ = frontier;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> KittyCache::clone() const {
  auto copy = std::make_shared<KittyCache>(*this);
  copy->hi_codes_ = hi_codes_.clone();
  copy->lo_codes_ = lo_codes_.clone();
  copy->key_params_ = key_params_.clone();
  copy->hi_mask_ = hi_mask_.clone();
  copy->values_ = values_.clone();
  copy->tail_k_ = tail_k_.clone();
  return copy;
}

void validate_kitty_options(const KVCacheConfig& config) {
  const KittyOptions& o = config.options<KittyOptions>();
  if (!(o.kitty_hi_fraction >= 0.0 && o.kitty_hi_fraction <= 1.0)) {
    throw QuantizerConfigError("kitty_hi_fraction must lie in [0, 1], got " + std::to_string(o.kitty_hi_fraction));
  }
  if (o.kitty_hi_bit < 1 || o.kitty_hi_bit > 8) {
    throw QuantizerConfigError("kitty_hi_bit must lie in [1, 8], got " + std::to_string(o.kitty_hi_bit));
  }
  if (o.kitty_lo_bit < 1 || o.kitty_lo_bit > 8) {
    throw QuantizerConfigError("kitty_lo_bit must lie in [1, 8], got " + std::to_string(o.kitty_lo_bit));
  }
  if (o.kitty_lo_bit > o.kitty_hi_bit) {
    throw QuantizerConfigError("kitty_lo_bit (" + std::to_string(o.kitty_lo_bit) + ") must not exceed kitty_hi_bit (" +
                               std::to_string(o.kitty_hi_bit) + ")");
  }
  if (o.kitty_group_size < 1 || o.kitty_group_size > 4096) {
    throw QuantizerConfigError("kitty_group_size must lie in [1, 4096], got " + std::to_string(o.kitty_group_size));
  }
}

std::shared_ptr<lm::KVCache> make_kitty_cache(const KVCacheConfig& config) {
  validate_kitty_options(config);
  const KittyOptions& o = config.options<KittyOptions>();
  return std::make_shared<KittyCache>(o.kitty_hi_fraction, o.kitty_hi_bit, o.kitty_lo_bit, o.kitty_group_size);
}

MethodDescriptor kitty_method() {
  MethodDescriptor m;
  m.name = "kitty";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Channel-wise mixed-precision keys: in every block of kitty_group_size tokens the kitty_hi_fraction most "
      "variable key channels get kitty_hi_bit, the rest kitty_lo_bit; values kept as given";
  m.paper =
      "Kitty: dynamic channel-wise mixed-precision KV cache quantization (arXiv 2511.18643; \"inspired by\" in "
      "the original)";
  m.deviations =
      "Channels are ranked by their variance within each block of kitty_group_size tokens, once, when the "
      "block is complete (the original ranks by a running variance over all tokens at every step and only "
      "counts bytes); each channel is KIVI's per-channel group code over the block. Values are kept in the "
      "input dtype (as the original). The incomplete last block's keys stay in the input dtype. Trim "
      "returns a reopened block's keys decoded from their codes.";
  m.docs = "docs/methods/kitty.md";
  m.fields = {
      option_field("kitty_hi_fraction", &KittyOptions::kitty_hi_fraction,
                   "Fraction of the key channels given kitty_hi_bit in each block, in [0, 1]"),
      option_field("kitty_hi_bit", &KittyOptions::kitty_hi_bit, "Bits of the high-variance key channels", 1, 8),
      option_field("kitty_lo_bit", &KittyOptions::kitty_lo_bit, "Bits of the other key channels", 1, 8),
      option_field("kitty_group_size", &KittyOptions::kitty_group_size,
                   "Tokens per block (ranked together, one (scale, min) per channel)", 1, 4096),
  };
  m.validate = validate_kitty_options;
  m.make_serving = make_kitty_cache;
  m.cache_type_name = kTypeName;
  // Placeholder parameters: from_state() rebuilds every one of them from meta_state().
  m.make_restorable = [] { return std::make_shared<KittyCache>(0.25, 4, 2, 32); };
  return m;
}

}  // namespace veloxquant
