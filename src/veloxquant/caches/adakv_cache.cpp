#include "veloxquant/caches/adakv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/attention/word_code_rows.h"
#include "veloxquant/caches/adakv_rows.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/rows/group_affine_codes.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "AdaKVCache";

void check_options(const AdaKVOptions& o) {
  const auto bit = [](const char* field, int v) {
    if (v < 1 || v > 8)
      throw QuantizerConfigError(std::string(field) + " must lie in [1, 8], got " + std::to_string(v));
  };
  bit("adakv_lo_bit", o.adakv_lo_bit);
  bit("adakv_mid_bit", o.adakv_mid_bit);
  bit("adakv_hi_bit", o.adakv_hi_bit);
  if (!(o.adakv_lo_bit <= o.adakv_mid_bit && o.adakv_mid_bit <= o.adakv_hi_bit)) {
    throw QuantizerConfigError("adakv_mid_bit (" + std::to_string(o.adakv_mid_bit) +
                               ") must lie between adakv_lo_bit (" + std::to_string(o.adakv_lo_bit) +
                               ") and adakv_hi_bit (" + std::to_string(o.adakv_hi_bit) + ")");
  }
  if (!(o.adakv_target_avg_bits >= o.adakv_lo_bit && o.adakv_target_avg_bits <= o.adakv_hi_bit)) {
    throw QuantizerConfigError("adakv_target_avg_bits must lie in [adakv_lo_bit, adakv_hi_bit] = [" +
                               std::to_string(o.adakv_lo_bit) + ", " + std::to_string(o.adakv_hi_bit) + "], got " +
                               std::to_string(o.adakv_target_avg_bits));
  }
  if (o.adakv_group_size < 1 || o.adakv_group_size > 4096) {
    throw QuantizerConfigError("adakv_group_size must lie in [1, 4096], got " + std::to_string(o.adakv_group_size));
  }
  if (o.adakv_update_interval < 1) {
    throw QuantizerConfigError("adakv_update_interval must be >= 1, got " + std::to_string(o.adakv_update_interval));
  }
  if (o.adakv_obs_window < 1) {
    throw QuantizerConfigError("adakv_obs_window must be >= 1, got " + std::to_string(o.adakv_obs_window));
  }
  if (o.adakv_residual_length < 0) {
    throw QuantizerConfigError("adakv_residual_length must be >= 0, got " + std::to_string(o.adakv_residual_length));
  }
  if (o.adakv_importance == "attention_entropy") {
    // The fused path never materialises attention weights, and the cache sees no queries on
    // update_and_fetch: an entropy proxy would need a second attention pass per step.
    throw QuantizerConfigError(
        "adakv_importance \"attention_entropy\" is not supported here (the cache never sees attention weights); "
        "use \"norm_variance\"");
  }
  if (o.adakv_importance != "norm_variance") {
    throw QuantizerConfigError("adakv_importance must be \"norm_variance\" or \"attention_entropy\", got \"" +
                               o.adakv_importance + "\"");
  }
}
}  // namespace

std::array<int64_t, 3> adakv_tier_counts(int64_t heads, double target, int lo, int mid, int hi) {
  // Exhaustive over (n_hi, n_mid): H is a handful of kv heads. The budget is compared in double
  // with a tolerance far below one bit, so a target like 2.5 * 4 = 10 is met exactly.
  const double budget = target * static_cast<double>(heads) + 1e-9;
  std::array<int64_t, 3> best{0, 0, heads};
  int64_t best_sum = heads * lo;
  for (int64_t n_hi = 0; n_hi <= heads; ++n_hi) {
    for (int64_t n_mid = 0; n_hi + n_mid <= heads; ++n_mid) {
      const int64_t sum = n_hi * hi + n_mid * mid + (heads - n_hi - n_mid) * lo;
      if (static_cast<double>(sum) > budget) continue;
      // Larger sum wins; at equal sums the first found (fewest hi heads, then fewest mid) stays.
      if (sum > best_sum) {
        best_sum = sum;
        best = {n_hi, n_mid, heads - n_hi - n_mid};
      }
    }
  }
  return best;
}

