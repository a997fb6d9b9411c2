#include "veloxquant/caches/vecinfer_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/core/hadamard.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "VecInferCache";

void check_geometry(int64_t dim, int key_sub, int value_sub, int key_bits, int value_bits, int window) {
  if (key_sub < 1) throw QuantizerConfigError("key_sub_dim must be >= 1, got " + std::to_string(key_sub));
  if (value_sub < 1) throw QuantizerConfigError("value_sub_dim must be >= 1, got " + std::to_string(value_sub));
  if (key_bits < 1 || key_bits > 16) {
    throw QuantizerConfigError("key_codebook_bits must lie in [1, 16], got " + std::to_string(key_bits));
  }
  if (value_bits < 1 || value_bits > 16) {
    throw QuantizerConfigError("value_codebook_bits must lie in [1, 16], got " + std::to_string(value_bits));
  }
  if (window < 0 || window > 65536) {
    throw QuantizerConfigError("residual_length must lie in [0, 65536], got " + std::to_string(window));
  }
  if (dim < 1) return;  // geometry not known yet
  if (dim % key_sub != 0 || dim % value_sub != 0) {
    throw QuantizerConfigError("head_dim " + std::to_string(dim) + " must be divisible by key_sub_dim (" +
                               std::to_string(key_sub) + ") and value_sub_dim (" + std::to_string(value_sub) + ")");
  }
  if (core::hadamard_factor_of(static_cast<int>(dim)) == 0) {
    throw QuantizerConfigError("head_dim " + std::to_string(dim) +
                               " has no Hadamard rotation (needs m * 2^k with m in {1, 12, 20, 28})");
  }
}
// vecinfer's books search with fused distance terms (pvq::ProductCodebook::fused_distances): its
// k-means and encoder run ~360 K searches of 4096 keys' codewords per layer in a 4k prefill, most
// of the method's prefill time; the fused terms halve their arithmetic (codes move only where two
// codewords' distances tie to within a rounding).
pvq::ProductCodebook vecinfer_book(int64_t dim, int sub, int bits, bool shared) {
  pvq::ProductCodebook book = pvq::make_codebook(static_cast<int>(dim), sub, bits, shared);
  book.fused_distances = true;
  return book;
}
}  // namespace

VecInferBasis::VecInferBasis(std::span<const float> smooth) : smooth_(smooth) {
  const int d = static_cast<int>(smooth_.size());
  m_ = core::hadamard_factor_of(d);
  n_ = static_cast<std::size_t>(d / m_);
  norm_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
}

void VecInferBasis::to_code_basis(const float* query, float* out) const {
  const std::size_t d = smooth_.size();
  thread_local std::vector<float> scratch;
  scratch.resize(d);
  for (std::size_t i = 0; i < d; ++i) out[i] = query[i] * smooth_[i];
  core::hadamard_transform(out, m_, n_, false, scratch.data());
  for (std::size_t i = 0; i < d; ++i) out[i] *= norm_;
}

void VecInferBasis::key_to_code_basis(const float* key, float* out) const {
  const std::size_t d = smooth_.size();
  thread_local std::vector<float> scratch;
  scratch.resize(d);
  for (std::size_t i = 0; i < d; ++i) out[i] = key[i] / smooth_[i];
  core::hadamard_transform(out, m_, n_, false, scratch.data());
  for (std::size_t i = 0; i < d; ++i) out[i] *= norm_;
}

void VecInferBasis::key_from_code_basis(const float* coded, float* out) const {
  const std::size_t d = smooth_.size();
  thread_local std::vector<float> scratch;
  scratch.resize(d);
  if (out != coded) std::memcpy(out, coded, sizeof(float) * d);
  core::hadamard_transform(out, m_, n_, true, scratch.data());  // H^T undoes H (H H^T = d I)
  for (std::size_t i = 0; i < d; ++i) out[i] *= norm_ * smooth_[i];
}

