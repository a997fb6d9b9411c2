#include "veloxquant/caches/zipcache_cache.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/caches/kivi_row_source.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/rows/group_affine_codes.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "ZipCacheCache";

int64_t high_rows(double fraction, int group) { return std::clamp<int64_t>(std::llround(fraction * group), 0, group); }
}  // namespace

ZipCache::ZipCache(int hi_bits, int lo_bits, double hi_fraction, int group_size)
    : hi_bits_(hi_bits), lo_bits_(lo_bits), group_(group_size), hi_fraction_(hi_fraction) {
  if (hi_bits < 1 || hi_bits > 8 || lo_bits < 1 || lo_bits > 8) {
    throw QuantizerConfigError("zipcache: bits must lie in [1, 8], got hi " + std::to_string(hi_bits) + ", lo " +
                               std::to_string(lo_bits));
  }
  if (group_size < 1) throw QuantizerConfigError("zipcache_group_size must be >= 1, got " + std::to_string(group_size));
  if (!(hi_fraction >= 0.0 && hi_fraction <= 1.0)) {
    throw QuantizerConfigError("zipcache_hi_fraction must lie in [0, 1], got " + std::to_string(hi_fraction));
  }
  tiers_[0].bits = hi_bits;
  tiers_[0].per_block = high_rows(hi_fraction, group_size);
  tiers_[1].bits = lo_bits;
  tiers_[1].per_block = group_size - tiers_[0].per_block;
}

double ZipCache::assigned_avg_bits() const {
  return static_cast<double>(tiers_[0].per_block * hi_bits_ + tiers_[1].per_block * lo_bits_) / group_;
}

std::size_t ZipCache::nbytes() const {
  std::size_t total = tail_k_.storage_bytes() + tail_v_.storage_bytes();
  for (const Tier& t : tiers_) {
    total += t.key_codes.storage_bytes() + t.key_params.storage_bytes() + t.value_codes.storage_bytes() +
             t.value_params.storage_bytes() + t.positions.storage_bytes();
  }
  return total;
}

void ZipCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  dtype_ = keys.dtype();
  // The incomplete block: at most G - 1 rows after a call, so G rows never grow.
  tail_k_ = lm::Tensor({batch_, heads_, group_, dk_}, dtype_);
  tail_v_ = lm::Tensor({batch_, heads_, group_, dv_}, dtype_);
  const int64_t gv = static_cast<int64_t>(token_groups(static_cast<int>(dv_), group_));
  for (Tier& t : tiers_) {
    t.key_codes =
        lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(dk_, t.bits))}, lm::DType::U32);
    t.key_params = lm::Tensor({batch_, heads_, 0, 2 * dk_}, lm::DType::F16);
    t.value_codes =
        lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(dv_, t.bits))}, lm::DType::U32);
    t.value_params = lm::Tensor({batch_, heads_, 0, 2 * gv}, lm::DType::F16);
    t.positions = lm::Tensor({batch_, heads_, 0, 1}, lm::DType::I32);
    t.key_order = std::make_shared<const attention::CodeOrder>(t.bits, dk_);
    t.value_order = std::make_shared<const attention::CodeOrder>(t.bits, dv_, group_);
  }
  capacity_blocks_ = 0;
}