AdaKVCache::AdaKVCache(const AdaKVOptions& options) : options_(options), group_(options.adakv_group_size) {
  check_options(options);
  residual_ = options.adakv_residual_length;
  tail_rows_ = residual_ + group_;
  bits_ = {options.adakv_hi_bit, options.adakv_mid_bit, options.adakv_lo_bit};
}

int64_t AdaKVCache::frontier_for(int64_t offset) const {
  return std::max<int64_t>(0, offset - residual_) / group_ * group_;
}

int AdaKVCache::tier(int64_t b, int64_t h, int64_t block) const { return *row_ptr<uint8_t>(tiers_, b, h, block); }

int AdaKVCache::width(int64_t b, int64_t h, int64_t block) const {
  return bits_[static_cast<std::size_t>(tier(b, h, block))];
}

int64_t AdaKVCache::slot(int64_t b, int64_t h, int64_t block) const {
  const int t = tier(b, h, block);
  int64_t s = 0;
  for (int64_t g = 0; g < h; ++g) s += tier(b, g, block) == t ? 1 : 0;
  return s;
}

double AdaKVCache::assigned_avg_bits() const {
  if (heads_ == 0) return options_.adakv_target_avg_bits;
  double sum = 0;
  for (std::size_t t = 0; t < 3; ++t) sum += static_cast<double>(counts_[t] * bits_[t]);
  return sum / static_cast<double>(heads_);
}

std::size_t AdaKVCache::nbytes() const {
  std::size_t n = key_params_.storage_bytes() + value_params_.storage_bytes() + tiers_.storage_bytes() +
                  norm_stats_.storage_bytes() + tail_k_.storage_bytes() + tail_v_.storage_bytes();
  for (std::size_t t = 0; t < 3; ++t) n += key_codes_[t].storage_bytes() + value_codes_[t].storage_bytes();
  return n;
}

void AdaKVCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  dtype_ = keys.dtype();
  value_groups_ = static_cast<int64_t>(token_groups(static_cast<int>(dv_), group_));
  counts_ = adakv_tier_counts(heads_, options_.adakv_target_avg_bits, options_.adakv_lo_bit, options_.adakv_mid_bit,
                              options_.adakv_hi_bit);
  for (std::size_t t = 0; t < 3; ++t) {
    key_codes_[t] =
        lm::Tensor({batch_, counts_[t], 0, static_cast<int64_t>(core::packed_words(dk_, bits_[t]))}, lm::DType::U32);
    value_codes_[t] =
        lm::Tensor({batch_, counts_[t], 0, static_cast<int64_t>(core::packed_words(dv_, bits_[t]))}, lm::DType::U32);
  }
  key_params_ = lm::Tensor({batch_, heads_, 0, 2 * dk_}, lm::DType::F16);
  value_params_ = lm::Tensor({batch_, heads_, 0, 2 * value_groups_}, lm::DType::F16);
  tiers_ = lm::Tensor({batch_, heads_, 0, 1}, lm::DType::U8);
  norm_stats_ = lm::Tensor({batch_, heads_, 0, 2}, lm::DType::F32);
  tail_k_ = lm::Tensor({batch_, heads_, tail_rows_, dk_}, dtype_);
  tail_v_ = lm::Tensor({batch_, heads_, tail_rows_, dv_}, dtype_);
  capacity_ = 0;
}