VecInferCache::VecInferCache(int key_sub_dim, int value_sub_dim, int key_bits, int value_bits, int residual_length,
                             int seed)
    : key_sub_(key_sub_dim),
      value_sub_(value_sub_dim),
      key_bits_(key_bits),
      value_bits_(value_bits),
      window_(std::max(residual_length, 1)),
      seed_(seed) {
  check_geometry(0, key_sub_dim, value_sub_dim, key_bits, value_bits, residual_length);
}

std::size_t VecInferCache::nbytes() const {
  std::size_t n =
      key_codes_.storage_bytes() + value_codes_.storage_bytes() + tail_k_.storage_bytes() + tail_v_.storage_bytes();
  if (codec_) n += codec_->keys.nbytes() + codec_->values.nbytes() + codec_->basis.smooth().nbytes();
  return n;
}

void VecInferCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  const int64_t dk = keys.dim(3), dv = values.dim(3);
  check_geometry(dk, key_sub_, value_sub_, key_bits_, value_bits_, window_);
  if (dv % value_sub_ != 0) {
    throw QuantizerConfigError("value head_dim " + std::to_string(dv) + " must be divisible by value_sub_dim (" +
                               std::to_string(value_sub_) + ")");
  }
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = dk;
  dv_ = dv;
  dtype_ = keys.dtype();
  tail_k_ = lm::Tensor({batch_, heads_, window_, dk_}, dtype_);
  tail_v_ = lm::Tensor({batch_, heads_, window_, dv_}, dtype_);
  const pvq::ProductCodebook kb = pvq::make_codebook(static_cast<int>(dk_), key_sub_, key_bits_, true);
  const pvq::ProductCodebook vb = pvq::make_codebook(static_cast<int>(dv_), value_sub_, value_bits_, false);
  key_codes_ = lm::Tensor({batch_, heads_, 0, kb.row_bytes()}, lm::DType::U8);
  value_codes_ = lm::Tensor({batch_, heads_, 0, vb.row_bytes()}, lm::DType::U8);
  capacity_ = 0;
}

void VecInferCache::ensure_rows(int64_t rows) {
  if (rows <= capacity_) return;
  const int64_t grown = capacity_ + ((rows - capacity_ + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  key_codes_ = cache_rows::copy_rows(key_codes_, frontier_, grown);
  value_codes_ = cache_rows::copy_rows(value_codes_, frontier_, grown);
  capacity_ = grown;
}

// Smoothing factors, then the key codebook on the smoothed, rotated keys and the value codebooks
// on the raw values: all from the rows coded by the first flush, every head of the layer.
void VecInferCache::train(const std::vector<float>& pending_k, const std::vector<float>& pending_v, int64_t pending,
                          int64_t coded) {
  // Only the rows this flush codes (whole windows), so a cache trimmed back to any offset at or
  // past them trains exactly what a cache fed only the kept tokens trains.
  const int64_t bhs = batch_ * heads_, n = bhs * coded;
  std::vector<float> pk(static_cast<std::size_t>(n * dk_)), pv(static_cast<std::size_t>(n * dv_));
  for (int64_t bh = 0; bh < bhs; ++bh) {
    std::copy_n(pending_k.begin() + bh * pending * dk_, coded * dk_, pk.begin() + bh * coded * dk_);
    std::copy_n(pending_v.begin() + bh * pending * dv_, coded * dv_, pv.begin() + bh * coded * dv_);
  }
  std::vector<float> smooth(static_cast<std::size_t>(dk_), 0.0f);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < dk_; ++c) {
      smooth[static_cast<std::size_t>(c)] = std::max(smooth[static_cast<std::size_t>(c)], std::fabs(pk[r * dk_ + c]));
    }
  }
  for (float& s : smooth) s = s > 1e-6f ? std::sqrt(s) : 1.0f;
  auto codec = std::make_shared<VecInferCodec>(VecInferCodec{VecInferBasis(smooth), {}, {}});
  std::vector<float> rotated(static_cast<std::size_t>(n * dk_));
  for (int64_t r = 0; r < n; ++r) codec->basis.key_to_code_basis(pk.data() + r * dk_, rotated.data() + r * dk_);
  codec->keys = vecinfer_book(dk_, key_sub_, key_bits_, true);
  codec->values = vecinfer_book(dv_, value_sub_, value_bits_, false);
  const uint64_t seed = static_cast<uint64_t>(static_cast<uint32_t>(seed_));
  pvq::train(codec->keys, rotated.data(), n, kTrainIterations, kKeyPointsPerEntry * codec->keys.entries(), seed);
  pvq::train(codec->values, pv.data(), n, kTrainIterations, kValuePointsPerEntry * codec->values.entries(), seed + 1);
  codec_ = std::move(codec);
}

