#include "veloxquant/caches/cachegen_cache.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/caches/cachegen_rows.h"
#include "veloxquant/caches/kivi_row_source.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/core/rans_coder.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "CachegenCache";

void check_bits(const char* field, int bits) {
  if (bits < 2 || bits > 8) {
    throw QuantizerConfigError(std::string(field) + " must lie in [2, 8], got " + std::to_string(bits));
  }
}

// Python's round() of n * k / g (half to even), in integers.
int round_half_even_ratio(int64_t num, int64_t den) {
  const int64_t q = num / den, r = num % den;
  if (2 * r > den || (2 * r == den && q % 2 == 1)) return static_cast<int>(q + 1);
  return static_cast<int>(q);
}
}  // namespace

std::vector<int> cachegen_layer_bits(int n_layers, int groups, int base_bits) {
  std::vector<int> bits(static_cast<std::size_t>(std::max(n_layers, 0)), base_bits);
  if (n_layers <= 0) return bits;
  const int g = std::min(groups, n_layers);
  std::vector<int> bounds;
  for (int k = 0; k <= g; ++k) bounds.push_back(round_half_even_ratio(int64_t{n_layers} * k, g));
  bounds.back() = n_layers;
  for (int k = 0; k < g; ++k) {
    for (int layer = bounds[static_cast<std::size_t>(k)]; layer < bounds[static_cast<std::size_t>(k) + 1]; ++layer) {
      bits[static_cast<std::size_t>(layer)] = std::max(2, base_bits - k);
    }
  }
  return bits;
}

CachegenCache::CachegenCache(int bits, int group_size, bool use_delta, bool per_channel)
    : bits_(bits), group_(group_size), use_delta_(use_delta), per_channel_(per_channel) {
  check_bits("cachegen_bits", bits);
  if (group_size < 1 || group_size > 4096) {
    throw QuantizerConfigError("cachegen_group_size must lie in [1, 4096], got " + std::to_string(group_size));
  }
}

std::size_t CachegenCache::nbytes() const {
  return key_codes_.storage_bytes() + key_params_.storage_bytes() + value_codes_.storage_bytes() +
         value_params_.storage_bytes() + tail_k_.storage_bytes() + tail_v_.storage_bytes();
}

namespace {
// The f16 (scale, min) pairs of one block: per channel over the G rows, or per token in channel
// groups of G.
std::size_t param_pairs(bool per_channel, int64_t group, int64_t dim) {
  return per_channel ? static_cast<std::size_t>(dim)
                     : static_cast<std::size_t>(group) *
                           core::groups_per_row(static_cast<std::size_t>(dim), static_cast<std::size_t>(group));
}
}  // namespace

std::size_t CachegenCache::pairs(int kv) const {
  return kv == 0 ? param_pairs(per_channel_, group_, dk_) : param_pairs(false, group_, dv_);
}

void CachegenCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  dtype_ = keys.dtype();
  tail_k_ = lm::Tensor({batch_, heads_, group_, dk_}, dtype_);
  tail_v_ = lm::Tensor({batch_, heads_, group_, dv_}, dtype_);
  const int64_t gk = static_cast<int64_t>(core::groups_per_row(static_cast<std::size_t>(dk_), group_));
  const int64_t gv = static_cast<int64_t>(core::groups_per_row(static_cast<std::size_t>(dv_), group_));
  key_codes_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(dk_, bits_))}, lm::DType::U32);
  value_codes_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(dv_, bits_))}, lm::DType::U32);
  key_params_ = lm::Tensor({batch_, heads_, 0, per_channel_ ? 2 * dk_ : 2 * gk}, lm::DType::F16);
  value_params_ = lm::Tensor({batch_, heads_, 0, 2 * gv}, lm::DType::F16);
  capacity_ = 0;
}

