#include "veloxquant/caches/nsnquant_cache.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/caches/nsnquant_rows.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "NsnQuantCache";
constexpr int kMaxStages = 8;

int log2_exact(int x) {
  int k = 0;
  while ((1 << k) < x) ++k;
  return (1 << k) == x ? k : -1;
}

// Stages of the residual VQ that give `bits` per element; throws naming the offending field.
int stages_for(int bits, int codebook_size, int subvector_dim) {
  if (bits < 1 || bits > 8) throw QuantizerConfigError("nsn_bits must lie in [1, 8], got " + std::to_string(bits));
  const int code_bits = log2_exact(codebook_size);
  if (codebook_size < 2 || codebook_size > 256 || code_bits < 0) {
    throw QuantizerConfigError("nsn_codebook_size must be a power of two in [2, 256] (codes are one byte), got " +
                               std::to_string(codebook_size));
  }
  if (subvector_dim < 1 || subvector_dim > 64) {
    throw QuantizerConfigError("nsn_subvector_dim must lie in [1, 64], got " + std::to_string(subvector_dim));
  }
  // Each stage spends log2(nsn_codebook_size) bits on nsn_subvector_dim elements.
  if ((bits * subvector_dim) % code_bits != 0 || (bits * subvector_dim) / code_bits > kMaxStages) {
    throw QuantizerConfigError("nsn_bits " + std::to_string(bits) + " is not a whole number (1.." +
                               std::to_string(kMaxStages) +
                               ") of residual stages of log2(nsn_codebook_size) / "
                               "nsn_subvector_dim = " +
                               std::to_string(code_bits) + "/" + std::to_string(subvector_dim) + " bits per element");
  }
  return (bits * subvector_dim) / code_bits;
}
}  // namespace

NsnQuantCache::NsnQuantCache(int bits, int residual_length, int codebook_size, int subvector_dim, int seed)
    : bits_(bits), chunk_(residual_length), entries_(codebook_size), sub_(subvector_dim), seed_(seed) {
  stages_ = stages_for(bits, codebook_size, subvector_dim);
  if (residual_length < 2 || residual_length > 65536) {
    throw QuantizerConfigError(
        "nsn_residual_length must lie in [2, 65536] (a flushed chunk of that many tokens is "
        "the Shift step's population), got " +
        std::to_string(residual_length));
  }
}

std::size_t NsnQuantCache::nbytes() const {
  return key_codes_.storage_bytes() + value_codes_.storage_bytes() + key_scales_.storage_bytes() +
         value_scales_.storage_bytes() + key_means_.storage_bytes() + value_means_.storage_bytes() +
         tail_k_.storage_bytes() + tail_v_.storage_bytes();
}

void NsnQuantCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  const int64_t dk = keys.dim(3), dv = values.dim(3);
  // The transforms first: an unsupported head_dim fails here, before anything is allocated.
  auto book = quant::shared_nsn_codebook(static_cast<uint64_t>(static_cast<uint32_t>(seed_)), entries_, sub_, stages_);
  auto kt = std::make_shared<const quant::NsnTransform>(dk, static_cast<uint64_t>(static_cast<uint32_t>(seed_)), book);
  auto vt = dv == dk ? kt
                     : std::make_shared<const quant::NsnTransform>(
                           dv, static_cast<uint64_t>(static_cast<uint32_t>(seed_)), book);
  kt_ = std::move(kt);
  vt_ = std::move(vt);
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = dk;
  dv_ = dv;
  dtype_ = keys.dtype();
  tail_k_ = lm::Tensor({batch_, heads_, chunk_, dk_}, dtype_);
  tail_v_ = lm::Tensor({batch_, heads_, chunk_, dv_}, dtype_);
  key_codes_ = lm::Tensor({batch_, heads_, 0, kt_->codes_per_row()}, lm::DType::U8);
  value_codes_ = lm::Tensor({batch_, heads_, 0, vt_->codes_per_row()}, lm::DType::U8);
  key_scales_ = lm::Tensor({batch_, heads_, 0, 2}, lm::DType::F16);
  value_scales_ = lm::Tensor({batch_, heads_, 0, 2}, lm::DType::F16);
  key_means_ = lm::Tensor({batch_, heads_, 0, dk_}, lm::DType::F16);
  value_means_ = lm::Tensor({batch_, heads_, 0, dv_}, lm::DType::F16);
  capacity_ = 0;
}