void ZipCache::ensure_blocks(int64_t blocks) {
  if (blocks <= capacity_blocks_) return;
  // Whole 256-token steps, rounded up to whole blocks (as KIVI grows its quantized region).
  const int64_t have = capacity_blocks_ * group_, need = blocks * group_;
  const int64_t tokens = have + ((need - have + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  const int64_t grown = (tokens + group_ - 1) / group_, filled = frontier_ / group_;
  for (Tier& t : tiers_) {
    if (t.per_block == 0) continue;  // an empty tier holds nothing, not even params
    t.key_codes = cache_rows::copy_rows(t.key_codes, filled * t.per_block, grown * t.per_block);
    t.key_params = cache_rows::copy_rows(t.key_params, filled, grown);
    t.value_codes = cache_rows::copy_rows(t.value_codes, filled * t.per_block, grown * t.per_block);
    t.value_params = cache_rows::copy_rows(t.value_params, filled * t.per_block, grown * t.per_block);
    t.positions = cache_rows::copy_rows(t.positions, filled * t.per_block, grown * t.per_block);
  }
  capacity_blocks_ = grown;
}

void ZipCache::flush_block(int64_t b, int64_t h, int64_t block, const float* keys, const float* values) {
  // The block's rows ranked by key L2 norm (squares summed in double: the rank does not depend
  // on summation order); the top n_hi form the high tier, ties to the earlier position.
  thread_local std::vector<double> norm;
  thread_local std::vector<int64_t> order;
  thread_local std::vector<uint8_t> high;
  norm.assign(static_cast<std::size_t>(group_), 0.0);
  for (int64_t t = 0; t < group_; ++t) {
    for (int64_t c = 0; c < dk_; ++c)
      norm[static_cast<std::size_t>(t)] += double(keys[t * dk_ + c]) * keys[t * dk_ + c];
  }
  order.resize(static_cast<std::size_t>(group_));
  for (int64_t t = 0; t < group_; ++t) order[static_cast<std::size_t>(t)] = t;
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) {
    return norm[static_cast<std::size_t>(a)] > norm[static_cast<std::size_t>(c)];
  });
  high.assign(static_cast<std::size_t>(group_), 0);
  for (int64_t i = 0; i < tiers_[0].per_block; ++i)
    high[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = 1;
  thread_local std::vector<float> tk, tv;
  thread_local std::vector<uint8_t> kcodes, vcodes;
  thread_local std::vector<core::GroupParams> kparams, vparams;
  const int64_t gv = static_cast<int64_t>(token_groups(static_cast<int>(dv_), group_));
  for (int tier = 0; tier < 2; ++tier) {
    Tier& t = tiers_[static_cast<std::size_t>(tier)];
    const int64_t n = t.per_block;
    if (n == 0) continue;
    tk.resize(static_cast<std::size_t>(n * dk_));
    tv.resize(static_cast<std::size_t>(n * dv_));
    kcodes.resize(tk.size());
    vcodes.resize(tv.size());
    kparams.resize(static_cast<std::size_t>(dk_));
    vparams.resize(static_cast<std::size_t>(n * gv));
    int64_t i = 0;
    const int64_t row0 = block * n;
    for (int64_t r = 0; r < group_; ++r) {
      if ((high[static_cast<std::size_t>(r)] != 0) != (tier == 0)) continue;
      std::memcpy(tk.data() + i * dk_, keys + r * dk_, sizeof(float) * static_cast<std::size_t>(dk_));
      std::memcpy(tv.data() + i * dv_, values + r * dv_, sizeof(float) * static_cast<std::size_t>(dv_));
      *row_ptr<int32_t>(t.positions, b, h, row0 + i) = static_cast<int32_t>(block * group_ + r);
      ++i;
    }
    // KIVI's code on the tier's rows: keys per channel over them, values per token.
    core::quantize_per_channel(tk.data(), static_cast<std::size_t>(n), static_cast<std::size_t>(dk_), t.bits,
                               static_cast<std::size_t>(n), kcodes.data(), kparams.data());
    core::quantize_per_token(tv.data(), static_cast<std::size_t>(n), static_cast<std::size_t>(dv_), t.bits,
                             static_cast<std::size_t>(group_), vcodes.data(), vparams.data());
    std::memcpy(row_ptr<uint16_t>(t.key_params, b, h, block), kparams.data(),
                sizeof(core::GroupParams) * static_cast<std::size_t>(dk_));
    for (int64_t r = 0; r < n; ++r) {
      core::pack_words(kcodes.data() + r * dk_, static_cast<std::size_t>(dk_), t.bits,
                       row_ptr<uint32_t>(t.key_codes, b, h, row0 + r));
      core::pack_words(vcodes.data() + r * dv_, static_cast<std::size_t>(dv_), t.bits,
                       row_ptr<uint32_t>(t.value_codes, b, h, row0 + r));
      std::memcpy(row_ptr<uint16_t>(t.value_params, b, h, row0 + r), vparams.data() + r * gv,
                  sizeof(core::GroupParams) * static_cast<std::size_t>(gv));
    }
  }
}

void ZipCache::decode_quantized(int64_t b, int64_t h, float* keys, float* values) const {
  std::vector<uint8_t> codes(static_cast<std::size_t>(dk_));
  const int64_t blocks = frontier_ / group_;
  for (const Tier& t : tiers_) {
    for (int64_t r = 0; r < blocks * t.per_block; ++r) {
      const int64_t p = *row_ptr<int32_t>(t.positions, b, h, r);
      core::unpack_words(row_ptr<uint32_t>(t.key_codes, b, h, r), static_cast<std::size_t>(dk_), t.bits, codes.data());
      const auto* kp = reinterpret_cast<const GroupParams16*>(row_ptr<uint16_t>(t.key_params, b, h, r / t.per_block));
      for (int64_t c = 0; c < dk_; ++c) keys[p * dk_ + c] = decode_code(codes[static_cast<std::size_t>(c)], kp[c]);
      decode_token_row(row_ptr<uint32_t>(t.value_codes, b, h, r),
                       reinterpret_cast<const GroupParams16*>(row_ptr<uint16_t>(t.value_params, b, h, r)),
                       static_cast<int>(dv_), group_, t.bits, values + p * dv_);
    }
  }
}

lm::KeysValues ZipCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void ZipCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "ZipCache::update_and_fetch");
  if (!tail_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "ZipCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2), tail = offset_ - frontier_, pending_rows = tail + s;
  const int64_t blocks = pending_rows / group_;
  if (blocks == 0) {  // the block is not complete yet: the rows wait in the tail as they are
    lm::copy_token_rows(keys, tail_k_, tail);
    lm::copy_token_rows(values, tail_v_, tail);
    offset_ += s;
    return;
  }
  // Pending = the tail followed by the new rows, in f32 (grow-only per-thread buffers).
  thread_local std::vector<float> pk, pv, new_k, new_v;
  pk.resize(static_cast<std::size_t>(pending_rows * dk_));
  pv.resize(static_cast<std::size_t>(pending_rows * dv_));
  cache_rows::widen_to_f32(keys, new_k);
  cache_rows::widen_to_f32(values, new_v);
  ensure_blocks(frontier_ / group_ + blocks);
  const int64_t kept = pending_rows - blocks * group_;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      blocks_tail::gather_pending(tail_k_, dtype_, bh, group_, dk_, tail, new_k.data(), s, pk.data());
      blocks_tail::gather_pending(tail_v_, dtype_, bh, group_, dv_, tail, new_v.data(), s, pv.data());
      for (int64_t k = 0; k < blocks; ++k) {
        flush_block(b, h, frontier_ / group_ + k, pk.data() + k * group_ * dk_, pv.data() + k * group_ * dv_);
      }
      blocks_tail::keep_in_tail(pk.data() + blocks * group_ * dk_, kept, tail_k_, dtype_, bh, group_, dk_);
      blocks_tail::keep_in_tail(pv.data() + blocks * group_ * dv_, kept, tail_v_, dtype_, bh, group_, dv_);
    }
  }
  offset_ += s;
  frontier_ += blocks * group_;
}

