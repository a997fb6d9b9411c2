#include "veloxquant/caches/comm_vq_cache.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "CommVqCache";

void check_options(int64_t dim, int bits, int n_books, int iters) {
  if (bits < 1 || bits > 16)
    throw QuantizerConfigError("comm_vq_bits must lie in [1, 16], got " + std::to_string(bits));
  if (n_books < 1) {
    throw QuantizerConfigError("comm_vq_n_codebooks must be >= 1, got " + std::to_string(n_books));
  }
  if (iters < 1) throw QuantizerConfigError("comm_vq_n_em_iters must be >= 1, got " + std::to_string(iters));
  if (dim >= 1 && dim % n_books != 0) {
    throw QuantizerConfigError("head_dim " + std::to_string(dim) + " must be divisible by comm_vq_n_codebooks (" +
                               std::to_string(n_books) + ")");
  }
}
}  // namespace

CommVqCache::CommVqCache(int bits, int n_codebooks, int em_iters, int seed)
    : bits_(bits), n_books_(n_codebooks), iters_(em_iters), seed_(seed) {
  check_options(0, bits, n_codebooks, em_iters);
}

std::size_t CommVqCache::nbytes() const {
  return key_codes_.storage_bytes() + values_.storage_bytes() + (book_ ? book_->nbytes() : 0);
}

void CommVqCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  check_options(keys.dim(3), bits_, n_books_, iters_);
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  dtype_ = keys.dtype();
  const pvq::ProductCodebook geometry =
      pvq::make_codebook(static_cast<int>(dk_), static_cast<int>(dk_ / n_books_), bits_, false);
  key_codes_ = lm::Tensor({batch_, heads_, 0, geometry.row_bytes()}, lm::DType::U8);
  values_ = lm::Tensor({batch_, heads_, 0, dv_}, dtype_);
  capacity_ = 0;
}

void CommVqCache::ensure_rows(int64_t rows) {
  if (rows <= capacity_) return;
  const int64_t grown = capacity_ + ((rows - capacity_ + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  key_codes_ = cache_rows::copy_rows(key_codes_, offset_, grown);
  values_ = cache_rows::copy_rows(values_, offset_, grown);
  capacity_ = grown;
}

lm::KeysValues CommVqCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void CommVqCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "CommVqCache::update_and_fetch");
  if (!values_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "CommVqCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2);
  ensure_rows(offset_ + s);
  thread_local std::vector<float> new_k;
  cache_rows::widen_to_f32(keys, new_k);  // [B * H, s, Dk]
  if (!book_) {
    // Hard EM (k-means) on this first call's keys, every head of the layer: its leading whole
    // kTrainBlock-row blocks (all of it when shorter), so that a trim keeping those rows leaves the
    // cache training exactly what a cache fed only the kept tokens trains.
    const int64_t rows = s >= kTrainBlock ? s / kTrainBlock * kTrainBlock : s, bhs = batch_ * heads_;
    std::vector<float> train_rows(static_cast<std::size_t>(bhs * rows * dk_));
    for (int64_t bh = 0; bh < bhs; ++bh) {
      std::copy_n(new_k.begin() + bh * s * dk_, rows * dk_, train_rows.begin() + bh * rows * dk_);
    }
    auto book = std::make_shared<pvq::ProductCodebook>(
        pvq::make_codebook(static_cast<int>(dk_), static_cast<int>(dk_ / n_books_), bits_, false));
    pvq::train(*book, train_rows.data(), bhs * rows, iters_, kPointsPerEntry * book->entries(),
               static_cast<uint64_t>(static_cast<uint32_t>(seed_)));
    book_ = std::move(book);
  }
  if (encoder_book_ != book_) {
    encoder_ = std::make_shared<const pvq::Encoder>(*book_);
    encoder_book_ = book_;
  }
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      encoder_->encode(new_k.data() + (b * heads_ + h) * s * dk_, s, row_ptr<uint8_t>(key_codes_, b, h, offset_),
                       key_codes_.strides()[2]);
    }
  }
  lm::copy_token_rows(values, values_, offset_);
  offset_ += s;
}