// Rows in 256-row steps rounded up to whole blocks (the per-channel key params hold one row per
// block).
void CachegenCache::ensure_rows(int64_t rows) {
  if (rows <= capacity_) return;
  int64_t grown = capacity_ + ((rows - capacity_ + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  grown = (grown + group_ - 1) / group_ * group_;
  key_codes_ = cache_rows::copy_rows(key_codes_, frontier_, grown);
  value_codes_ = cache_rows::copy_rows(value_codes_, frontier_, grown);
  key_params_ = per_channel_ ? cache_rows::copy_rows(key_params_, frontier_ / group_, grown / group_)
                             : cache_rows::copy_rows(key_params_, frontier_, grown);
  value_params_ = cache_rows::copy_rows(value_params_, frontier_, grown);
  capacity_ = grown;
}

void CachegenCache::put_block(int64_t block, int64_t b, int64_t h, int kv, const uint8_t* codes,
                              const core::GroupParams* params) {
  const int64_t dim = kv == 0 ? dk_ : dv_, row0 = block * group_;
  lm::Tensor& words = kv == 0 ? key_codes_ : value_codes_;
  lm::Tensor& par = kv == 0 ? key_params_ : value_params_;
  for (int64_t t = 0; t < group_; ++t) {
    core::pack_words(codes + t * dim, static_cast<std::size_t>(dim), bits_, row_ptr<uint32_t>(words, b, h, row0 + t));
  }
  if (kv == 0 && per_channel_) {
    std::memcpy(row_ptr<uint16_t>(par, b, h, block), params, sizeof(core::GroupParams) * static_cast<std::size_t>(dim));
  } else {
    const std::size_t per_row = pairs(kv) / static_cast<std::size_t>(group_);
    for (int64_t t = 0; t < group_; ++t) {
      std::memcpy(row_ptr<uint16_t>(par, b, h, row0 + t), params + t * static_cast<int64_t>(per_row),
                  sizeof(core::GroupParams) * per_row);
    }
  }
}

void CachegenCache::get_params(int64_t block, int64_t b, int64_t h, int kv, core::GroupParams* params) const {
  const int64_t row0 = block * group_;
  const lm::Tensor& par = kv == 0 ? key_params_ : value_params_;
  if (kv == 0 && per_channel_) {
    std::memcpy(params, row_ptr<uint16_t>(par, b, h, block), sizeof(core::GroupParams) * static_cast<std::size_t>(dk_));
    return;
  }
  const std::size_t per_row = pairs(kv) / static_cast<std::size_t>(group_);
  for (int64_t t = 0; t < group_; ++t) {
    std::memcpy(params + t * static_cast<int64_t>(per_row), row_ptr<uint16_t>(par, b, h, row0 + t),
                sizeof(core::GroupParams) * per_row);
  }
}

void CachegenCache::decode_record(int64_t block, int64_t b, int64_t h, int kv, float* out, uint8_t* codes_out) const {
  const int64_t dim = kv == 0 ? dk_ : dv_;
  if (block < 0 || (block + 1) * group_ > frontier_) {
    throw base::InvalidArgument("CachegenCache::decode_record: no block " + std::to_string(block));
  }
  const std::size_t g = static_cast<std::size_t>(group_), d = static_cast<std::size_t>(dim);
  thread_local std::vector<core::GroupParams> params;
  thread_local std::vector<uint8_t> codes;
  params.resize(pairs(kv));
  codes.resize(g * d);
  const lm::Tensor& words = kv == 0 ? key_codes_ : value_codes_;
  for (int64_t t = 0; t < group_; ++t) {
    core::unpack_words(row_ptr<uint32_t>(words, b, h, block * group_ + t), d, bits_, codes.data() + t * dim);
  }
  get_params(block, b, h, kv, params.data());
  if (kv == 0 && per_channel_) {
    core::dequantize_per_channel(codes.data(), g, d, g, params.data(), out);
  } else {
    core::dequantize_per_token(codes.data(), g, d, g, params.data(), out);
  }
  if (codes_out != nullptr) std::memcpy(codes_out, codes.data(), codes.size());
}

namespace {
// A record's codes (rows x dim) to the symbols of the delta encoding: rows after the anchor (the
// first) as their difference from it modulo the alphabet, from the last row up so the anchor is
// read unchanged; and back.
void to_delta_symbols(uint8_t* codes, int64_t rows, int64_t dim, int alphabet) {
  const uint8_t mask = static_cast<uint8_t>(alphabet - 1);
  const std::size_t d = static_cast<std::size_t>(dim);
  for (std::size_t t = static_cast<std::size_t>(rows); t-- > 1;) {
    for (std::size_t c = 0; c < d; ++c) codes[t * d + c] = static_cast<uint8_t>((codes[t * d + c] - codes[c]) & mask);
  }
}
void from_delta_symbols(uint8_t* codes, int64_t rows, int64_t dim, int alphabet) {
  const uint8_t mask = static_cast<uint8_t>(alphabet - 1);
  const std::size_t d = static_cast<std::size_t>(dim);
  for (std::size_t t = 1; t < static_cast<std::size_t>(rows); ++t) {
    for (std::size_t c = 0; c < d; ++c) codes[t * d + c] = static_cast<uint8_t>((codes[t * d + c] + codes[c]) & mask);
  }
}
}  // namespace

// CacheGen's bitstream for one block: params, the frequency table of its (delta) symbols, the rANS
// stream. Deterministic in the resident codes, so equal caches write equal bytes.
std::size_t CachegenCache::encode_record(int64_t block, int64_t b, int64_t h, int kv, std::vector<uint8_t>& out) const {
  const int64_t dim = kv == 0 ? dk_ : dv_;
  const std::size_t g = static_cast<std::size_t>(group_), d = static_cast<std::size_t>(dim);
  const int alphabet = 1 << bits_;
  std::vector<float> rows(g * d);
  std::vector<uint8_t> codes(g * d), record;
  std::vector<core::GroupParams> params(pairs(kv));
  decode_record(block, b, h, kv, rows.data(), codes.data());
  get_params(block, b, h, kv, params.data());
  if (use_delta_) to_delta_symbols(codes.data(), group_, dim, alphabet);
  uint32_t counts[256] = {};
  for (uint8_t s : codes) ++counts[s];
  const std::vector<uint16_t> freqs = core::normalized_frequencies(counts, alphabet);
  record.resize(params.size() * sizeof(core::GroupParams) + freqs.size() * sizeof(uint16_t));
  std::memcpy(record.data(), params.data(), params.size() * sizeof(core::GroupParams));
  std::memcpy(record.data() + params.size() * sizeof(core::GroupParams), freqs.data(), freqs.size() * sizeof(uint16_t));
  const std::size_t header = record.size();
  core::rans_encode(codes.data(), codes.size(), freqs.data(), alphabet, record);
  out.insert(out.end(), record.begin(), record.end());
  return record.size() - header;
}

CachegenStorage CachegenCache::storage() const {
  CachegenStorage s;
  const int alphabet = 1 << bits_;
  std::vector<float> rows(static_cast<std::size_t>(group_ * std::max(dk_, dv_)));
  std::vector<uint8_t> codes(rows.size()), record;
  for (int64_t block = 0; block < frontier_ / group_; ++block) {
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < heads_; ++h) {
        for (int kv = 0; kv < 2; ++kv) {
          const int64_t dim = kv == 0 ? dk_ : dv_;
          const std::size_t n = static_cast<std::size_t>(group_ * dim);
          decode_record(block, b, h, kv, rows.data(), codes.data());
          if (use_delta_) to_delta_symbols(codes.data(), group_, dim, alphabet);  // as the encoder sees them
          uint32_t counts[256] = {};
          for (std::size_t k = 0; k < n; ++k) ++counts[codes[k]];
          record.clear();
          ++s.records;
          s.symbols += n;
          s.param_bytes += pairs(kv) * sizeof(core::GroupParams);
          s.table_bytes += static_cast<std::size_t>(alphabet) * sizeof(uint16_t);
          s.payload_bytes += encode_record(block, b, h, kv, record);
          s.entropy_bits += core::order0_entropy_bits(counts, alphabet);
          s.packed_bytes += (n * static_cast<std::size_t>(bits_) + 7) / 8;
        }
      }
    }
  }
  return s;
}