lm::KeysValues ZipCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  std::vector<float> tk(static_cast<std::size_t>(frontier_ * dk_)), tv(static_cast<std::size_t>(frontier_ * dv_));
  const int64_t tail = offset_ - frontier_;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      std::byte* kout = k.raw_data() + bh * offset_ * dk_ * static_cast<int64_t>(k.element_size());
      std::byte* vout = v.raw_data() + bh * offset_ * dv_ * static_cast<int64_t>(v.element_size());
      decode_quantized(b, h, tk.data(), tv.data());
      cache_rows::store_f32(tk.data(), tk.size(), kout, dtype);
      cache_rows::store_f32(tv.data(), tv.size(), vout, dtype);
      blocks_tail::fetch_head_tail(tail_k_, dtype_, bh, group_, dk_, tail, frontier_, offset_, k);
      blocks_tail::fetch_head_tail(tail_v_, dtype_, bh, group_, dv_, tail, frontier_, offset_, v);
    }
  }
  return {std::move(k), std::move(v)};
}

// Each tier is one segment of the shared driver (its rows scored and accumulated from the codes,
// at their true positions), the incomplete block a third; one online softmax over all of them.
void ZipCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("ZipCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("ZipCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  const int64_t blocks = frontier_ / group_;
  // On the stack, one per tier: a decode step allocates nothing.
  constexpr std::size_t kTiers = std::tuple_size_v<decltype(tiers_)>;
  std::array<std::optional<KiviQuantizedRows>, kTiers> tier_rows;
  const attention::RowSource* segments[kTiers + 1];
  int n_segments = 0;
  for (std::size_t i = 0; i < kTiers; ++i) {
    const Tier& t = tiers_[i];
    if (t.per_block == 0) continue;
    KiviQuantizedRows& rows = tier_rows[i].emplace(t.key_codes, t.key_params, t.value_codes, t.value_params,
                                                   blocks * t.per_block, t.bits, group_, *t.key_order, *t.value_order);
    rows.with_key_rows_per_group(t.per_block).with_positions(&t.positions);
    segments[n_segments++] = &rows;
  }
  const attention::DtypeRowSource tail(tail_k_, tail_v_, offset_ - frontier_, frontier_);
  segments[n_segments++] = &tail;
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, n_segments, attention::request_pool(request));
}