void AdaKVCache::ensure_rows(int64_t rows) {
  if (rows <= capacity_) return;
  int64_t grown = capacity_ + ((rows - capacity_ + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  grown = ((grown + group_ - 1) / group_) * group_;
  const int64_t blocks = frontier_ / group_, grown_blocks = grown / group_;
  for (std::size_t t = 0; t < 3; ++t) {
    key_codes_[t] = cache_rows::copy_rows(key_codes_[t], frontier_, grown);
    value_codes_[t] = cache_rows::copy_rows(value_codes_[t], frontier_, grown);
  }
  key_params_ = cache_rows::copy_rows(key_params_, blocks, grown_blocks);
  value_params_ = cache_rows::copy_rows(value_params_, frontier_, grown);
  tiers_ = cache_rows::copy_rows(tiers_, blocks, grown_blocks);
  norm_stats_ = cache_rows::copy_rows(norm_stats_, blocks, grown_blocks);
  capacity_ = grown;
}

void AdaKVCache::flush_block(int64_t b, int64_t block, const float* keys, const float* values) {
  const int64_t g = group_;
  // 1. The block's key-norm statistics per head (double sums, stored as f32: what the window reads).
  for (int64_t h = 0; h < heads_; ++h) {
    double sum = 0, squares = 0;
    for (int64_t r = 0; r < g; ++r) {
      const float* k = keys + (h * g + r) * dk_;
      double norm2 = 0;
      for (int64_t c = 0; c < dk_; ++c) norm2 += static_cast<double>(k[c]) * k[c];
      sum += std::sqrt(norm2);
      squares += norm2;
    }
    float* stats = row_ptr<float>(norm_stats_, b, h, block);
    stats[0] = static_cast<float>(sum);
    stats[1] = static_cast<float>(squares);
  }
  // 2. Tiers: reused inside an update interval, else ranked by the window's norm variance.
  const int64_t interval = options_.adakv_update_interval;
  if (block % interval != 0) {
    for (int64_t h = 0; h < heads_; ++h) {
      *row_ptr<uint8_t>(tiers_, b, h, block) = *row_ptr<uint8_t>(tiers_, b, h, block - block % interval);
    }
  } else {
    const int64_t window_blocks = (options_.adakv_obs_window + g - 1) / g;
    const int64_t first = std::max<int64_t>(0, block - window_blocks + 1);
    const double n = static_cast<double>((block - first + 1) * g);
    thread_local std::vector<double> importance;
    thread_local std::vector<int64_t> order;
    importance.assign(static_cast<std::size_t>(heads_), 0.0);
    for (int64_t h = 0; h < heads_; ++h) {
      double s1 = 0, s2 = 0;
      for (int64_t k = first; k <= block; ++k) {
        s1 += row_ptr<float>(norm_stats_, b, h, k)[0];
        s2 += row_ptr<float>(norm_stats_, b, h, k)[1];
      }
      const double mean = s1 / n;
      importance[static_cast<std::size_t>(h)] = s2 / n - mean * mean;
    }
    order.resize(static_cast<std::size_t>(heads_));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) {
      return importance[static_cast<std::size_t>(a)] > importance[static_cast<std::size_t>(c)];
    });
    for (int64_t i = 0; i < heads_; ++i) {
      const uint8_t t = i < counts_[0] ? 0 : (i < counts_[0] + counts_[1] ? 1 : 2);
      *row_ptr<uint8_t>(tiers_, b, order[static_cast<std::size_t>(i)], block) = t;
    }
  }
  // 3. Each head's KIVI codes at its tier's width, in its tier slot.
  thread_local std::vector<uint8_t> codes;
  codes.resize(static_cast<std::size_t>(g * dk_));
  for (int64_t h = 0; h < heads_; ++h) {
    const int t = tier(b, h, block);
    const int bits = bits_[static_cast<std::size_t>(t)];
    const int64_t s = slot(b, h, block);
    const float* k = keys + h * g * dk_;
    auto* params = reinterpret_cast<core::GroupParams*>(row_ptr<uint16_t>(key_params_, b, h, block));
    for (int64_t c = 0; c < dk_; ++c) {
      params[c] = core::quantize_group(k + c, static_cast<std::size_t>(g), static_cast<std::size_t>(dk_), bits,
                                       codes.data() + c);
    }
    for (int64_t r = 0; r < g; ++r) {
      const int64_t row = block * g + r;
      core::pack_words(codes.data() + r * dk_, static_cast<std::size_t>(dk_), bits,
                       row_ptr<uint32_t>(key_codes_[static_cast<std::size_t>(t)], b, s, row));
      encode_token_row(values + (h * g + r) * dv_, static_cast<int>(dv_), group_, bits,
                       row_ptr<uint32_t>(value_codes_[static_cast<std::size_t>(t)], b, s, row),
                       reinterpret_cast<GroupParams16*>(row_ptr<uint16_t>(value_params_, b, h, row)));
    }
  }
}