lm::KeysValues CachegenCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void CachegenCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "CachegenCache::update_and_fetch");
  if (!tail_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "CachegenCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2), tail = offset_ - frontier_, pending_rows = tail + s;
  const int64_t blocks = pending_rows / group_;
  if (blocks == 0) {  // the block is not complete yet: its rows wait in the tails as they are
    lm::copy_token_rows(keys, tail_k_, tail);
    lm::copy_token_rows(values, tail_v_, tail);
    offset_ += s;
    return;
  }
  // Pending rows of every head = its tail followed by the new rows, in f32; records are written
  // block-major (all heads of block k before block k + 1) so trim can truncate the arena.
  const int64_t bh_count = batch_ * heads_;
  thread_local std::vector<float> pk, pv;
  blocks_tail::gather_all_pending({bh_count, group_, dk_, dv_, tail, dtype_}, tail_k_, tail_v_, keys, values, pk, pv);
  ensure_rows(frontier_ + blocks * group_);
  thread_local std::vector<uint8_t> codes;
  thread_local std::vector<core::GroupParams> params;
  const std::size_t g = static_cast<std::size_t>(group_);
  for (int64_t k = 0; k < blocks; ++k) {
    for (int64_t bh = 0; bh < bh_count; ++bh) {
      for (int kv = 0; kv < 2; ++kv) {
        const int64_t dim = kv == 0 ? dk_ : dv_;
        const float* x = (kv == 0 ? pk.data() : pv.data()) + (bh * pending_rows + k * group_) * dim;
        codes.resize(g * static_cast<std::size_t>(dim));
        params.resize(pairs(kv));
        if (kv == 0 && per_channel_) {
          core::quantize_per_channel(x, g, static_cast<std::size_t>(dim), bits_, g, codes.data(), params.data());
        } else {
          core::quantize_per_token(x, g, static_cast<std::size_t>(dim), bits_, g, codes.data(), params.data());
        }
        put_block(frontier_ / group_ + k, bh / heads_, bh % heads_, kv, codes.data(), params.data());
      }
    }
  }
  const int64_t kept = pending_rows - blocks * group_;
  for (int64_t bh = 0; bh < bh_count; ++bh) {
    blocks_tail::keep_in_tail(pk.data() + (bh * pending_rows + blocks * group_) * dk_, kept, tail_k_, dtype_, bh,
                              group_, dk_);
    blocks_tail::keep_in_tail(pv.data() + (bh * pending_rows + blocks * group_) * dv_, kept, tail_v_, dtype_, bh,
                              group_, dv_);
  }
  offset_ += s;
  frontier_ += blocks * group_;
}

