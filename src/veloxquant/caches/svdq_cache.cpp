#include "veloxquant/caches/svdq_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/caches/svdq_basis.h"
#include "veloxquant/caches/svdq_projection.h"
#include "veloxquant/caches/svdq_rows.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/rows/group_affine_codes.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "SvdqCache";

void check_options(const SvdqOptions& o) {
  if (o.svdq_rank && *o.svdq_rank < 1) {
    throw QuantizerConfigError("svdq_rank must be >= 1 or None, got " + std::to_string(*o.svdq_rank));
  }
  if (!(o.svdq_energy_threshold > 0.0 && o.svdq_energy_threshold <= 1.0)) {
    throw QuantizerConfigError("svdq_energy_threshold must lie in (0, 1], got " +
                               std::to_string(o.svdq_energy_threshold));
  }
  if (o.svdq_group_size < 1 || o.svdq_group_size > 4096) {
    throw QuantizerConfigError("svdq_group_size must lie in [1, 4096], got " + std::to_string(o.svdq_group_size));
  }
  parse_svdq_schedule(o.svdq_bit_schedule);
}

const SvdqOptions& checked(const SvdqOptions& o) {
  check_options(o);
  return o;
}
}  // namespace

SvdqCache::SvdqCache(const SvdqOptions& options)
    : options_(checked(options)),
      schedule_(parse_svdq_schedule(options.svdq_bit_schedule)),
      group_(options.svdq_group_size) {}

std::size_t SvdqCache::nbytes() const {
  return codes_.storage_bytes() + params_.storage_bytes() + basis_.storage_bytes() + ranks_.storage_bytes() +
         values_.storage_bytes() + tail_k_.storage_bytes();
}

int64_t SvdqCache::rank(int64_t b, int64_t h) const {
  // ranks_ holds a row once the basis is being fitted (fit() writes it before flush_block reads it).
  return ranks_.defined() && ranks_.dim(2) > 0 ? row_ptr<int32_t>(ranks_, b, h, 0)[0] : 0;
}

const float* SvdqCache::basis_row(int64_t b, int64_t h, int64_t i) const { return row_ptr<float>(basis_, b, h, i); }

void SvdqCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  dtype_ = keys.dtype();
  layout_ = make_svdq_layout(dk_, schedule_);
  tail_k_ = lm::Tensor({batch_, heads_, group_, dk_}, dtype_);
  values_ = lm::Tensor({batch_, heads_, 0, dv_}, dtype_);
  codes_ = lm::Tensor({batch_, heads_, 0, layout_.row_bytes}, lm::DType::U8);
  params_ = lm::Tensor({batch_, heads_, 0, 2 * layout_.coded}, lm::DType::F16);
  basis_ = lm::Tensor({batch_, heads_, 0, dk_}, lm::DType::F32);
  ranks_ = lm::Tensor({batch_, heads_, 0, 1}, lm::DType::I32);
  capacity_ = 0;
  fitted_ = false;
}