void AdaKVCache::decode_keys(int64_t b, int64_t h, int64_t r0, int64_t r1, float* out) const {
  // The rows' codes unpacked to floats in one call (attention/word_code_rows.h: SIMD for every
  // width), the block's (scale, min) pairs widened once, then code * scale + min per element: the
  // same arithmetic as decode_code (rows/group_affine_codes.h), so fetch and fused attention agree.
  const int64_t block = r0 / group_;
  const int t = tier(b, h, block);
  const lm::Tensor& plane = key_codes_[static_cast<std::size_t>(t)];
  attention::kernels::unpack_word_rows(row_ptr<uint32_t>(plane, b, slot(b, h, block), r0), plane.dim(3), r1 - r0, dk_,
                                       bits_[static_cast<std::size_t>(t)], nullptr, out);
  const uint16_t* half = row_ptr<uint16_t>(key_params_, b, h, block);
  thread_local std::vector<float> scale, min;
  scale.resize(static_cast<std::size_t>(dk_));
  min.resize(static_cast<std::size_t>(dk_));
  for (int64_t c = 0; c < dk_; ++c) {
    scale[static_cast<std::size_t>(c)] = base::f16_to_f32(half[2 * c]);
    min[static_cast<std::size_t>(c)] = base::f16_to_f32(half[2 * c + 1]);
  }
  const float* __restrict sc = scale.data();  // restrict: the loop vectorizes without alias checks
  const float* __restrict mn = min.data();
  for (int64_t r = 0; r < r1 - r0; ++r) {
    float* __restrict o = out + r * dk_;
    for (int64_t c = 0; c < dk_; ++c) o[c] = o[c] * sc[c] + mn[c];
  }
}

void AdaKVCache::decode_values(int64_t b, int64_t h, int64_t r0, int64_t r1, float* out) const {
  const int64_t block = r0 / group_;
  const int t = tier(b, h, block);
  const lm::Tensor& plane = value_codes_[static_cast<std::size_t>(t)];
  attention::kernels::unpack_word_rows(row_ptr<uint32_t>(plane, b, slot(b, h, block), r0), plane.dim(3), r1 - r0, dv_,
                                       bits_[static_cast<std::size_t>(t)], nullptr, out);
  for (int64_t r = r0; r < r1; ++r) {
    const uint16_t* half = row_ptr<uint16_t>(value_params_, b, h, r);
    float* __restrict o = out + (r - r0) * dv_;
    for (int64_t gi = 0; gi < value_groups_; ++gi) {
      const float scale = base::f16_to_f32(half[2 * gi]), min = base::f16_to_f32(half[2 * gi + 1]);
      const int64_t c1 = std::min<int64_t>(dv_, (gi + 1) * group_);
      for (int64_t c = gi * group_; c < c1; ++c) o[c] = o[c] * scale + min;
    }
  }
}

lm::KeysValues AdaKVCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void AdaKVCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "AdaKVCache::update_and_fetch");
  if (!tail_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "AdaKVCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2), tail = offset_ - frontier_, pending_rows = tail + s;
  const int64_t blocks = (frontier_for(offset_ + s) - frontier_) / group_;
  if (blocks == 0) {  // no block leaves the residual window: the rows wait in the tail as they are
    lm::copy_token_rows(keys, tail_k_, tail);
    lm::copy_token_rows(values, tail_v_, tail);
    offset_ += s;
    return;
  }
  ensure_rows(frontier_ + blocks * group_);
  // Pending rows of every head = its tail followed by the new rows, in f32 (grow-only buffers).
  thread_local std::vector<float> pk, pv, new_k, new_v, bk, bv;
  cache_rows::widen_to_f32(keys, new_k);
  cache_rows::widen_to_f32(values, new_v);
  pk.resize(static_cast<std::size_t>(heads_ * pending_rows * dk_));
  pv.resize(static_cast<std::size_t>(heads_ * pending_rows * dv_));
  bk.resize(static_cast<std::size_t>(heads_ * group_ * dk_));
  bv.resize(static_cast<std::size_t>(heads_ * group_ * dv_));
  const int64_t kept = pending_rows - blocks * group_;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      float* hk = pk.data() + h * pending_rows * dk_;
      float* hv = pv.data() + h * pending_rows * dv_;
      cache_rows::load_f32(blocks_tail::head_rows(tail_k_, bh, tail_rows_, dk_), dtype_,
                           static_cast<std::size_t>(tail * dk_), hk);
      cache_rows::load_f32(blocks_tail::head_rows(tail_v_, bh, tail_rows_, dv_), dtype_,
                           static_cast<std::size_t>(tail * dv_), hv);
      std::memcpy(hk + tail * dk_, new_k.data() + bh * s * dk_, sizeof(float) * static_cast<std::size_t>(s * dk_));
      std::memcpy(hv + tail * dv_, new_v.data() + bh * s * dv_, sizeof(float) * static_cast<std::size_t>(s * dv_));
    }
    for (int64_t k = 0; k < blocks; ++k) {
      // The block's rows of every head side by side: the allocation ranks the heads together.
      for (int64_t h = 0; h < heads_; ++h) {
        std::memcpy(bk.data() + h * group_ * dk_, pk.data() + (h * pending_rows + k * group_) * dk_,
                    sizeof(float) * static_cast<std::size_t>(group_ * dk_));
        std::memcpy(bv.data() + h * group_ * dv_, pv.data() + (h * pending_rows + k * group_) * dv_,
                    sizeof(float) * static_cast<std::size_t>(group_ * dv_));
      }
      flush_block(b, frontier_ / group_ + k, bk.data(), bv.data());
    }
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      cache_rows::store_f32(pk.data() + (h * pending_rows + blocks * group_) * dk_,
                            static_cast<std::size_t>(kept * dk_), blocks_tail::head_rows(tail_k_, bh, tail_rows_, dk_),
                            dtype_);
      cache_rows::store_f32(pv.data() + (h * pending_rows + blocks * group_) * dv_,
                            static_cast<std::size_t>(kept * dv_), blocks_tail::head_rows(tail_v_, bh, tail_rows_, dv_),
                            dtype_);
    }
  }
  offset_ += s;
  frontier_ += blocks * group_;
}