lm::KeysValues CommVqCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  std::vector<float> tmp(static_cast<std::size_t>(std::max<int64_t>(offset_, 1) * dk_));
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      for (int64_t j = 0; j < offset_; ++j)
        pvq::decode_row(*book_, row_ptr<uint8_t>(key_codes_, b, h, j), tmp.data() + j * dk_);
      cache_rows::store_f32(tmp.data(), static_cast<std::size_t>(offset_ * dk_),
                            k.raw_data() + bh * offset_ * dk_ * static_cast<int64_t>(k.element_size()), dtype);
    }
  }
  lm::Tensor v = values_.slice(2, 0, offset_).astype(dtype);
  return {std::move(k), std::move(v)};
}

void CommVqCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("CommVqCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("CommVqCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  ProductVqParts parts;
  parts.key_book = book_.get();
  parts.key_encoder = encoder_book_ == book_ ? encoder_.get() : nullptr;  // store() just made it so
  parts.key_codes = &key_codes_;
  parts.values = &values_;
  parts.frontier = offset_;
  parts.rows = offset_;
  parts.lut = lut_;
  const ProductVqRows rows(parts);
  const attention::RowSource* segments[] = {&rows};
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, 1, attention::request_pool(request));
}

int64_t CommVqCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("CommVqCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset_);
  offset_ -= removed;
  if (offset_ == 0) book_.reset();
  return removed;
}

std::vector<lm::Tensor> CommVqCache::state() const {
  if (!values_.defined() || offset_ == 0) return {};
  return {key_codes_.slice(2, 0, offset_), values_.slice(2, 0, offset_),
          lm::Tensor::from_f32(book_->words.span(), {book_->books(), book_->entries(), book_->sub}, lm::DType::F32)};
}

std::vector<std::string> CommVqCache::meta_state() const {
  return {std::to_string(bits_), std::to_string(n_books_), std::to_string(iters_),
          std::to_string(seed_), std::to_string(offset_),  std::string(lm::dtype_name(dtype_))};
}

void CommVqCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "CommVqCache::from_state";
  if (meta.size() != 6) {
    throw base::FormatError(std::string(who) + ": expected 6 meta entries (bits, codebooks, EM iterations, seed, " +
                            "offset, dtype), got " + std::to_string(meta.size()));
  }
  const auto number = [&](std::size_t i, const char* what) { return cache_rows::parse_meta_int(meta[i], who, what); };
  std::optional<CommVqCache> made;
  try {
    made.emplace(static_cast<int>(number(0, "comm_vq_bits")), static_cast<int>(number(1, "comm_vq_n_codebooks")),
                 static_cast<int>(number(2, "comm_vq_n_em_iters")), static_cast<int>(number(3, "seed")));
  } catch (const QuantizerConfigError& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  CommVqCache& fresh = *made;
  const int64_t offset = number(4, "offset");
  if (offset < 0) throw base::FormatError(std::string(who) + ": bad offset '" + meta[4] + "'");
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[4]);
    *this = std::move(fresh);
    return;
  }
  if (state.size() != 3)
    throw base::FormatError(std::string(who) + ": expected 3 tensors, got " + std::to_string(state.size()));
  const lm::Tensor& codes = state[0];
  const lm::Tensor& values = state[1];
  if (codes.ndim() != 4 || values.ndim() != 4 || codes.dim(2) != offset || values.dim(2) != offset ||
      codes.dim(0) != values.dim(0) || codes.dim(1) != values.dim(1) || codes.dtype() != lm::DType::U8) {
    throw base::FormatError(std::string(who) + ": codes " + lm::shape_text(codes.shape()) + " / values " +
                            lm::shape_text(values.shape()) + " do not match offset " + meta[4]);
  }
  // The key width follows from the codebook tensor [n, 2^bits, D / n].
  const lm::Tensor& words = state[2];
  if (words.ndim() != 3 || words.dim(0) != fresh.n_books_ || words.dim(1) != (int64_t{1} << fresh.bits_)) {
    throw base::FormatError(std::string(who) + ": codebook " + lm::shape_text(words.shape()) + " does not match " +
                            meta[1] + " codebooks of 2^" + meta[0] + " entries");
  }
  const int64_t dk = words.dim(0) * words.dim(2);
  fresh.batch_ = codes.dim(0);
  fresh.heads_ = codes.dim(1);
  fresh.dk_ = dk;
  fresh.dv_ = values.dim(3);
  fresh.dtype_ = values.dtype();
  auto book = std::make_shared<pvq::ProductCodebook>(
      pvq::make_codebook(static_cast<int>(dk), static_cast<int>(words.dim(2)), fresh.bits_, false));
  if (codes.dim(3) != book->row_bytes()) {
    throw base::FormatError(std::string(who) + ": code rows of " + std::to_string(codes.dim(3)) + " bytes, expected " +
                            std::to_string(book->row_bytes()));
  }
  book->words = pvq::FloatArray(words.to_f32());
  fresh.book_ = std::move(book);
  fresh.key_codes_ = cache_rows::copy_rows(codes, offset, offset);
  fresh.values_ = cache_rows::copy_rows(values, offset, offset);
  fresh.capacity_ = offset;
  fresh.offset_ = offset;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> CommVqCache::clone() const {
  auto copy = std::make_shared<CommVqCache>(*this);
  copy->key_codes_ = key_codes_.clone();
  copy->values_ = values_.clone();
  if (book_) copy->book_ = std::make_shared<const pvq::ProductCodebook>(*book_);  // its own bytes, as nbytes() says
  return copy;
}