lm::KeysValues VecInferCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void VecInferCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "VecInferCache::update_and_fetch");
  if (!tail_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "VecInferCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2), tail = offset_ - frontier_, pending = tail + s;
  const int64_t coded = pending / window_ * window_;
  if (coded == 0) {  // the window is not full yet
    lm::copy_token_rows(keys, tail_k_, tail);
    lm::copy_token_rows(values, tail_v_, tail);
    offset_ += s;
    return;
  }
  ensure_rows(frontier_ + coded);
  thread_local std::vector<float> pk, pv;  // grow-only per-thread buffers
  blocks_tail::gather_all_pending({batch_ * heads_, window_, dk_, dv_, tail, dtype_}, tail_k_, tail_v_, keys, values,
                                  pk, pv);
  if (!codec_) train(pk, pv, pending, coded);
  const int64_t kept = pending - coded;
  std::vector<float> rotated(static_cast<std::size_t>(coded * dk_));
  const pvq::Encoder key_encoder(codec_->keys), value_encoder(codec_->values);
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      const float* krows = pk.data() + bh * pending * dk_;
      const float* vrows = pv.data() + bh * pending * dv_;
      for (int64_t r = 0; r < coded; ++r) codec_->basis.key_to_code_basis(krows + r * dk_, rotated.data() + r * dk_);
      key_encoder.encode(rotated.data(), coded, row_ptr<uint8_t>(key_codes_, b, h, frontier_), key_codes_.strides()[2]);
      value_encoder.encode(vrows, coded, row_ptr<uint8_t>(value_codes_, b, h, frontier_), value_codes_.strides()[2]);
      blocks_tail::keep_in_tail(krows + coded * dk_, kept, tail_k_, dtype_, bh, window_, dk_);
      blocks_tail::keep_in_tail(vrows + coded * dv_, kept, tail_v_, dtype_, bh, window_, dv_);
    }
  }
  offset_ += s;
  frontier_ += coded;
}

void VecInferCache::decode_rows(bool keys, int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const {
  const pvq::ProductCodebook& book = keys ? codec_->keys : codec_->values;
  const lm::Tensor& codes = keys ? key_codes_ : value_codes_;
  const int64_t d = book.dim();
  for (int64_t j = begin; j < end; ++j) {
    float* row = out + (j - begin) * d;
    pvq::decode_row(book, row_ptr<uint8_t>(codes, b, h, j), row);
    if (keys) codec_->basis.key_from_code_basis(row, row);
  }
}

lm::KeysValues VecInferCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  std::vector<float> tmp(static_cast<std::size_t>(std::max<int64_t>(frontier_, 1) * std::max(dk_, dv_)));
  const int64_t tail = offset_ - frontier_;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      if (frontier_ > 0) {
        decode_rows(true, b, h, 0, frontier_, tmp.data());
        cache_rows::store_f32(tmp.data(), static_cast<std::size_t>(frontier_ * dk_),
                              k.raw_data() + bh * offset_ * dk_ * static_cast<int64_t>(k.element_size()), dtype);
        decode_rows(false, b, h, 0, frontier_, tmp.data());
        cache_rows::store_f32(tmp.data(), static_cast<std::size_t>(frontier_ * dv_),
                              v.raw_data() + bh * offset_ * dv_ * static_cast<int64_t>(v.element_size()), dtype);
      }
      blocks_tail::fetch_head_tail(tail_k_, dtype_, bh, window_, dk_, tail, frontier_, offset_, k);
      blocks_tail::fetch_head_tail(tail_v_, dtype_, bh, window_, dv_, tail, frontier_, offset_, v);
    }
  }
  return {std::move(k), std::move(v)};
}

void VecInferCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("VecInferCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("VecInferCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  // Before the first flush there are no codebooks: the window alone, through the same source
  // with a placeholder geometry (no coded rows are read).
  const pvq::ProductCodebook placeholder_keys = pvq::make_codebook(static_cast<int>(dk_), key_sub_, key_bits_, true);
  const pvq::ProductCodebook placeholder_values =
      pvq::make_codebook(static_cast<int>(dv_), value_sub_, value_bits_, false);
  ProductVqParts parts;
  parts.key_book = codec_ ? &codec_->keys : &placeholder_keys;
  parts.key_basis = codec_ ? &codec_->basis : nullptr;
  parts.key_codes = &key_codes_;
  parts.value_book = codec_ ? &codec_->values : &placeholder_values;
  parts.value_codes = &value_codes_;
  parts.tail_keys = &tail_k_;
  parts.tail_values = &tail_v_;
  parts.frontier = frontier_;
  parts.rows = offset_;
  parts.lut = codec_ ? lut_ : LutChoice::never;
  const ProductVqRows rows(parts);
  const attention::RowSource* segments[] = {&rows};
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, 1, attention::request_pool(request));
}

int64_t VecInferCache::trim(int64_t n) {
  const int64_t removed = blocks_tail::trim_coded_blocks(
      "VecInferCache", n,
      {.batch = batch_, .heads = heads_, .key_dim = dk_, .value_dim = dv_, .group = window_, .tail_dtype = dtype_},
      tail_k_, tail_v_,
      [this](bool keys, int64_t b, int64_t h, int64_t begin, int64_t end, float* out) {
        decode_rows(keys, b, h, begin, end, out);
      },
      frontier_, offset_);
  if (offset_ == 0) codec_.reset();  // a cache fed nothing has trained nothing
  return removed;
}

namespace {
lm::Tensor words_tensor(const pvq::ProductCodebook& book) {
  return lm::Tensor::from_f32(book.words.span(), {book.books(), book.entries(), book.sub}, lm::DType::F32);
}
}  // namespace

std::vector<lm::Tensor> VecInferCache::state() const {
  if (!tail_k_.defined()) return {};
  const int64_t tail = offset_ - frontier_;
  std::vector<lm::Tensor> out = {key_codes_.slice(2, 0, frontier_), value_codes_.slice(2, 0, frontier_),
                                 tail_k_.slice(2, 0, tail), tail_v_.slice(2, 0, tail)};
  if (codec_) {
    out.push_back(lm::Tensor::from_f32(codec_->basis.smooth().span(), {dk_}, lm::DType::F32));
    out.push_back(words_tensor(codec_->keys));
    out.push_back(words_tensor(codec_->values));
  }
  return out;
}

std::vector<std::string> VecInferCache::meta_state() const {
  return {std::to_string(key_sub_),        std::to_string(value_sub_), std::to_string(key_bits_),
          std::to_string(value_bits_),     std::to_string(window_),    std::to_string(seed_),
          std::to_string(offset_),         std::to_string(frontier_),  std::string(lm::dtype_name(dtype_)),
          codec_ ? "trained" : "untrained"};
}

void VecInferCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "VecInferCache::from_state";
  if (meta.size() != 10) {
    throw base::FormatError(std::string(who) + ": expected 10 meta entries (key/value sub dims, key/value bits, " +
                            "residual length, seed, offset, frontier, dtype, trained), got " +
                            std::to_string(meta.size()));
  }
  const auto number = [&](std::size_t i, const char* what) {
    return static_cast<int>(cache_rows::parse_meta_int(meta[i], who, what));
  };
  std::optional<VecInferCache> made;
  try {
    made.emplace(number(0, "key_sub_dim"), number(1, "value_sub_dim"), number(2, "key_codebook_bits"),
                 number(3, "value_codebook_bits"), number(4, "residual_length"), number(5, "seed"));
  } catch (const QuantizerConfigError& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  VecInferCache& fresh = *made;
  const blocks_tail::TailMeta saved = blocks_tail::parse_tail_meta(meta, 6, fresh.window_, who);
  const bool trained = meta[9] == "trained";
  if (!trained && meta[9] != "untrained")
    throw base::FormatError(std::string(who) + ": bad trained flag '" + meta[9] + "'");
  if (state.empty()) {
    if (saved.offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[6]);
    *this = std::move(fresh);
    return;
  }
  const std::size_t want = trained ? 7 : 4;
  if (state.size() != want) {
    throw base::FormatError(std::string(who) + ": expected " + std::to_string(want) + " tensors, got " +
                            std::to_string(state.size()));
  }
  if (!trained && saved.frontier != 0) throw base::FormatError(std::string(who) + ": coded rows without codebooks");
  blocks_tail::check_tail_state(state[2], state[3], saved.offset - saved.frontier, who, meta[6], meta[7]);
  try {
    fresh.allocate(state[2].astype(saved.dtype), state[3].astype(saved.dtype));
  } catch (const QuantizerConfigError& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  for (int i = 0; i < 2; ++i) {
    const lm::Tensor& s = state[static_cast<std::size_t>(i)];
    const lm::Tensor& like = i == 0 ? fresh.key_codes_ : fresh.value_codes_;
    if (s.ndim() != 4 || s.dim(0) != fresh.batch_ || s.dim(1) != fresh.heads_ || s.dim(2) != saved.frontier ||
        s.dim(3) != like.dim(3) || s.dtype() != lm::DType::U8) {
      throw base::FormatError(std::string(who) + ": code tensor " + std::to_string(i) + " " +
                              lm::shape_text(s.shape()) + " does not match " + meta[7] + " coded rows");
    }
  }
  if (trained) {
    std::vector<float> smooth = state[4].to_f32();
    if (static_cast<int64_t>(smooth.size()) != fresh.dk_) {
      throw base::FormatError(std::string(who) + ": smoothing factors have " + std::to_string(smooth.size()) +
                              " entries, head_dim is " + std::to_string(fresh.dk_));
    }
    auto codec = std::make_shared<VecInferCodec>(VecInferCodec{VecInferBasis(smooth), {}, {}});
    codec->keys = vecinfer_book(fresh.dk_, fresh.key_sub_, fresh.key_bits_, true);
    codec->values = vecinfer_book(fresh.dv_, fresh.value_sub_, fresh.value_bits_, false);
    for (int i = 0; i < 2; ++i) {
      pvq::ProductCodebook& book = i == 0 ? codec->keys : codec->values;
      std::vector<float> words = state[5 + static_cast<std::size_t>(i)].to_f32();
      if (words.size() != book.word_floats()) {
        throw base::FormatError(std::string(who) + ": codebook " + std::to_string(i) + " has " +
                                std::to_string(words.size()) + " floats, expected " +
                                std::to_string(book.word_floats()));
      }
      book.words = pvq::FloatArray(words);
    }
    fresh.codec_ = std::move(codec);
  }
  fresh.capacity_ = saved.frontier;
  fresh.key_codes_ = cache_rows::copy_rows(state[0], saved.frontier, saved.frontier);
  fresh.value_codes_ = cache_rows::copy_rows(state[1], saved.frontier, saved.frontier);
  lm::copy_token_rows(state[2].astype(saved.dtype), fresh.tail_k_, 0);
  lm::copy_token_rows(state[3].astype(saved.dtype), fresh.tail_v_, 0);
  fresh.offset_ = saved.offset;
  fresh.frontier_ = saved.frontier;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> VecInferCache::clone() const {
  auto copy = std::make_shared<VecInferCache>(*this);
  if (codec_) copy->codec_ = std::make_shared<const VecInferCodec>(*codec_);  // its own bytes, as nbytes() says
  copy->key_codes_ = key_codes_.clone();
  copy->value_codes_ = value_codes_.clone();
  copy->tail_k_ = tail_k_.clone();
  copy->tail_v_ = tail_v_.clone();
  return copy;
}

void validate_vecinfer_options(const KVCacheConfig& config) {
  const VecInferOptions& o = config.options<VecInferOptions>();
  check_geometry(config.head_dim, o.key_sub_dim, o.value_sub_dim, o.key_codebook_bits, o.value_codebook_bits,
                 config.kivi.residual_length);
}

std::shared_ptr<lm::KVCache> make_vecinfer_cache(const KVCacheConfig& config) {
  validate_vecinfer_options(config);
  const VecInferOptions& o = config.options<VecInferOptions>();
  return std::make_shared<VecInferCache>(o.key_sub_dim, o.value_sub_dim, o.key_codebook_bits, o.value_codebook_bits,
                                         config.kivi.residual_length, config.seed);
}

MethodDescriptor vecinfer_method() {
  MethodDescriptor m;
  m.name = "vecinfer";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {
      .trimmable = true, .fused_attention = true, .accepts_bit_width_list = true, .real_compression = true};
  m.blurb =
      "Per-channel smoothing + Walsh-Hadamard on keys, then product VQ of keys (4-dim sub-vectors, 4096 "
      "codewords) and values (8-dim, 256 codewords) against codebooks k-means-trained on the prefill; the "
      "newest residual_length tokens stay in the input dtype";
  m.paper =
      "Efficient LLM Inference with Low-Bit KV Cache via Outlier-Suppressed Vector Quantization (VecInfer; "
      "Yao et al., arXiv 2510.06175)";
  m.deviations =
      "Codebooks and smoothing factors are trained by seeded k-means on the first flushed window (the "
      "prefill) instead of offline calibration; the array fields smooth_factors, key_codebook and "
      "value_codebook are not options. Smoothing factors are per channel, shared by the layer's kv heads "
      "(queries are prepared once per call, before their head is known). One key codebook for every "
      "sub-vector position, one value codebook per position. Always real compressed storage (the "
      "original's fused_sdpa_memory_bound mode): packed codes only, no fp16 copy; attention scores keys "
      "and accumulates values straight from their codewords (no per-query lookup tables at the default "
      "geometry). "
      "bit_width_inlier (int or list) is accepted and not read.";
  m.docs = "docs/methods/vecinfer.md";
  m.fields = {
      option_field("key_sub_dim", &VecInferOptions::key_sub_dim, "Coordinates per key sub-vector; divides head_dim", 1,
                   256),
      option_field("value_sub_dim", &VecInferOptions::value_sub_dim,
                   "Coordinates per value sub-vector; divides head_dim", 1, 256),
      option_field("key_codebook_bits", &VecInferOptions::key_codebook_bits,
                   "Bits per key code (2^bits codewords, k-means on the prefill)", 1, 16),
      option_field("value_codebook_bits", &VecInferOptions::value_codebook_bits,
                   "Bits per value code (2^bits codewords per position)", 1, 16),
  };
  m.borrowed_fields = {"residual_length"};  // KIVI's fp16 window, shared as in the original
  m.validate = validate_vecinfer_options;
  m.make_serving = make_vecinfer_cache;
  m.cache_type_name = kTypeName;
  m.make_restorable = [] { return std::make_shared<VecInferCache>(4, 8, 12, 8, 128, 42); };
  return m;
}

}  // namespace veloxquant