void SvdqCache::ensure_rows(int64_t rows) {
  if (rows <= capacity_) return;
  int64_t grown = capacity_ + ((rows - capacity_ + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  grown = ((grown + group_ - 1) / group_) * group_;
  values_ = cache_rows::copy_rows(values_, offset_, grown);
  codes_ = cache_rows::copy_rows(codes_, frontier_, grown);
  params_ = cache_rows::copy_rows(params_, frontier_ / group_, grown / group_);
  capacity_ = grown;
}

void SvdqCache::fit(int64_t b, int64_t h, const float* keys, int64_t rows) {
  const SvdqBasis basis = fit_svdq_basis(keys, rows, dk_, options_.svdq_rank, options_.svdq_energy_threshold);
  // Only the coded channels' directions are kept; a channel past the rank gets a zero direction,
  // so its latent coordinate is 0 in every row and in every projected query.
  for (int64_t i = 0; i < layout_.coded; ++i) {
    const int64_t latent = layout_.latent_of[static_cast<std::size_t>(i)];
    float* dst = row_ptr<float>(basis_, b, h, i);
    if (latent < basis.rank) {
      std::memcpy(dst, basis.rows.data() + latent * dk_, sizeof(float) * static_cast<std::size_t>(dk_));
    } else {
      std::fill(dst, dst + dk_, 0.0f);
    }
  }
  row_ptr<int32_t>(ranks_, b, h, 0)[0] = static_cast<int32_t>(basis.rank);
}

void SvdqCache::flush_block(int64_t b, int64_t h, int64_t block, const float* keys) {
  // Latent coordinates of the block's rows: z[t][i] = <basis row i, k_t>, coded order.
  const int64_t coded = layout_.coded;
  thread_local std::vector<float> z;
  thread_local std::vector<uint8_t> codes;
  thread_local std::vector<double> transposed;
  z.resize(static_cast<std::size_t>(group_ * coded));
  codes.assign(static_cast<std::size_t>(group_ * coded), 0);
  transposed.resize(static_cast<std::size_t>(svdq_projection_scratch(coded, dk_)));
  // Double sums in channel order per (row, direction), in SIMD across directions (svdq_projection.h).
  project_latent_rows(row_ptr<float>(basis_, b, h, 0), coded, dk_, keys, group_, transposed.data(), z.data());
  auto* params = reinterpret_cast<core::GroupParams*>(row_ptr<uint16_t>(params_, b, h, block));
  const int64_t kept = rank(b, h);
  for (const SvdqGroup& g : layout_.groups) {
    for (int64_t i = g.first; i < g.first + g.channels; ++i) {
      if (layout_.latent_of[static_cast<std::size_t>(i)] >= kept) {
        params[i] = core::GroupParams{0, 0};  // dropped: decodes to 0 whatever the code
        continue;
      }
      params[i] = core::quantize_group(z.data() + i, static_cast<std::size_t>(group_), static_cast<std::size_t>(coded),
                                       g.bits, codes.data() + i);
    }
  }
  for (int64_t t = 0; t < group_; ++t) {
    pack_svdq_row(layout_, codes.data() + t * coded, row_ptr<uint8_t>(codes_, b, h, block * group_ + t));
  }
}

void SvdqCache::decode_block(int64_t b, int64_t h, int64_t block, float* out) const {
  const int64_t coded = layout_.coded;
  thread_local std::vector<uint8_t> codes;
  codes.resize(static_cast<std::size_t>(coded));
  const auto* params = reinterpret_cast<const GroupParams16*>(row_ptr<uint16_t>(params_, b, h, block));
  for (int64_t t = 0; t < group_; ++t) {
    unpack_svdq_row(layout_, row_ptr<uint8_t>(codes_, b, h, block * group_ + t), codes.data());
    float* k = out + t * dk_;
    std::fill(k, k + dk_, 0.0f);
    for (int64_t i = 0; i < coded; ++i) {
      const float z = decode_code(codes[static_cast<std::size_t>(i)], params[i]);
      const float* dir = row_ptr<float>(basis_, b, h, i);
      for (int64_t c = 0; c < dk_; ++c) k[c] += z * dir[c];
    }
  }
}

lm::KeysValues SvdqCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void SvdqCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "SvdqCache::update_and_fetch");
  if (!tail_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "SvdqCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2), tail = offset_ - frontier_, pending_rows = tail + s;
  const int64_t blocks = pending_rows / group_;
  ensure_rows(offset_ + s);
  lm::copy_token_rows(values, values_, offset_);
  if (blocks == 0) {
    lm::copy_token_rows(keys, tail_k_, tail);
    offset_ += s;
    return;
  }
  if (!fitted_) {  // the basis is fitted once, on the first flush's blocks
    basis_ = lm::Tensor({batch_, heads_, layout_.coded, dk_}, lm::DType::F32);
    ranks_ = lm::Tensor({batch_, heads_, 1, 1}, lm::DType::I32);
  }
  thread_local std::vector<float> pk, new_k;
  pk.resize(static_cast<std::size_t>(pending_rows * dk_));
  cache_rows::widen_to_f32(keys, new_k);
  const int64_t kept = pending_rows - blocks * group_;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      blocks_tail::gather_pending(tail_k_, dtype_, bh, group_, dk_, tail, new_k.data(), s, pk.data());
      if (!fitted_) fit(b, h, pk.data(), blocks * group_);
      for (int64_t k = 0; k < blocks; ++k) flush_block(b, h, frontier_ / group_ + k, pk.data() + k * group_ * dk_);
      blocks_tail::keep_in_tail(pk.data() + blocks * group_ * dk_, kept, tail_k_, dtype_, bh, group_, dk_);
    }
  }
  fitted_ = true;
  offset_ += s;
  frontier_ += blocks * group_;
}