lm::KeysValues CachegenCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  std::vector<float> rows(static_cast<std::size_t>(group_ * std::max(dk_, dv_)));
  const int64_t tail = offset_ - frontier_;
  const int64_t es = static_cast<int64_t>(k.element_size());
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      for (int64_t g = 0; g < frontier_ / group_; ++g) {
        decode_record(g, b, h, 0, rows.data());
        cache_rows::store_f32(rows.data(), static_cast<std::size_t>(group_ * dk_),
                              k.raw_data() + (bh * offset_ + g * group_) * dk_ * es, dtype);
        decode_record(g, b, h, 1, rows.data());
        cache_rows::store_f32(rows.data(), static_cast<std::size_t>(group_ * dv_),
                              v.raw_data() + (bh * offset_ + g * group_) * dv_ * es, dtype);
      }
      blocks_tail::fetch_head_tail(tail_k_, dtype_, bh, group_, dk_, tail, frontier_, offset_, k);
      blocks_tail::fetch_head_tail(tail_v_, dtype_, bh, group_, dv_, tail, frontier_, offset_, v);
    }
  }
  return {std::move(k), std::move(v)};
}

void CachegenCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("CachegenCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("CachegenCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  if (!per_channel_) {  // per-token keys: blocks decoded to f32 tiles (cachegen_rows.h)
    const CachegenRows rows(*this);
    attention::attend(call, rows, attention::request_pool(request));
    return;
  }
  // KIVI's layout: the codes scored and accumulated where they lie (kivi_row_source.h), the
  // tails read in their dtype, one softmax over both.
  if (!key_order_ || key_order_->size() != dk_ || key_order_->bits() != bits_ || value_order_->size() != dv_) {
    key_order_ = std::make_shared<const attention::CodeOrder>(bits_, dk_);
    value_order_ = std::make_shared<const attention::CodeOrder>(bits_, dv_, group_);
  }
  // Keys with the query in f32: the integer path's 16-bit rounding of the folded query cost this
  // cache KL on SmolLM2's outlier key channels (docs/methods/cachegen.md).
  KiviQuantizedRows coded(key_codes_, key_params_, value_codes_, value_params_, frontier_, bits_, group_, *key_order_,
                          *value_order_);
  coded.with_float_keys(true);
  const attention::DtypeRowSource tail(tail_k_, tail_v_, offset_ - frontier_, frontier_);
  const attention::RowSource* segments[] = {&coded, &tail};
  attention::attend(call, segments, 2, attention::request_pool(request));
}