std::vector<lm::Tensor> ZipCache::state() const {
  if (!tail_k_.defined()) return {};
  const int64_t blocks = frontier_ / group_, tail = offset_ - frontier_;
  std::vector<lm::Tensor> out;
  for (const Tier& t : tiers_) {
    const int64_t rows = blocks * t.per_block;
    out.push_back(t.key_codes.slice(2, 0, rows));
    out.push_back(t.key_params.slice(2, 0, t.per_block == 0 ? 0 : blocks));
    out.push_back(t.value_codes.slice(2, 0, rows));
    out.push_back(t.value_params.slice(2, 0, rows));
    out.push_back(t.positions.slice(2, 0, rows));
  }
  out.push_back(tail_k_.slice(2, 0, tail));
  out.push_back(tail_v_.slice(2, 0, tail));
  return out;
}

std::vector<std::string> ZipCache::meta_state() const {
  return {std::to_string(hi_bits_),
          std::to_string(lo_bits_),
          blocks_tail::exact_double(hi_fraction_),
          std::to_string(group_),
          std::to_string(offset_),
          std::to_string(frontier_),
          std::string(lm::dtype_name(dtype_))};
}

void ZipCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "ZipCache::from_state";
  if (meta.size() != 7) {
    throw base::FormatError(std::string(who) + ": expected 7 meta entries (hi bits, lo bits, hi fraction, group, " +
                            "offset, frontier, dtype), got " + std::to_string(meta.size()));
  }
  const double fraction = blocks_tail::parse_meta_double(meta[2], who, "hi fraction");
  ZipCache fresh(static_cast<int>(cache_rows::parse_meta_int(meta[0], who, "hi bits")),
                 static_cast<int>(cache_rows::parse_meta_int(meta[1], who, "lo bits")), fraction,
                 static_cast<int>(cache_rows::parse_meta_int(meta[3], who, "group")));
  const blocks_tail::TailMeta saved = blocks_tail::parse_tail_meta(meta, 4, fresh.group_, who);
  const int64_t offset = saved.offset, frontier = saved.frontier;
  const lm::DType dtype = saved.dtype;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[4]);
    *this = fresh;
    return;
  }
  if (state.size() != 12) {
    throw base::FormatError(std::string(who) + ": expected 12 tensors, got " + std::to_string(state.size()));
  }
  const lm::Tensor& rk = state[10];
  const lm::Tensor& rv = state[11];
  blocks_tail::check_tail_state(rk, rv, offset - frontier, who, meta[4], meta[5]);
  fresh.allocate(rk.astype(dtype), rv.astype(dtype));
  const int64_t blocks = frontier / fresh.group_;
  for (int64_t tier = 0; tier < 2; ++tier) {
    Tier& t = fresh.tiers_[static_cast<std::size_t>(tier)];
    const lm::Tensor* s = state.data() + 5 * tier;
    const int64_t rows = blocks * t.per_block;
    const lm::Tensor* like[] = {&t.key_codes, &t.key_params, &t.value_codes, &t.value_params, &t.positions};
    const int64_t want_rows[] = {rows, t.per_block == 0 ? 0 : blocks, rows, rows, rows};
    for (int i = 0; i < 5; ++i) {
      if (s[i].ndim() != 4 || s[i].dim(0) != fresh.batch_ || s[i].dim(1) != fresh.heads_ ||
          s[i].dim(2) != want_rows[i] || s[i].dim(3) != like[i]->dim(3) || s[i].dtype() != like[i]->dtype()) {
        throw base::FormatError(std::string(who) + ": tier " + std::to_string(tier) + " tensor " + std::to_string(i) +
                                " " + lm::shape_text(s[i].shape()) + " does not match " + std::to_string(want_rows[i]) +
                                " rows");
      }
    }
    t.key_codes = cache_rows::copy_rows(s[0], rows, rows);
    t.key_params = cache_rows::copy_rows(s[1], want_rows[1], want_rows[1]);
    t.value_codes = cache_rows::copy_rows(s[2], rows, rows);
    t.value_params = cache_rows::copy_rows(s[3], rows, rows);
    t.positions = cache_rows::copy_rows(s[4], rows, rows);
    for (int64_t i = 0; i < t.positions.numel(); ++i) {
      const int32_t p = t.positions.data<int32_t>()[i];
      if (p < 0 || p >= frontier)
        throw base::FormatError(std::string(who) + ": row position out of the quantized rows");
    }
  }
  fresh.capacity_blocks_ = blocks;
  lm::copy_token_rows(rk.astype(fresh.dtype_), fresh.tail_k_, 0);
  lm::copy_token_rows(rv.astype(fresh.dtype_), fresh.tail_v_, 0);
  fresh.offset_ = offset;
  fresh.frontier_ = frontier;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> ZipCache::clone() const {
  auto copy = std::make_shared<ZipCache>(*this);
  for (Tier& t : copy->tiers_) {
    t.key_codes = t.key_codes.clone();
    t.key_params = t.key_params.clone();
    t.value_codes = t.value_codes.clone();
    t.value_params = t.value_params.clone();
    t.positions = t.positions.clone();
  }
  copy->tail_k_ = tail_k_.clone();
  copy->tail_v_ = tail_v_.clone();
  return copy;
}