void validate_comm_vq_options(const KVCacheConfig& config) {
  const CommVqOptions& o = config.options<CommVqOptions>();
  check_options(config.head_dim, o.comm_vq_bits, o.comm_vq_n_codebooks, o.comm_vq_n_em_iters);
}

std::shared_ptr<lm::KVCache> make_comm_vq_cache(const KVCacheConfig& config) {
  validate_comm_vq_options(config);
  const CommVqOptions& o = config.options<CommVqOptions>();
  return std::make_shared<CommVqCache>(o.comm_vq_bits, o.comm_vq_n_codebooks, o.comm_vq_n_em_iters, config.seed);
}

MethodDescriptor comm_vq_method() {
  MethodDescriptor m;
  m.name = "comm_vq";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Keys only: product VQ of post-RoPE keys with comm_vq_n_codebooks codebooks of 2^comm_vq_bits entries "
      "trained by EM (k-means) on the first call; values stay in the input dtype";
  m.paper =
      "CommVQ: Commutative Vector Quantization for KV Cache Compression (Li et al., ICML 2025, arXiv "
      "2506.18879)";
  m.deviations =
      "As the original's serving cache: post-RoPE keys, product (not additive) codebooks, one per "
      "sub-vector of head_dim / comm_vq_n_codebooks coordinates, shared by the layer's kv heads, hard EM "
      "(seeded k-means++ then comm_vq_n_em_iters Lloyd iterations on at most 16 x 2^bits sub-vectors of "
      "the first call); the paper's RoPE-commutative codebook (which lets pre-RoPE codes be scored "
      "after rotation) is not built, since the host hands the cache keys after RoPE. Values are kept "
      "as stored. Real packed storage; keys scored through per-query lookup tables.";
  m.docs = "docs/methods/comm_vq.md";
  m.fields = {
      option_field("comm_vq_bits", &CommVqOptions::comm_vq_bits, "Bits per key code (2^bits codewords per codebook)", 1,
                   16),
      option_field("comm_vq_n_codebooks", &CommVqOptions::comm_vq_n_codebooks,
                   "Codes per key (sub-vectors of head_dim / n coordinates); divides head_dim", 1, 256),
      option_field("comm_vq_n_em_iters", &CommVqOptions::comm_vq_n_em_iters,
                   "EM (Lloyd) iterations of the codebook training on the first call", 1, 1000),
  };
  m.validate = validate_comm_vq_options;
  m.make_serving = make_comm_vq_cache;
  m.cache_type_name = kTypeName;
  m.make_restorable = [] { return std::make_shared<CommVqCache>(8, 4, 20, 42); };
  return m;
}

}  // namespace veloxquant