int64_t CachegenCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("CachegenCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset_);
  const int64_t new_offset = offset_ - removed;
  const int64_t new_frontier = new_offset / group_ * group_;
  if (new_frontier < frontier_) {
    // Block new_frontier / G returns to the tails (its rows below new_offset), decoded from its
    // codes; it and every block above it leave the coded rows.
    const int64_t reopened = new_frontier / group_, kept = new_offset - new_frontier;
    std::vector<float> rows(static_cast<std::size_t>(group_ * std::max(dk_, dv_)));
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < heads_; ++h) {
        const int64_t bh = b * heads_ + h;
        decode_record(reopened, b, h, 0, rows.data());
        cache_rows::store_f32(rows.data(), static_cast<std::size_t>(kept * dk_),
                              blocks_tail::head_rows(tail_k_, bh, group_, dk_), dtype_);
        decode_record(reopened, b, h, 1, rows.data());
        cache_rows::store_f32(rows.data(), static_cast<std::size_t>(kept * dv_),
                              blocks_tail::head_rows(tail_v_, bh, group_, dv_), dtype_);
      }
    }
    frontier_ = new_frontier;  // the codes past it are dead capacity, overwritten by later blocks
  }
  offset_ = new_offset;
  return removed;
}

std::vector<lm::Tensor> CachegenCache::state() const {
  if (!tail_k_.defined()) return {};
  const int64_t tail = offset_ - frontier_;
  // The stream form: every block's records coded now, block-major.
  std::vector<uint8_t> arena;
  std::vector<uint32_t> offsets{0};
  for (int64_t block = 0; block < frontier_ / group_; ++block) {
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < heads_; ++h) {
        for (int kv = 0; kv < 2; ++kv) {
          encode_record(block, b, h, kv, arena);
          if (arena.size() > UINT32_MAX) throw base::InvalidArgument("CachegenCache: stream passes 4 GiB");
          offsets.push_back(static_cast<uint32_t>(arena.size()));
        }
      }
    }
  }
  lm::Tensor arena_t({static_cast<int64_t>(arena.size())}, lm::DType::U8);
  if (!arena.empty()) std::memcpy(arena_t.raw_data(), arena.data(), arena.size());
  lm::Tensor offsets_t({static_cast<int64_t>(offsets.size())}, lm::DType::U32);
  std::memcpy(offsets_t.raw_data(), offsets.data(), offsets.size() * sizeof(uint32_t));
  return {std::move(arena_t), std::move(offsets_t), tail_k_.slice(2, 0, tail), tail_v_.slice(2, 0, tail)};
}

std::vector<std::string> CachegenCache::meta_state() const {
  return {std::to_string(bits_),
          std::to_string(group_),
          use_delta_ ? "1" : "0",
          per_channel_ ? "1" : "0",
          std::to_string(offset_),
          std::to_string(frontier_),
          std::string(lm::dtype_name(dtype_))};
}

void CachegenCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "CachegenCache::from_state";
  if (meta.size() != 7) {
    throw base::FormatError(std::string(who) + ": expected 7 meta entries (bits, group, delta, per channel, offset, " +
                            "frontier, dtype), got " + std::to_string(meta.size()));
  }
  const int64_t delta = cache_rows::parse_meta_int(meta[2], who, "delta");
  const int64_t per_channel = cache_rows::parse_meta_int(meta[3], who, "per channel");
  if ((delta != 0 && delta != 1) || (per_channel != 0 && per_channel != 1)) {
    throw base::FormatError(std::string(who) + ": delta / per channel must be 0 or 1");
  }
  CachegenCache fresh(static_cast<int>(cache_rows::parse_meta_int(meta[0], who, "bits")),
                      static_cast<int>(cache_rows::parse_meta_int(meta[1], who, "group")), delta == 1,
                      per_channel == 1);
  const blocks_tail::TailMeta saved = blocks_tail::parse_tail_meta(meta, 4, fresh.group_, who);
  if (state.empty()) {
    if (saved.offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[4]);
    *this = fresh;
    return;
  }
  if (state.size() != 4)
    throw base::FormatError(std::string(who) + ": expected 4 tensors, got " + std::to_string(state.size()));
  const lm::Tensor& arena = state[0];
  const lm::Tensor& offsets = state[1];
  const lm::Tensor& tk = state[2];
  const lm::Tensor& tv = state[3];
  const int64_t tail = saved.offset - saved.frontier;
  blocks_tail::check_tail_state(tk, tv, tail, who, meta[4], meta[5]);
  if (tk.dim(0) != tv.dim(0) || tk.dim(1) != tv.dim(1)) throw base::FormatError(std::string(who) + ": tails disagree");
  fresh.allocate(tk.astype(saved.dtype), tv.astype(saved.dtype));
  const std::size_t records = static_cast<std::size_t>(saved.frontier / fresh.group_ * fresh.batch_ * fresh.heads_ * 2);
  if (arena.ndim() != 1 || arena.dtype() != lm::DType::U8 || offsets.ndim() != 1 || offsets.dtype() != lm::DType::U32 ||
      static_cast<std::size_t>(offsets.dim(0)) != records + 1) {
    throw base::FormatError(std::string(who) + ": arena / offsets do not hold " + std::to_string(records) + " records");
  }
  const lm::Tensor offsets_c = offsets.contiguous();
  const auto* o = reinterpret_cast<const uint32_t*>(offsets_c.raw_data());
  if (o[0] != 0 || o[records] != static_cast<uint64_t>(arena.dim(0))) {
    throw base::FormatError(std::string(who) + ": offsets do not span the arena");
  }
  for (std::size_t i = 0; i < records; ++i) {
    if (o[i + 1] < o[i])
      throw base::FormatError(std::string(who) + ": offsets decrease at record " + std::to_string(i));
  }
  fresh.offset_ = saved.offset;
  lm::copy_token_rows(tk.astype(saved.dtype), fresh.tail_k_, 0);
  lm::copy_token_rows(tv.astype(saved.dtype), fresh.tail_v_, 0);
  // Every record decoded into the resident codes (a corrupted stream is refused here, not at
  // attention time).
  fresh.ensure_rows(saved.frontier);
  const lm::Tensor arena_c = arena.contiguous();
  const uint8_t* bytes = reinterpret_cast<const uint8_t*>(arena_c.raw_data());
  const int alphabet = 1 << fresh.bits_;
  const std::size_t g = static_cast<std::size_t>(fresh.group_);
  std::vector<core::GroupParams> params;
  std::vector<uint16_t> freqs(static_cast<std::size_t>(alphabet));
  std::vector<uint8_t> codes;
  std::size_t i = 0;
  for (int64_t block = 0; block < saved.frontier / fresh.group_; ++block) {
    for (int64_t b = 0; b < fresh.batch_; ++b) {
      for (int64_t h = 0; h < fresh.heads_; ++h) {
        for (int kv = 0; kv < 2; ++kv, ++i) {
          const std::size_t d = static_cast<std::size_t>(kv == 0 ? fresh.dk_ : fresh.dv_);
          const std::size_t size = o[i + 1] - o[i];
          params.resize(fresh.pairs(kv));
          const std::size_t header =
              params.size() * sizeof(core::GroupParams) + static_cast<std::size_t>(alphabet) * sizeof(uint16_t);
          if (size < header) throw base::FormatError(std::string(who) + ": record shorter than its header");
          std::memcpy(params.data(), bytes + o[i], params.size() * sizeof(core::GroupParams));
          std::memcpy(freqs.data(), bytes + o[i] + params.size() * sizeof(core::GroupParams),
                      freqs.size() * sizeof(uint16_t));
          codes.resize(g * d);
          core::rans_decode(bytes + o[i] + header, size - header, freqs.data(), alphabet, g * d, codes.data());
          if (fresh.use_delta_) from_delta_symbols(codes.data(), fresh.group_, static_cast<int64_t>(d), alphabet);
          fresh.put_block(block, b, h, kv, codes.data(), params.data());
        }
      }
    }
  }
  fresh.frontier_ = saved.frontier;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> CachegenCache::clone() const {
  auto copy = std::make_shared<CachegenCache>(*this);
  copy->key_codes_ = key_codes_.clone();
  copy->key_params_ = key_params_.clone();
  copy->value_codes_ = value_codes_.clone();
  copy->value_params_ = value_params_.clone();
  copy->tail_k_ = tail_k_.clone();
  copy->tail_v_ = tail_v_.clone();
  return copy;
}