void validate_zipcache_options(const KVCacheConfig& config) {
  const ZipCacheOptions& o = config.options<ZipCacheOptions>();
  if (o.zipcache_hi_bits < 1 || o.zipcache_hi_bits > 8) {
    throw QuantizerConfigError("zipcache_hi_bits must lie in [1, 8], got " + std::to_string(o.zipcache_hi_bits));
  }
  if (o.zipcache_lo_bits < 1 || o.zipcache_lo_bits > 8) {
    throw QuantizerConfigError("zipcache_lo_bits must lie in [1, 8], got " + std::to_string(o.zipcache_lo_bits));
  }
  if (o.zipcache_lo_bits > o.zipcache_hi_bits) {
    throw QuantizerConfigError("zipcache_lo_bits (" + std::to_string(o.zipcache_lo_bits) +
                               ") must not exceed zipcache_hi_bits (" + std::to_string(o.zipcache_hi_bits) + ")");
  }
  if (!(o.zipcache_hi_fraction >= 0.0 && o.zipcache_hi_fraction <= 1.0)) {
    throw QuantizerConfigError("zipcache_hi_fraction must lie in [0, 1], got " +
                               std::to_string(o.zipcache_hi_fraction));
  }
  if (o.zipcache_group_size < 1 || o.zipcache_group_size > 4096) {
    throw QuantizerConfigError("zipcache_group_size must lie in [1, 4096], got " +
                               std::to_string(o.zipcache_group_size));
  }
  if (!o.zipcache_quantize_values) {
    throw base::Unsupported(
        "zipcache_quantize_values=false is not supported: values are always quantized in their "
        "token's tier (use true)");
  }
}