lm::KeysValues AdaKVCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  std::vector<float> bk(static_cast<std::size_t>(group_ * dk_)), bv(static_cast<std::size_t>(group_ * dv_));
  const int64_t tail = offset_ - frontier_;
  const int64_t ke = static_cast<int64_t>(k.element_size()), ve = static_cast<int64_t>(v.element_size());
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      for (int64_t g = 0; g < frontier_ / group_; ++g) {
        decode_keys(b, h, g * group_, (g + 1) * group_, bk.data());
        decode_values(b, h, g * group_, (g + 1) * group_, bv.data());
        cache_rows::store_f32(bk.data(), bk.size(), k.raw_data() + (bh * offset_ + g * group_) * dk_ * ke, dtype);
        cache_rows::store_f32(bv.data(), bv.size(), v.raw_data() + (bh * offset_ + g * group_) * dv_ * ve, dtype);
      }
      blocks_tail::fetch_head_tail(tail_k_, dtype_, bh, tail_rows_, dk_, tail, frontier_, offset_, k);
      blocks_tail::fetch_head_tail(tail_v_, dtype_, bh, tail_rows_, dv_, tail, frontier_, offset_, v);
    }
  }
  return {std::move(k), std::move(v)};
}

void AdaKVCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("AdaKVCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("AdaKVCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  if (!layouts_ || !layouts_->matches(bits_, dk_, dv_, group_)) {
    layouts_ = std::make_shared<const AdaKVLayouts>(bits_, dk_, dv_, group_);
  }
  const AdaKVRows rows(*this, *layouts_);
  const attention::RowSource* segments[] = {&rows};
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, 1, attention::request_pool(request));
}