void validate_cachegen_options(const KVCacheConfig& config) {
  const CachegenOptions& o = config.options<CachegenOptions>();
  check_bits("cachegen_bits", o.cachegen_bits);
  if (o.cachegen_resolved_bits) check_bits("cachegen_resolved_bits", *o.cachegen_resolved_bits);
  if (o.cachegen_group_size < 1 || o.cachegen_group_size > 4096) {
    throw QuantizerConfigError("cachegen_group_size must lie in [1, 4096], got " +
                               std::to_string(o.cachegen_group_size));
  }
  if (o.cachegen_layer_groups < 1) {
    throw QuantizerConfigError("cachegen_layer_groups must be >= 1, got " + std::to_string(o.cachegen_layer_groups));
  }
}

std::shared_ptr<lm::KVCache> make_cachegen_cache(const KVCacheConfig& config) {
  validate_cachegen_options(config);
  const CachegenOptions& o = config.options<CachegenOptions>();
  return std::make_shared<CachegenCache>(o.cachegen_resolved_bits.value_or(o.cachegen_bits), o.cachegen_group_size,
                                         o.cachegen_use_delta, o.cachegen_per_channel);
}

MethodDescriptor cachegen_method() {
  MethodDescriptor m;
  m.name = "cachegen";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Group quantization (keys per channel, values per token) of blocks of cachegen_group_size tokens, codes "
      "delta-coded against each block's anchor token and stored rANS-coded; bits fall with layer depth";
  m.paper =
      "CacheGen: KV Cache Compression and Streaming for Fast Large Language Model Serving (Liu et al., "
      "SIGCOMM 2024, arXiv 2310.07240)";
  m.deviations =
      "The original only estimated the order-0 entropy of the codes (storage accounting); here the codes "
      "are entropy coded for real: one static rANS stream per block of G tokens per (head, keys/values) "
      "with its own 2^bits x u16 frequency table (the paper: arithmetic coding with probability models per "
      "channel and layer, shared offline). Delta = integer codes minus the block's first (anchor) token's "
      "codes, mod 2^bits (lossless; the paper deltas the float tensors before quantizing). Values are "
      "quantized per token in channel groups of G. The incomplete last block stays in the input dtype. "
      "Trim returns a reopened block decoded from its codes.";
  m.docs = "docs/methods/cachegen.md";
  m.fields = {
      option_field("cachegen_bits", &CachegenOptions::cachegen_bits,
                   "Bits of the first layer group (later groups: one less each, at least 2)", 2, 8),
      option_field("cachegen_group_size", &CachegenOptions::cachegen_group_size,
                   "Tokens per block (one anchor, one rANS stream); also the channel group of per-token codes", 1,
                   4096),
      option_field("cachegen_use_delta", &CachegenOptions::cachegen_use_delta,
                   "Code each block's rows as deltas against its anchor (first) token before entropy coding"),
      option_field("cachegen_per_channel", &CachegenOptions::cachegen_per_channel,
                   "Keys quantized per channel over the block's tokens (else per token, like values)"),
      option_field("cachegen_layer_groups", &CachegenOptions::cachegen_layer_groups,
                   "Layer groups of the depth schedule (group k gets cachegen_bits - k, at least 2)", 1),
      option_field("cachegen_resolved_bits", &CachegenOptions::cachegen_resolved_bits,
                   "This layer's bits, injected by for_model (None = cachegen_bits)", 2, 8),
  };
  m.validate = validate_cachegen_options;
  m.make_serving = make_cachegen_cache;
  // The bit schedule is resolved over the whole model once; each layer gets its bits.
  m.wire_model = [](const KVCacheConfig& config, std::size_t n_attention_layers) -> LayerCacheFactory {
    const CachegenOptions& o = config.options<CachegenOptions>();
    const std::vector<int> bits =
        cachegen_layer_bits(static_cast<int>(n_attention_layers), o.cachegen_layer_groups, o.cachegen_bits);
    return [bits](const KVCacheConfig& layer_config, std::size_t attention_index) {
      KVCacheConfig c = layer_config;
      c.options<CachegenOptions>().cachegen_resolved_bits = bits.at(attention_index);
      return make_cachegen_cache(c);
    };
  };
  m.cache_type_name = kTypeName;
  // Placeholder parameters: from_state() rebuilds every one of them from meta_state().
  m.make_restorable = [] { return std::make_shared<CachegenCache>(4, 32, true, true); };
  return m;
}

}  // namespace veloxquant