lm::KeysValues SvdqCache::fetch(lm::DType dtype) const {
  return blocks_tail::fetch_coded_keys(
      {batch_, heads_, dk_, dv_, offset_, frontier_, group_, dtype_}, tail_k_, values_, dtype,
      [this](int64_t b, int64_t h, int64_t g, float* out) { decode_block(b, h, g, out); });
}

void SvdqCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("SvdqCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("SvdqCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  // Segment 1: the quantized blocks with their values; segment 2: the tail keys with the values
  // of the same rows.
  const SvdqRows blocks(codes_, params_, basis_, values_, layout_, frontier_, group_);
  const attention::DtypeRowSource tail(tail_k_, values_, frontier_, offset_ - frontier_, frontier_);
  const attention::RowSource* segments[2];
  int n = 0;
  if (frontier_ > 0) segments[n++] = &blocks;
  if (offset_ > frontier_) segments[n++] = &tail;
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, n, attention::request_pool(request));
}

int64_t SvdqCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("SvdqCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset_);
  const int64_t new_offset = offset_ - removed;
  if (new_offset == 0 && tail_k_.defined()) {  // empty again: the next prompt fits a new basis
    allocate(tail_k_, values_);
    offset_ = frontier_ = 0;
    return removed;
  }
  const int64_t new_frontier = new_offset / group_ * group_;
  if (new_frontier < frontier_) {
    std::vector<float> block(static_cast<std::size_t>(group_ * dk_));
    const int64_t kept = new_offset - new_frontier;
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < heads_; ++h) {
        decode_block(b, h, new_frontier / group_, block.data());
        cache_rows::store_f32(block.data(), static_cast<std::size_t>(kept * dk_),
                              blocks_tail::head_rows(tail_k_, b * heads_ + h, group_, dk_), dtype_);
      }
    }
    frontier_ = new_frontier;
  }
  offset_ = new_offset;
  return removed;
}

std::vector<lm::Tensor> SvdqCache::state() const {
  if (!tail_k_.defined()) return {};
  return {codes_.slice(2, 0, frontier_), params_.slice(2, 0, frontier_ / group_), basis_, ranks_,
          values_.slice(2, 0, offset_),  tail_k_.slice(2, 0, offset_ - frontier_)};
}

std::vector<std::string> SvdqCache::meta_state() const {
  return {options_.svdq_rank ? std::to_string(*options_.svdq_rank) : std::string("None"),
          blocks_tail::exact_double(options_.svdq_energy_threshold),
          options_.svdq_bit_schedule,
          std::to_string(group_),
          std::to_string(fitted_ ? 1 : 0),
          std::to_string(offset_),
          std::to_string(frontier_),
          std::string(lm::dtype_name(dtype_))};
}

void SvdqCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "SvdqCache::from_state";
  if (meta.size() != 8) {
    throw base::FormatError(std::string(who) + ": expected 8 meta entries (rank, energy threshold, schedule, group, " +
                            "fitted, offset, frontier, dtype), got " + std::to_string(meta.size()));
  }
  SvdqOptions o;
  if (meta[0] != "None") o.svdq_rank = static_cast<int>(cache_rows::parse_meta_int(meta[0], who, "rank"));
  o.svdq_energy_threshold = blocks_tail::parse_meta_double(meta[1], who, "energy threshold");
  o.svdq_bit_schedule = meta[2];
  o.svdq_group_size = static_cast<int>(cache_rows::parse_meta_int(meta[3], who, "group"));
  SvdqCache fresh(o);
  const bool fitted = cache_rows::parse_meta_int(meta[4], who, "fitted") != 0;
  const blocks_tail::TailMeta saved = blocks_tail::parse_tail_meta(meta, 5, fresh.group_, who);
  const int64_t offset = saved.offset, frontier = saved.frontier;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[5]);
    *this = fresh;
    return;
  }
  if (state.size() != 6)
    throw base::FormatError(std::string(who) + ": expected 6 tensors, got " + std::to_string(state.size()));
  const lm::Tensor& values = state[4];
  const lm::Tensor& tail = state[5];
  if (values.ndim() != 4 || tail.ndim() != 4 || values.dim(2) != offset || tail.dim(2) != offset - frontier) {
    throw base::FormatError(std::string(who) + ": value / tail rows do not match offset " + meta[5] + " / frontier " +
                            meta[6]);
  }
  fresh.allocate(tail.astype(saved.dtype), values.astype(saved.dtype));
  if (frontier > 0 && !fitted) throw base::FormatError(std::string(who) + ": quantized rows without a fitted basis");
  const int64_t blocks = frontier / fresh.group_;
  const int64_t basis_rows = fitted ? fresh.layout_.coded : 0;
  const lm::Tensor* like[] = {&fresh.codes_, &fresh.params_, &fresh.basis_, &fresh.ranks_};
  const int64_t rows[] = {frontier, blocks, basis_rows, fitted ? 1 : 0};
  for (int i = 0; i < 4; ++i) {
    const lm::Tensor& s = state[static_cast<std::size_t>(i)];
    if (s.ndim() != 4 || s.dim(0) != fresh.batch_ || s.dim(1) != fresh.heads_ || s.dim(2) != rows[i] ||
        s.dim(3) != like[i]->dim(3) || s.dtype() != like[i]->dtype()) {
      throw base::FormatError(std::string(who) + ": tensor " + std::to_string(i) + " " + lm::shape_text(s.shape()) +
                              " does not match " + std::to_string(rows[i]) + " rows");
    }
  }
  fresh.capacity_ = ((offset + fresh.group_ - 1) / fresh.group_) * fresh.group_;
  fresh.codes_ = cache_rows::copy_rows(state[0], frontier, fresh.capacity_);
  fresh.params_ = cache_rows::copy_rows(state[1], blocks, fresh.capacity_ / fresh.group_);
  fresh.basis_ = state[2].clone();
  fresh.ranks_ = state[3].clone();
  fresh.values_ = cache_rows::copy_rows(values.astype(saved.dtype), offset, fresh.capacity_);
  lm::copy_token_rows(tail.astype(saved.dtype), fresh.tail_k_, 0);
  fresh.fitted_ = fitted;
  fresh.offset_ = offset;
  fresh.frontier_ = frontier;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> SvdqCache::clone() const {
  auto copy = std::make_shared<SvdqCache>(*this);
  copy->codes_ = codes_.clone();
  copy->params_ = params_.clone();
  copy->basis_ = basis_.clone();
  copy->ranks_ = ranks_.clone();
  copy->values_ = values_.clone();
  copy->tail_k_ = tail_k_.clone();
  return copy;
}

void validate_svdq_options(const KVCacheConfig& config) { check_options(config.options<SvdqOptions>()); }

std::shared_ptr<lm::KVCache> make_svdq_cache(const KVCacheConfig& config) {
  validate_svdq_options(config);
  return std::make_shared<SvdqCache>(config.options<SvdqOptions>());
}

MethodDescriptor svdq_method() {
  MethodDescriptor m;
  m.name = "svdq";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Keys projected on an SVD latent basis fitted on the prompt's keys; the 8 latent channel groups quantized "
      "by svdq_bit_schedule (8,4,2,1,1,0,0,0: 2 bits on average), most significant first; values kept as given";
  m.paper = "SVDq: 1.25-bit and 410x Key Cache Compression for LLM Attention (Hong et al., 2025, arXiv 2502.15304)";
  m.deviations =
      "The basis is fitted per kv head on the complete blocks of the first call that has one (the prompt) "
      "and frozen; latent channels past the rank are dropped; each latent channel is KIVI's per-channel "
      "group code over blocks of svdq_group_size tokens. Real packed storage (the original counts bytes). "
      "The incomplete last block's keys stay in the input dtype.";
  m.docs = "docs/methods/svdq.md";
  m.fields = {
      option_field("svdq_rank", &SvdqOptions::svdq_rank, "Latent channels kept (None: the svdq_energy_threshold rank)"),
      option_field("svdq_energy_threshold", &SvdqOptions::svdq_energy_threshold,
                   "Without svdq_rank: keep the fewest latent channels holding this share of the keys' energy, (0, 1]"),
      option_field(
          "svdq_bit_schedule", &SvdqOptions::svdq_bit_schedule,
          "Bits of the 8 latent channel groups, most significant first, e.g. 8,4,2,1,1,0,0,0 (0 drops a group)"),
      option_field("svdq_group_size", &SvdqOptions::svdq_group_size,
                   "Tokens per block (one (scale, min) per latent channel and block)", 1, 4096),
  };
  m.validate = validate_svdq_options;
  m.make_serving = make_svdq_cache;
  m.cache_type_name = kTypeName;
  m.make_restorable = [] { return std::make_shared<SvdqCache>(SvdqOptions{}); };
  return m;
}

}  // namespace veloxquant