int64_t AdaKVCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("AdaKVCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset_);
  const int64_t new_offset = offset_ - removed;
  const int64_t new_frontier = frontier_for(new_offset);
  if (new_frontier < frontier_) {
    // Rows [new_frontier, min(frontier, new_offset)) return to the tail decoded from their codes,
    // followed by the tail rows that survive; the blocks from new_frontier on are dropped with
    // their norm statistics (the next flush recomputes both).
    const int64_t decoded = std::min(frontier_, new_offset) - new_frontier;
    const int64_t surviving = std::max<int64_t>(0, new_offset - frontier_);
    std::vector<float> bk(static_cast<std::size_t>((decoded + surviving) * dk_));
    std::vector<float> bv(static_cast<std::size_t>((decoded + surviving) * dv_));
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < heads_; ++h) {
        const int64_t bh = b * heads_ + h;
        std::byte* rk = blocks_tail::head_rows(tail_k_, bh, tail_rows_, dk_);
        std::byte* rv = blocks_tail::head_rows(tail_v_, bh, tail_rows_, dv_);
        cache_rows::load_f32(rk, dtype_, static_cast<std::size_t>(surviving * dk_), bk.data() + decoded * dk_);
        cache_rows::load_f32(rv, dtype_, static_cast<std::size_t>(surviving * dv_), bv.data() + decoded * dv_);
        for (int64_t a = new_frontier; a < new_frontier + decoded;) {
          const int64_t end = std::min(new_frontier + decoded, (a / group_ + 1) * group_);
          decode_keys(b, h, a, end, bk.data() + (a - new_frontier) * dk_);
          decode_values(b, h, a, end, bv.data() + (a - new_frontier) * dv_);
          a = end;
        }
        cache_rows::store_f32(bk.data(), bk.size(), rk, dtype_);
        cache_rows::store_f32(bv.data(), bv.size(), rv, dtype_);
      }
    }
    frontier_ = new_frontier;
  }
  offset_ = new_offset;
  return removed;
}

std::vector<lm::Tensor> AdaKVCache::state() const {
  if (!tail_k_.defined()) return {};
  const int64_t blocks = frontier_ / group_, tail = offset_ - frontier_;
  std::vector<lm::Tensor> s;
  for (std::size_t t = 0; t < 3; ++t) s.push_back(key_codes_[t].slice(2, 0, frontier_));
  for (std::size_t t = 0; t < 3; ++t) s.push_back(value_codes_[t].slice(2, 0, frontier_));
  s.push_back(key_params_.slice(2, 0, blocks));
  s.push_back(value_params_.slice(2, 0, frontier_));
  s.push_back(tiers_.slice(2, 0, blocks));
  s.push_back(norm_stats_.slice(2, 0, blocks));
  s.push_back(tail_k_.slice(2, 0, tail));
  s.push_back(tail_v_.slice(2, 0, tail));
  return s;
}

std::vector<std::string> AdaKVCache::meta_state() const {
  const AdaKVOptions& o = options_;
  return {blocks_tail::exact_double(o.adakv_target_avg_bits),
          std::to_string(o.adakv_lo_bit),
          std::to_string(o.adakv_mid_bit),
          std::to_string(o.adakv_hi_bit),
          std::to_string(o.adakv_group_size),
          std::to_string(o.adakv_update_interval),
          o.adakv_importance,
          std::to_string(o.adakv_obs_window),
          std::to_string(o.adakv_residual_length),
          std::to_string(offset_),
          std::to_string(frontier_),
          std::string(lm::dtype_name(dtype_))};
}

void AdaKVCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "AdaKVCache::from_state";
  if (meta.size() != 12) {
    throw base::FormatError(std::string(who) +
                            ": expected 12 meta entries (target, lo, mid, hi, group, interval, "
                            "importance, window, residual, offset, frontier, dtype), got " +
                            std::to_string(meta.size()));
  }
  AdaKVOptions o;
  o.adakv_target_avg_bits = blocks_tail::parse_meta_double(meta[0], who, "target bits");
  o.adakv_lo_bit = static_cast<int>(cache_rows::parse_meta_int(meta[1], who, "lo bit"));
  o.adakv_mid_bit = static_cast<int>(cache_rows::parse_meta_int(meta[2], who, "mid bit"));
  o.adakv_hi_bit = static_cast<int>(cache_rows::parse_meta_int(meta[3], who, "hi bit"));
  o.adakv_group_size = static_cast<int>(cache_rows::parse_meta_int(meta[4], who, "group"));
  o.adakv_update_interval = static_cast<int>(cache_rows::parse_meta_int(meta[5], who, "update interval"));
  o.adakv_importance = meta[6];
  o.adakv_obs_window = static_cast<int>(cache_rows::parse_meta_int(meta[7], who, "observation window"));
  o.adakv_residual_length = static_cast<int>(cache_rows::parse_meta_int(meta[8], who, "residual length"));
  AdaKVCache fresh(o);
  blocks_tail::TailMeta saved;
  saved.offset = cache_rows::parse_meta_int(meta[9], who, "offset");
  saved.frontier = cache_rows::parse_meta_int(meta[10], who, "frontier");
  try {
    saved.dtype = lm::parse_float_dtype(meta[11]);
  } catch (const base::InvalidArgument& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  // The frontier is a function of the offset (store and trim keep it so).
  if (saved.offset < 0 || saved.frontier != fresh.frontier_for(saved.offset)) {
    throw base::FormatError(std::string(who) + ": inconsistent offset " + meta[9] + " / frontier " + meta[10]);
  }
  const int64_t offset = saved.offset, frontier = saved.frontier, blocks = frontier / fresh.group_;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[9]);
    *this = fresh;
    return;
  }
  if (state.size() != 12)
    throw base::FormatError(std::string(who) + ": expected 12 tensors, got " + std::to_string(state.size()));
  const lm::Tensor& tk = state[10];
  const lm::Tensor& tv = state[11];
  if (tk.ndim() != 4 || tv.ndim() != 4) throw base::FormatError(std::string(who) + ": tail tensors must be 4-d");
  // The shapes the saved layout implies, then every tensor held to them.
  fresh.allocate(lm::Tensor({tk.dim(0), tk.dim(1), 1, tk.dim(3)}, saved.dtype),
                 lm::Tensor({tv.dim(0), tv.dim(1), 1, tv.dim(3)}, saved.dtype));
  blocks_tail::check_tail_state(tk, tv, offset - frontier, who, meta[9], meta[10]);
  std::vector<const lm::Tensor*> like;
  std::vector<int64_t> rows;
  for (std::size_t t = 0; t < 3; ++t) like.push_back(&fresh.key_codes_[t]), rows.push_back(frontier);
  for (std::size_t t = 0; t < 3; ++t) like.push_back(&fresh.value_codes_[t]), rows.push_back(frontier);
  for (const lm::Tensor* t : {&fresh.key_params_, &fresh.value_params_, &fresh.tiers_, &fresh.norm_stats_})
    like.push_back(t);
  for (int64_t r : {blocks, frontier, blocks, blocks}) rows.push_back(r);
  for (std::size_t i = 0; i < 10; ++i) {
    const lm::Tensor& s = state[i];
    if (s.ndim() != 4 || s.dim(0) != like[i]->dim(0) || s.dim(1) != like[i]->dim(1) || s.dim(2) != rows[i] ||
        s.dim(3) != like[i]->dim(3) || s.dtype() != like[i]->dtype()) {
      throw base::FormatError(std::string(who) + ": tensor " + std::to_string(i) + " " + lm::shape_text(s.shape()) +
                              " does not match " + std::to_string(rows[i]) + " rows");
    }
  }
  fresh.capacity_ = ((offset + fresh.group_ - 1) / fresh.group_) * fresh.group_;
  const int64_t cap_blocks = fresh.capacity_ / fresh.group_;
  for (std::size_t t = 0; t < 3; ++t) {
    fresh.key_codes_[t] = cache_rows::copy_rows(state[t], frontier, fresh.capacity_);
    fresh.value_codes_[t] = cache_rows::copy_rows(state[3 + t], frontier, fresh.capacity_);
  }
  fresh.key_params_ = cache_rows::copy_rows(state[6], blocks, cap_blocks);
  fresh.value_params_ = cache_rows::copy_rows(state[7], frontier, fresh.capacity_);
  fresh.tiers_ = cache_rows::copy_rows(state[8], blocks, cap_blocks);
  fresh.norm_stats_ = cache_rows::copy_rows(state[9], blocks, cap_blocks);
  // Every block must split its heads exactly as the tier counts say (the slots index by it).
  for (int64_t b = 0; b < fresh.batch_; ++b) {
    for (int64_t g = 0; g < blocks; ++g) {
      std::array<int64_t, 3> seen{};
      for (int64_t h = 0; h < fresh.heads_; ++h) {
        const int t = fresh.tier(b, h, g);
        if (t > 2)
          throw base::FormatError(std::string(who) + ": block " + std::to_string(g) + " has tier " + std::to_string(t));
        ++seen[static_cast<std::size_t>(t)];
      }
      if (seen != fresh.counts_) {
        throw base::FormatError(std::string(who) + ": block " + std::to_string(g) +
                                "'s tiers do not match the layer's counts");
      }
    }
  }
  lm::copy_token_rows(tk.astype(saved.dtype), fresh.tail_k_, 0);
  lm::copy_token_rows(tv.astype(saved.dtype), fresh.tail_v_, 0);
  fresh.offset_ = offset;
  fresh.frontier_ = frontier;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> AdaKVCache::clone() const {
  auto copy = std::make_shared<AdaKVCache>(*this);
  for (std::size_t t = 0; t < 3; ++t) {
    copy->key_codes_[t] = key_codes_[t].clone();
    copy->value_codes_[t] = value_codes_[t].clone();
  }
  copy->key_params_ = key_params_.clone();
  copy->value_params_ = value_params_.clone();
  copy->tiers_ = tiers_.clone();
  copy->norm_stats_ = norm_stats_.clone();
  copy->tail_k_ = tail_k_.clone();
  copy->tail_v_ = tail_v_.clone();
  return copy;
}