std::shared_ptr<lm::KVCache> make_zipcache_cache(const KVCacheConfig& config) {
  validate_zipcache_options(config);
  const ZipCacheOptions& o = config.options<ZipCacheOptions>();
  return std::make_shared<ZipCache>(o.zipcache_hi_bits, o.zipcache_lo_bits, o.zipcache_hi_fraction,
                                    o.zipcache_group_size);
}

MethodDescriptor zipcache_method() {
  MethodDescriptor m;
  m.name = "zipcache";
  m.family = "hybrid";  // the original's label (spec §6 #19)
  m.is_servable = true;
  m.capabilities = {.trimmable = false, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Per-token mixed precision: in every group of zipcache_group_size tokens the zipcache_hi_fraction with "
      "the largest key norm get zipcache_hi_bits, the rest zipcache_lo_bits (KIVI's group code per tier)";
  m.paper =
      "ZipCache: Accurate and Efficient KV Cache Quantization with Salient Token Identification (He et al., "
      "NeurIPS 2024, arXiv 2405.14256), adapted";
  m.deviations =
      "Saliency is the key L2 norm (the original's proxy), not the paper's normalized attention score. "
      "Tokens are ranked within each complete group of zipcache_group_size tokens per head (the original "
      "ranks all tokens every step and only counts bytes); each tier is quantized as KIVI (keys per "
      "channel over the tier's rows of the group, values per token), not with the paper's "
      "channel-separable token-wise quantizer. The incomplete last group stays in the input dtype. "
      "zipcache_quantize_values=false is refused. Not trimmable (as the original).";
  m.docs = "docs/methods/zipcache.md";
  m.fields = {
      option_field("zipcache_hi_bits", &ZipCacheOptions::zipcache_hi_bits, "Bits of the salient (high-norm) tokens", 1,
                   8),
      option_field("zipcache_lo_bits", &ZipCacheOptions::zipcache_lo_bits, "Bits of the other tokens", 1, 8),
      option_field("zipcache_hi_fraction", &ZipCacheOptions::zipcache_hi_fraction,
                   "Fraction of each group's tokens given zipcache_hi_bits, in [0, 1]"),
      option_field("zipcache_group_size", &ZipCacheOptions::zipcache_group_size,
                   "Tokens ranked together (and per key params row); channels per value group", 1, 4096),
      option_field("zipcache_quantize_values", &ZipCacheOptions::zipcache_quantize_values,
                   "Quantize values in their token's tier (true is the only value supported)"),
  };
  m.validate = validate_zipcache_options;
  m.make_serving = make_zipcache_cache;
  m.cache_type_name = kTypeName;
  // Placeholder parameters: from_state() rebuilds every one of them from meta_state().
  m.make_restorable = [] { return std::make_shared<ZipCache>(4, 2, 0.2, 32); };
  return m;
}

}  // namespace veloxquant