void NsnQuantCache::ensure_rows(int64_t rows) {
  if (rows <= capacity_) return;
  // Whole 256-token steps, rounded up to whole chunks: codes, scales and means grow together.
  int64_t grown = capacity_ + ((rows - capacity_ + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  grown = ((grown + chunk_ - 1) / chunk_) * chunk_;
  key_codes_ = cache_rows::copy_rows(key_codes_, frontier_, grown);
  value_codes_ = cache_rows::copy_rows(value_codes_, frontier_, grown);
  key_scales_ = cache_rows::copy_rows(key_scales_, frontier_, grown);
  value_scales_ = cache_rows::copy_rows(value_scales_, frontier_, grown);
  key_means_ = cache_rows::copy_rows(key_means_, frontier_ / chunk_, grown / chunk_);
  value_means_ = cache_rows::copy_rows(value_means_, frontier_ / chunk_, grown / chunk_);
  capacity_ = grown;
}

lm::KeysValues NsnQuantCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void NsnQuantCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "NsnQuantCache::update_and_fetch");
  if (!tail_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "NsnQuantCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2), tail = offset_ - frontier_, pending_rows = tail + s;
  const int64_t chunks = pending_rows / chunk_;
  if (chunks == 0) {  // the buffer is not full yet: the rows wait as they are
    lm::copy_token_rows(keys, tail_k_, tail);
    lm::copy_token_rows(values, tail_v_, tail);
    offset_ += s;
    return;
  }
  ensure_rows(frontier_ + chunks * chunk_);
  // Pending rows = every head's buffer followed by its new rows, in f32 (grow-only per-thread
  // buffers), keys then values.
  const int64_t heads = batch_ * heads_;
  thread_local std::vector<float> pk, pv, new_k, new_v;
  pk.resize(static_cast<std::size_t>(heads * pending_rows * dk_));
  pv.resize(static_cast<std::size_t>(heads * pending_rows * dv_));
  cache_rows::widen_to_f32(keys, new_k);
  cache_rows::widen_to_f32(values, new_v);
  const int64_t kept = pending_rows - chunks * chunk_;
  // (Pointers, not the thread_local vectors: a pool thread naming pk would see its own, empty one.)
  float* const pending_k = pk.data();
  float* const pending_v = pv.data();
  const auto pending = [=, this](int64_t bh, int which) {
    return which == 0 ? pending_k + bh * pending_rows * dk_ : pending_v + bh * pending_rows * dv_;
  };
  for (int64_t bh = 0; bh < heads; ++bh) {
    for (int which = 0; which < 2; ++which) {
      const int64_t d = which == 0 ? dk_ : dv_;
      const std::byte* rows = blocks_tail::head_rows(which == 0 ? tail_k_ : tail_v_, bh, chunk_, d);
      float* p = pending(bh, which);
      cache_rows::load_f32(rows, dtype_, static_cast<std::size_t>(tail * d), p);
      std::memcpy(p + tail * d, (which == 0 ? new_k : new_v).data() + bh * s * d,
                  sizeof(float) * static_cast<std::size_t>(s * d));
    }
  }
  // Every (head, keys/values, chunk) encodes on its own (its rows, scales and mean only): across
  // the pool, as a prefill call is chunks x heads x 2 of them and the codebook search is most of
  // the work.
  base::ThreadPool::global().parallel_for(heads * 2 * chunks, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t bh = u / (2 * chunks), c = u % chunks, b = bh / heads_, h = bh % heads_;
      const int which = static_cast<int>((u / chunks) % 2);
      const bool is_key = which == 0;
      const int64_t d = is_key ? dk_ : dv_;
      const quant::NsnTransform& t = is_key ? *kt_ : *vt_;
      lm::Tensor& codes = is_key ? key_codes_ : value_codes_;
      lm::Tensor& scales = is_key ? key_scales_ : value_scales_;
      lm::Tensor& means = is_key ? key_means_ : value_means_;
      const int64_t row = frontier_ + c * chunk_;
      t.encode_chunk(pending(bh, which) + c * chunk_ * d, chunk_, row_ptr<uint8_t>(codes, b, h, row),
                     codes.strides()[2], row_ptr<uint16_t>(scales, b, h, row), scales.strides()[2],
                     row_ptr<uint16_t>(means, b, h, row / chunk_));
    }
  });
  for (int64_t bh = 0; bh < heads; ++bh) {
    for (int which = 0; which < 2; ++which) {
      const int64_t d = which == 0 ? dk_ : dv_;
      std::byte* rows = blocks_tail::head_rows(which == 0 ? tail_k_ : tail_v_, bh, chunk_, d);
      cache_rows::store_f32(pending(bh, which) + chunks * chunk_ * d, static_cast<std::size_t>(kept * d), rows, dtype_);
    }
  }
  offset_ += s;
  frontier_ += chunks * chunk_;
}