void validate_adakv_options(const KVCacheConfig& config) { check_options(config.options<AdaKVOptions>()); }

std::shared_ptr<lm::KVCache> make_adakv_cache(const KVCacheConfig& config) {
  validate_adakv_options(config);
  return std::make_shared<AdaKVCache>(config.options<AdaKVOptions>());
}

MethodDescriptor adakv_method() {
  MethodDescriptor m;
  m.name = "adakv";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Per-head bit widths on KIVI's group code: every block of adakv_group_size tokens gives each kv head "
      "lo, mid or hi bits (keys and values) so the layer's mean stays at or just below adakv_target_avg_bits, "
      "the heads with the most variable key norms getting the most";
  m.paper =
      "Ada-KV: adaptive budget allocation (Feng et al., arXiv 2407.11550), as the original's \"AdaKV-proxy\": "
      "per-head bit widths instead of per-head eviction budgets";
  m.deviations =
      "Widths are decided per block of adakv_group_size tokens when it is flushed and stored with it (the "
      "original only counts bits); the observation window is rounded up to whole blocks and "
      "adakv_update_interval counts blocks; the mean over heads is the largest reachable value not above "
      "the target (2.33 bits for 3 heads at 2.5). Importance is the key-norm variance, larger = more bits "
      "(the original's sign, inverted vs the paper); attention_entropy is rejected. The newest "
      "adakv_residual_length (KIVI's 128) tokens stay in the input dtype, a setting the original inherits "
      "from KIVI and this names; trim returns a reopened block decoded from its codes.";
  m.docs = "docs/methods/adakv.md";
  m.fields = {
      option_field("adakv_target_avg_bits", &AdaKVOptions::adakv_target_avg_bits,
                   "Target mean bits over a layer's kv heads, in [adakv_lo_bit, adakv_hi_bit]"),
      option_field("adakv_lo_bit", &AdaKVOptions::adakv_lo_bit, "Bits of the least important heads", 1, 8),
      option_field("adakv_mid_bit", &AdaKVOptions::adakv_mid_bit, "Bits of the middle heads", 1, 8),
      option_field("adakv_hi_bit", &AdaKVOptions::adakv_hi_bit, "Bits of the most important heads", 1, 8),
      option_field("adakv_group_size", &AdaKVOptions::adakv_group_size,
                   "Tokens per block (one width per head and block; KIVI's group size for keys and values)", 1, 4096),
      option_field("adakv_update_interval", &AdaKVOptions::adakv_update_interval,
                   "Blocks between re-allocations of the widths", 1, 1 << 20),
      option_field("adakv_importance", &AdaKVOptions::adakv_importance,
                   "Head importance: \"norm_variance\" (\"attention_entropy\" is not supported here)"),
      option_field("adakv_obs_window", &AdaKVOptions::adakv_obs_window,
                   "Recent tokens whose key norms rank the heads (rounded up to whole blocks)", 1, 1 << 20),
      option_field("adakv_residual_length", &AdaKVOptions::adakv_residual_length,
                   "Newest tokens kept in the input dtype (KIVI's residual window, inherited by the original)", 0,
                   1 << 20),
  };
  m.validate = validate_adakv_options;
  m.make_serving = make_adakv_cache;
  m.cache_type_name = kTypeName;
  // Placeholder options: from_state() rebuilds every one of them from meta_state().
  m.make_restorable = [] { return std::make_shared<AdaKVCache>(AdaKVOptions{}); };
  return m;
}

}  // namespace veloxquant