void NsnQuantCache::decode_rows(bool keys, int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const {
  const quant::NsnTransform& t = keys ? *kt_ : *vt_;
  const int64_t d = t.dim();
  const lm::Tensor& codes = keys ? key_codes_ : value_codes_;
  const lm::Tensor& scales = keys ? key_scales_ : value_scales_;
  const lm::Tensor& means = keys ? key_means_ : value_means_;
  std::vector<float> mean(static_cast<std::size_t>(d));
  int64_t mean_chunk = -1;
  for (int64_t j = begin; j < end; ++j) {
    if (j / chunk_ != mean_chunk) {
      mean_chunk = j / chunk_;
      const uint16_t* m = row_ptr<uint16_t>(means, b, h, mean_chunk);
      for (int64_t i = 0; i < d; ++i) mean[static_cast<std::size_t>(i)] = base::f16_to_f32(m[i]);
    }
    float* row = out + (j - begin) * d;
    t.decode_rotated(row_ptr<uint8_t>(codes, b, h, j), row_ptr<uint16_t>(scales, b, h, j), mean.data(), row);
    t.unrotate(row, row);
  }
}

lm::KeysValues NsnQuantCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  std::vector<float> tmp(static_cast<std::size_t>(std::max<int64_t>(frontier_, 1) * std::max(dk_, dv_)));
  const int64_t tail = offset_ - frontier_;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      decode_rows(true, b, h, 0, frontier_, tmp.data());
      cache_rows::store_f32(tmp.data(), static_cast<std::size_t>(frontier_ * dk_),
                            k.raw_data() + bh * offset_ * dk_ * static_cast<int64_t>(k.element_size()), dtype);
      decode_rows(false, b, h, 0, frontier_, tmp.data());
      cache_rows::store_f32(tmp.data(), static_cast<std::size_t>(frontier_ * dv_),
                            v.raw_data() + bh * offset_ * dv_ * static_cast<int64_t>(v.element_size()), dtype);
      blocks_tail::fetch_head_tail(tail_k_, dtype_, bh, chunk_, dk_, tail, frontier_, offset_, k);
      blocks_tail::fetch_head_tail(tail_v_, dtype_, bh, chunk_, dv_, tail, frontier_, offset_, v);
    }
  }
  return {std::move(k), std::move(v)};
}

// Attention straight from the codes through the shared driver (caches/nsnquant_rows.h).
void NsnQuantCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("NsnQuantCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("NsnQuantCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  const NsnQuantRows rows(*kt_, *vt_, key_codes_, value_codes_, key_scales_, value_scales_, key_means_, value_means_,
                          tail_k_, tail_v_, frontier_, offset_, chunk_);
  const attention::RowSource* segments[] = {&rows};
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, 1, attention::request_pool(request));
}

int64_t NsnQuantCache::trim(int64_t n) {
  const int64_t removed = blocks_tail::trim_coded_blocks(
      "NsnQuantCache", n,
      {.batch = batch_, .heads = heads_, .key_dim = dk_, .value_dim = dv_, .group = chunk_, .tail_dtype = dtype_},
      tail_k_, tail_v_,
      [this](bool keys, int64_t b, int64_t h, int64_t begin, int64_t end, float* out) {
        decode_rows(keys, b, h, begin, end, out);
      },
      frontier_, offset_);
  return removed;
}

std::vector<lm::Tensor> NsnQuantCache::state() const {
  if (!tail_k_.defined()) return {};
  const int64_t chunks = frontier_ / chunk_, tail = offset_ - frontier_;
  return {key_codes_.slice(2, 0, frontier_),  value_codes_.slice(2, 0, frontier_),
          key_scales_.slice(2, 0, frontier_), value_scales_.slice(2, 0, frontier_),
          key_means_.slice(2, 0, chunks),     value_means_.slice(2, 0, chunks),
          tail_k_.slice(2, 0, tail),          tail_v_.slice(2, 0, tail)};
}

std::vector<std::string> NsnQuantCache::meta_state() const {
  return {
      std::to_string(bits_), std::to_string(chunk_),  std::to_string(entries_),  std::to_string(sub_),
      std::to_string(seed_), std::to_string(offset_), std::to_string(frontier_), std::string(lm::dtype_name(dtype_))};
}

void NsnQuantCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "NsnQuantCache::from_state";
  if (meta.size() != 8) {
    throw base::FormatError(std::string(who) + ": expected 8 meta entries (bits, residual length, codebook size, " +
                            "sub-vector dim, seed, offset, frontier, dtype), got " + std::to_string(meta.size()));
  }
  const auto number = [&](std::size_t i, const char* what) {
    return static_cast<int>(cache_rows::parse_meta_int(meta[i], who, what));
  };
  std::optional<NsnQuantCache> made;
  try {
    made.emplace(number(0, "bits"), number(1, "residual length"), number(2, "codebook size"),
                 number(3, "sub-vector dim"), number(4, "seed"));
  } catch (const QuantizerConfigError& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  NsnQuantCache& fresh = *made;
  const blocks_tail::TailMeta saved = blocks_tail::parse_tail_meta(meta, 5, fresh.chunk_, who);
  const int64_t offset = saved.offset, frontier = saved.frontier;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[5]);
    *this = std::move(fresh);
    return;
  }
  if (state.size() != 8)
    throw base::FormatError(std::string(who) + ": expected 8 tensors, got " + std::to_string(state.size()));
  blocks_tail::check_tail_state(state[6], state[7], offset - frontier, who, meta[5], meta[6]);
  try {
    fresh.allocate(state[6].astype(saved.dtype), state[7].astype(saved.dtype));
  } catch (const QuantizerConfigError& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  const int64_t chunks = frontier / fresh.chunk_;
  const lm::Tensor* like[] = {&fresh.key_codes_,    &fresh.value_codes_, &fresh.key_scales_,
                              &fresh.value_scales_, &fresh.key_means_,   &fresh.value_means_};
  const int64_t rows[] = {frontier, frontier, frontier, frontier, chunks, chunks};
  for (int i = 0; i < 6; ++i) {
    const lm::Tensor& s = state[static_cast<std::size_t>(i)];
    if (s.ndim() != 4 || s.dim(0) != fresh.batch_ || s.dim(1) != fresh.heads_ || s.dim(2) != rows[i] ||
        s.dim(3) != like[i]->dim(3) || s.dtype() != like[i]->dtype()) {
      throw base::FormatError(std::string(who) + ": tensor " + std::to_string(i) + " " + lm::shape_text(s.shape()) +
                              " does not match " + std::to_string(rows[i]) + " rows");
    }
  }
  fresh.capacity_ = frontier;
  fresh.key_codes_ = cache_rows::copy_rows(state[0], frontier, frontier);
  fresh.value_codes_ = cache_rows::copy_rows(state[1], frontier, frontier);
  fresh.key_scales_ = cache_rows::copy_rows(state[2], frontier, frontier);
  fresh.value_scales_ = cache_rows::copy_rows(state[3], frontier, frontier);
  fresh.key_means_ = cache_rows::copy_rows(state[4], chunks, chunks);
  fresh.value_means_ = cache_rows::copy_rows(state[5], chunks, chunks);
  lm::copy_token_rows(state[6].astype(saved.dtype), fresh.tail_k_, 0);
  lm::copy_token_rows(state[7].astype(saved.dtype), fresh.tail_v_, 0);
  fresh.offset_ = offset;
  fresh.frontier_ = frontier;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> NsnQuantCache::clone() const {
  auto copy = std::make_shared<NsnQuantCache>(*this);
  copy->key_codes_ = key_codes_.clone();
  copy->value_codes_ = value_codes_.clone();
  copy->key_scales_ = key_scales_.clone();
  copy->value_scales_ = value_scales_.clone();
  copy->key_means_ = key_means_.clone();
  copy->value_means_ = value_means_.clone();
  copy->tail_k_ = tail_k_.clone();
  copy->tail_v_ = tail_v_.clone();
  return copy;
}

int resolved_nsn_bits(const KVCacheConfig& config) {
  const NsnQuantOptions& o = config.options<NsnQuantOptions>();
  if (o.nsn_bits < 0 || o.nsn_bits > 8) {
    throw QuantizerConfigError("nsn_bits must be 0 (follow bit_width_inlier) or lie in [1, 8], got " +
                               std::to_string(o.nsn_bits));
  }
  if (o.nsn_bits > 0) return o.nsn_bits;
  const int bits = config.bit_width_inlier.scalar();
  if (bits < 1 || bits > 8) {
    throw QuantizerConfigError("bit_width_inlier for 'nsnquant' (nsn_bits = 0 follows it) must lie in [1, 8], got " +
                               std::to_string(bits));
  }
  return bits;
}

void validate_nsnquant_options(const KVCacheConfig& config) {
  const NsnQuantOptions& o = config.options<NsnQuantOptions>();
  stages_for(resolved_nsn_bits(config), o.nsn_codebook_size, o.nsn_subvector_dim);
  if (o.nsn_residual_length < 2 || o.nsn_residual_length > 65536) {
    throw QuantizerConfigError(
        "nsn_residual_length must lie in [2, 65536] (a flushed chunk of that many tokens is "
        "the Shift step's population), got " +
        std::to_string(o.nsn_residual_length));
  }
  if (o.nsn_seed < 0) throw QuantizerConfigError("nsn_seed must be >= 0, got " + std::to_string(o.nsn_seed));
  if (o.nsn_max_ctx < 1) throw QuantizerConfigError("nsn_max_ctx must be >= 1, got " + std::to_string(o.nsn_max_ctx));
}

std::shared_ptr<lm::KVCache> make_nsnquant_cache(const KVCacheConfig& config) {
  validate_nsnquant_options(config);
  const NsnQuantOptions& o = config.options<NsnQuantOptions>();
  return std::make_shared<NsnQuantCache>(resolved_nsn_bits(config), o.nsn_residual_length, o.nsn_codebook_size,
                                         o.nsn_subvector_dim, o.nsn_seed);
}

MethodDescriptor nsnquant_method() {
  MethodDescriptor m;
  m.name = "nsnquant";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Normalize-Shift-Normalize + Hadamard so each K/V token matches N(0, I), then residual VQ of 8-dim "
      "sub-vectors against one synthetic-Gaussian 256-entry codebook (calibration-free); the newest "
      "nsn_residual_length tokens stay in the input dtype and are quantized a chunk at a time";
  m.paper =
      "NSNQuant: A Double Normalization Approach for Calibration-Free Low-Bit Vector Quantization of KV Cache "
      "(Son, Choi & Yoo, NeurIPS 2025, arXiv 2505.18231)";
  m.deviations =
      "nsn_bits defaults to 0 = follow bit_width_inlier (default 2, the original's nsn_bits default), so "
      "--bits and per-layer bit lists apply. Real packed storage (one byte per sub-vector per stage, f16 (a, b) per "
      "token, one f16 Shift mean "
      "per chunk); the original counts bytes. nsn_bits above log2(nsn_codebook_size) / nsn_subvector_dim "
      "is reached by residual stages, each a k-means codebook fitted to what the previous stages leave on "
      "synthetic Gaussian data. The Shift mean is the flushed chunk's own (chunk = nsn_residual_length "
      "tokens), so quantization never depends on call boundaries; nsn_residual_length must be >= 2. "
      "nsn_max_ctx is accepted and not read (storage grows in 256-token steps). The rotation has random "
      "signs (from nsn_seed). Trim reopens a chunk from its codes. Fused attention scores keys by "
      "codebook lookup tables.";
  m.docs = "docs/methods/nsnquant.md";
  m.fields = {
      option_field("nsn_bits", &NsnQuantOptions::nsn_bits,
                   "Bits per element (residual stages x log2(nsn_codebook_size) / nsn_subvector_dim); 0 follows "
                   "bit_width_inlier (default 2, the original's nsn_bits)",
                   0, 8),
      option_field("nsn_residual_length", &NsnQuantOptions::nsn_residual_length,
                   "Newest tokens kept in the input dtype; quantized a chunk of this many at a time (>= 2)", 2, 65536),
      option_field("nsn_codebook_size", &NsnQuantOptions::nsn_codebook_size,
                   "Codewords per stage: a power of two in [2, 256]", 2, 256),
      option_field("nsn_subvector_dim", &NsnQuantOptions::nsn_subvector_dim,
                   "Coordinates per VQ sub-vector; must divide head_dim", 1, 64),
      option_field("nsn_seed", &NsnQuantOptions::nsn_seed, "Seed of the synthetic codebook data and rotation signs", 0,
                   2147483647),
      option_field("nsn_max_ctx", &NsnQuantOptions::nsn_max_ctx,
                   "Accepted for compatibility, not read (storage grows in 256-token steps)", 1, 1 << 30),
  };
  m.generic_fields = {"bit_width_inlier"};
  m.reads_bit_width = [](const KVCacheConfig& c) { return c.options<NsnQuantOptions>().nsn_bits == 0; };
  m.validate = validate_nsnquant_options;
  m.make_serving = make_nsnquant_cache;
  m.cache_type_name = kTypeName;
  // Placeholder parameters: from_state() rebuilds every one of them from meta_state().
  m.make_restorable = [] { return std::make_shared<NsnQuantCache>(2, 64, 256, 8, 1234); };
  return m;
}

}  // namespace veloxquant
