#include "veloxquant/caches/gear_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>

#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/f16_dots.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/caches/block_svd.h"
#include "veloxquant/caches/dense_and_sparse_rows.h"
#include "veloxquant/caches/kivi_row_source.h"
#include "veloxquant/caches/low_rank_rows.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/caches/sink_rows.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/rows/group_affine_codes.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "GearCache";
constexpr int64_t kMinTermGrowth = 64;  // factor rows added at least per growth
// Queries per call from which attention reads the blocks decoded to f32 (decode_blocks_f32):
// decoding them costs about what the fused terms cost 64 queries (prefill chunks are 512; a
// decode step, 1, stays on the fused path and allocates nothing).
constexpr int64_t kDecodedQueries = 64;

// No sinks in GEAR: DenseAndSparseRows reads an empty set.
const SinkRows& no_sinks() {
  static const SinkRows none;
  return none;
}
}  // namespace

GearCache::GearCache(int bits, int group_size, std::optional<int> rank, double energy_threshold, double sparse_fraction)
    : bits_(bits),
      group_(group_size),
      rank_(rank),
      energy_(energy_threshold),
      sparse_fraction_(sparse_fraction),
      outliers_(sparse_fraction) {
  if (bits < 1 || bits > 8) throw QuantizerConfigError("gear_bits must lie in [1, 8], got " + std::to_string(bits));
  if (group_size < 1) throw QuantizerConfigError("gear_group_size must be >= 1, got " + std::to_string(group_size));
  if (rank && *rank < 0) throw QuantizerConfigError("gear_rank must be >= 0, got " + std::to_string(*rank));
  if (!(energy_threshold >= 0.0 && energy_threshold <= 1.0)) {
    throw QuantizerConfigError("gear_energy_threshold must lie in [0, 1], got " + std::to_string(energy_threshold));
  }
  if (!(sparse_fraction >= 0.0 && sparse_fraction <= 0.5)) {
    throw QuantizerConfigError("gear_sparse_fraction must lie in [0, 0.5], got " + std::to_string(sparse_fraction));
  }
}

std::size_t GearCache::nbytes() const {
  std::size_t total = key_codes_.storage_bytes() + key_params_.storage_bytes() + value_codes_.storage_bytes() +
                      value_params_.storage_bytes() + outliers_.nbytes() + block_terms_.storage_bytes() +
                      tail_k_.storage_bytes() + tail_v_.storage_bytes();
  for (int w = 0; w < 2; ++w) total += left_[w].storage_bytes() + right_[w].storage_bytes();
  return total;
}

int64_t GearCache::block_rank(int64_t block, int which) const {
  if (block < 0 || block >= frontier_ / group_) return 0;
  return row_ptr<int32_t>(block_terms_, 0, 0, block)[which == 0 ? 1 : 3];
}

void GearCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  dtype_ = keys.dtype();
  tail_k_ = lm::Tensor({batch_, heads_, group_, dk_}, dtype_);
  tail_v_ = lm::Tensor({batch_, heads_, group_, dv_}, dtype_);
  const int64_t gv = static_cast<int64_t>(token_groups(static_cast<int>(dv_), group_));
  key_codes_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(dk_, bits_))}, lm::DType::U32);
  key_params_ = lm::Tensor({batch_, heads_, 0, 2 * dk_}, lm::DType::F16);
  value_codes_ = lm::Tensor({batch_, heads_, 0, static_cast<int64_t>(core::packed_words(dv_, bits_))}, lm::DType::U32);
  value_params_ = lm::Tensor({batch_, heads_, 0, 2 * gv}, lm::DType::F16);
  outliers_ = SparseOutliers(sparse_fraction_);
  outliers_.allocate(batch_, heads_, group_, dk_, dv_);
  block_terms_ = lm::Tensor({1, 1, 0, 4}, lm::DType::I32);
  const int64_t dims[2] = {dk_, dv_};
  for (int w = 0; w < 2; ++w) {
    left_[w] = lm::Tensor({batch_, heads_, 0, group_}, lm::DType::F16);
    right_[w] = lm::Tensor({batch_, heads_, 0, dims[w]}, lm::DType::F16);
    terms_used_[w] = terms_capacity_[w] = 0;
  }
  key_order_ = std::make_shared<const attention::CodeOrder>(bits_, dk_);
  value_order_ = std::make_shared<const attention::CodeOrder>(bits_, dv_, group_);
  auto position = std::make_shared<std::vector<int32_t>>(static_cast<std::size_t>(dk_));
  for (int64_t e = 0; e < dk_; ++e)
    (*position)[static_cast<std::size_t>(key_order_->natural(e))] = static_cast<int32_t>(e);
  key_position_ = std::move(position);
  capacity_blocks_ = 0;
}

void GearCache::ensure_blocks(int64_t blocks) {
  if (blocks <= capacity_blocks_) return;
  // Whole 256-token steps, rounded up to whole blocks (as KIVI grows its quantized region).
  const int64_t have = capacity_blocks_ * group_, need = blocks * group_;
  const int64_t tokens = have + ((need - have + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  const int64_t grown = (tokens + group_ - 1) / group_, filled = frontier_ / group_;
  key_codes_ = cache_rows::copy_rows(key_codes_, filled * group_, grown * group_);
  key_params_ = cache_rows::copy_rows(key_params_, filled, grown);
  value_codes_ = cache_rows::copy_rows(value_codes_, filled * group_, grown * group_);
  value_params_ = cache_rows::copy_rows(value_params_, filled * group_, grown * group_);
  outliers_.reserve(filled, grown);
  block_terms_ = cache_rows::copy_rows(block_terms_, filled, grown);
  capacity_blocks_ = grown;
}

void GearCache::ensure_terms(int which, int64_t terms) {
  if (terms <= terms_capacity_[which]) return;
  // Ranks vary by block, so the factor rows grow geometrically (amortised copies); the slack is
  // allocated and counted by nbytes().
  const int64_t grown =
      std::max({terms, terms_capacity_[which] + terms_capacity_[which] / 2, terms_capacity_[which] + kMinTermGrowth});
  left_[which] = cache_rows::copy_rows(left_[which], terms_used_[which], grown);
  right_[which] = cache_rows::copy_rows(right_[which], terms_used_[which], grown);
  terms_capacity_[which] = grown;
}

void GearCache::decode_block(bool keys, int64_t b, int64_t h, int64_t block, DecodeParts parts, float* out) const {
  const int64_t d = keys ? dk_ : dv_, row0 = block * group_;
  if (keys) {
    thread_local std::vector<uint8_t> codes;
    codes.resize(static_cast<std::size_t>(dk_));
    const auto* kp = reinterpret_cast<const GroupParams16*>(row_ptr<uint16_t>(key_params_, b, h, block));
    for (int64_t t = 0; t < group_; ++t) {
      core::unpack_words(row_ptr<uint32_t>(key_codes_, b, h, row0 + t), static_cast<std::size_t>(dk_), bits_,
                         codes.data());
      for (int64_t c = 0; c < dk_; ++c) out[t * dk_ + c] = decode_code(codes[static_cast<std::size_t>(c)], kp[c]);
    }
  } else {
    for (int64_t t = 0; t < group_; ++t) {
      decode_token_row(row_ptr<uint32_t>(value_codes_, b, h, row0 + t),
                       reinterpret_cast<const GroupParams16*>(row_ptr<uint16_t>(value_params_, b, h, row0 + t)),
                       static_cast<int>(dv_), group_, bits_, out + t * dv_);
    }
  }
  if (parts == DecodeParts::kCodes) return;
  outliers_.apply(keys, b, h, row0, row0 + group_, out);
  if (parts == DecodeParts::kSparse) return;
  const int w = keys ? 0 : 1;
  const int32_t* terms = row_ptr<int32_t>(block_terms_, 0, 0, block);
  const int64_t first = terms[keys ? 0 : 2], rank = terms[keys ? 1 : 3];
  for (int64_t i = 0; i < rank; ++i) {
    const uint16_t* left = row_ptr<uint16_t>(left_[w], b, h, first + i);
    const uint16_t* right = row_ptr<uint16_t>(right_[w], b, h, first + i);
    for (int64_t t = 0; t < group_; ++t) {
      const float l = base::f16_to_f32(left[t]);
      for (int64_t e = 0; e < d; ++e) {
        // Key right vectors are stored in code order; position e holds channel natural(e).
        const int64_t c = keys ? key_order_->natural(e) : e;
        out[t * d + c] += l * base::f16_to_f32(right[e]);
      }
    }
  }
}

BlockSvd GearCache::code_block_part(int64_t block, int64_t bh, int which, const float* src) {
  const int64_t b = bh / heads_, h = bh % heads_, w = which;
  const int64_t gv = static_cast<int64_t>(token_groups(static_cast<int>(dv_), group_));
  const int64_t d = w == 0 ? dk_ : dv_, n = group_ * d;
  const int64_t k_out = outliers_.enabled() ? outliers_.per_block(w == 0) : 0;
  // Grow-only per-thread scratch: parts of one flush run on the pool's threads at once.
  thread_local std::vector<float> x, decoded, exact;
  thread_local std::vector<uint8_t> codes;
  thread_local std::vector<uint32_t> index;
  thread_local std::vector<core::GroupParams> params;
  x.assign(src, src + n);
  codes.resize(static_cast<std::size_t>(n));
  index.resize(static_cast<std::size_t>(k_out));
  exact.resize(static_cast<std::size_t>(k_out));
  // S: the block's outliers leave the data the quantizer sees (replaced by their group's median).
  if (k_out > 0) isolate_outliers(x.data(), group_, d, w == 0, group_, nullptr, k_out, index.data(), exact.data());
  // D: KIVI's group code — keys per channel over the block's tokens, values per token.
  if (w == 0) {
    params.resize(static_cast<std::size_t>(dk_));
    core::quantize_per_channel(x.data(), static_cast<std::size_t>(group_), static_cast<std::size_t>(dk_), bits_,
                               static_cast<std::size_t>(group_), codes.data(), params.data());
    std::memcpy(row_ptr<uint16_t>(key_params_, b, h, block), params.data(),
                sizeof(core::GroupParams) * static_cast<std::size_t>(dk_));
  } else {
    params.resize(static_cast<std::size_t>(group_ * gv));
    core::quantize_per_token(x.data(), static_cast<std::size_t>(group_), static_cast<std::size_t>(dv_), bits_,
                             static_cast<std::size_t>(group_), codes.data(), params.data());
  }
  lm::Tensor& packed = w == 0 ? key_codes_ : value_codes_;
  for (int64_t t = 0; t < group_; ++t) {
    core::pack_words(codes.data() + t * d, static_cast<std::size_t>(d), bits_,
                     row_ptr<uint32_t>(packed, b, h, block * group_ + t));
    if (w == 1) {
      std::memcpy(row_ptr<uint16_t>(value_params_, b, h, block * group_ + t), params.data() + t * gv,
                  sizeof(core::GroupParams) * static_cast<std::size_t>(gv));
    }
  }
  // The outliers' corrections against what the codes give back, then R = X - D - S from
  // the stored bytes, so the factors correct exactly what a reader decodes.
  decoded.resize(static_cast<std::size_t>(n));
  decode_block(w == 0, b, h, block, DecodeParts::kCodes, decoded.data());
  if (k_out > 0) {
    outliers_.record(w == 0, b, h, block, index.data(), exact.data(), decoded.data());
    decode_block(w == 0, b, h, block, DecodeParts::kSparse, decoded.data());
  }
  for (int64_t i = 0; i < n; ++i) decoded[static_cast<std::size_t>(i)] = src[i] - decoded[static_cast<std::size_t>(i)];
  // A fixed rank keeps only its leading triplets' vectors; the energy rule needs every sigma
  // first (vectors for all, as its rank is known only after every head's spectrum).
  const int64_t kept = rank_ ? std::min<int64_t>(*rank_, std::min<int64_t>(group_, d)) : -1;
  return block_svd(decoded.data(), group_, d, GramSolver::kTridiagonal, kept);
}

void GearCache::store_factors(int64_t block, const BlockSvd* key_svd, const BlockSvd* value_svd) {
  const int64_t heads = batch_ * heads_;
  const int64_t dims[2] = {dk_, dv_};
  const BlockSvd* svd[2] = {key_svd, value_svd};
  // L: the block's rank (fixed, or the energy rule's largest over heads), then the factors in f16.
  int32_t* terms = row_ptr<int32_t>(block_terms_, 0, 0, block);
  for (int w = 0; w < 2; ++w) {
    const int64_t d = dims[w], most = std::min<int64_t>(group_, d);
    int64_t rank = 0;
    if (rank_) {
      rank = std::min<int64_t>(*rank_, most);
    } else {
      for (int64_t bh = 0; bh < heads; ++bh) rank = std::max(rank, energy_rank(svd[w][bh].sigma, energy_));
    }
    ensure_terms(w, terms_used_[w] + rank);
    const int64_t first = terms_used_[w];
    for (int64_t bh = 0; bh < heads; ++bh) {
      const int64_t b = bh / heads_, h = bh % heads_;
      const BlockSvd& s = svd[w][bh];
      for (int64_t i = 0; i < rank; ++i) {
        uint16_t* left = row_ptr<uint16_t>(left_[w], b, h, first + i);
        uint16_t* right = row_ptr<uint16_t>(right_[w], b, h, first + i);
        const double sigma = s.sigma[static_cast<std::size_t>(i)];
        for (int64_t t = 0; t < group_; ++t) {
          left[t] = base::f32_to_f16(static_cast<float>(sigma * s.left[static_cast<std::size_t>(i * group_ + t)]));
        }
        for (int64_t e = 0; e < d; ++e) {
          // Keys in the code order the fused scorer's prepared query uses.
          const int64_t c = w == 0 ? key_order_->natural(e) : e;
          right[e] = base::f32_to_f16(static_cast<float>(s.right[static_cast<std::size_t>(i * d + c)]));
        }
      }
    }
    terms[w == 0 ? 0 : 2] = static_cast<int32_t>(first);
    terms[w == 0 ? 1 : 3] = static_cast<int32_t>(rank);
    terms_used_[w] += rank;
  }
}

void GearCache::flush_blocks(int64_t first_block, int64_t count, const float* keys, int64_t key_head_stride,
                             const float* values, int64_t value_head_stride) {
  const int64_t heads = batch_ * heads_;
  // Every (block, head, keys/values) part's codes, outliers and residual SVD are independent
  // (each writes only its own rows): they run across the pool — a prefill chunk of 512 tokens is
  // 16 blocks x heads x 2 parts, which the calling thread alone used to code while the other
  // waited. The factors then go in block order, as the term counters grow in that order.
  std::vector<BlockSvd> svd(static_cast<std::size_t>(count * 2 * heads));
  base::ThreadPool::global().parallel_for(count * 2 * heads, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t k = u / (2 * heads), w = (u / heads) % 2, bh = u % heads;
      const float* src =
          w == 0 ? keys + bh * key_head_stride + k * group_ * dk_ : values + bh * value_head_stride + k * group_ * dv_;
      svd[static_cast<std::size_t>(u)] = code_block_part(first_block + k, bh, static_cast<int>(w), src);
    }
  });
  for (int64_t k = 0; k < count; ++k) {
    const BlockSvd* parts = svd.data() + k * 2 * heads;
    store_factors(first_block + k, parts, parts + heads);
  }
}

lm::KeysValues GearCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void GearCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "GearCache::update_and_fetch");
  if (!tail_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "GearCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2), tail = offset_ - frontier_, pending_rows = tail + s;
  const int64_t blocks = pending_rows / group_;
  if (blocks == 0) {  // the block is not complete yet: the rows wait in the tail as they are
    lm::copy_token_rows(keys, tail_k_, tail);
    lm::copy_token_rows(values, tail_v_, tail);
    offset_ += s;
    return;
  }
  // Pending = every head's tail followed by its new rows, in f32 (grow-only per-thread buffers).
  const int64_t heads = batch_ * heads_;
  thread_local std::vector<float> pk, pv, new_k, new_v;
  pk.resize(static_cast<std::size_t>(heads * pending_rows * dk_));
  pv.resize(static_cast<std::size_t>(heads * pending_rows * dv_));
  cache_rows::widen_to_f32(keys, new_k);
  cache_rows::widen_to_f32(values, new_v);
  for (int64_t bh = 0; bh < heads; ++bh) {
    blocks_tail::gather_pending(tail_k_, dtype_, bh, group_, dk_, tail, new_k.data(), s,
                                pk.data() + bh * pending_rows * dk_);
    blocks_tail::gather_pending(tail_v_, dtype_, bh, group_, dv_, tail, new_v.data(), s,
                                pv.data() + bh * pending_rows * dv_);
  }
  ensure_blocks(frontier_ / group_ + blocks);
  flush_blocks(frontier_ / group_, blocks, pk.data(), pending_rows * dk_, pv.data(), pending_rows * dv_);
  const int64_t kept = pending_rows - blocks * group_;
  for (int64_t bh = 0; bh < heads; ++bh) {
    blocks_tail::keep_in_tail(pk.data() + (bh * pending_rows + blocks * group_) * dk_, kept, tail_k_, dtype_, bh,
                              group_, dk_);
    blocks_tail::keep_in_tail(pv.data() + (bh * pending_rows + blocks * group_) * dv_, kept, tail_v_, dtype_, bh,
                              group_, dv_);
  }
  offset_ += s;
  frontier_ += blocks * group_;
}

lm::KeysValues GearCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  std::vector<float> block(static_cast<std::size_t>(group_ * std::max(dk_, dv_)));
  const int64_t tail = offset_ - frontier_, blocks = frontier_ / group_;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      std::byte* kout = k.raw_data() + bh * offset_ * dk_ * static_cast<int64_t>(k.element_size());
      std::byte* vout = v.raw_data() + bh * offset_ * dv_ * static_cast<int64_t>(v.element_size());
      for (int64_t g = 0; g < blocks; ++g) {
        decode_block(true, b, h, g, DecodeParts::kAll, block.data());
        cache_rows::store_f32(block.data(), static_cast<std::size_t>(group_ * dk_),
                              kout + g * group_ * dk_ * static_cast<int64_t>(k.element_size()), dtype);
        decode_block(false, b, h, g, DecodeParts::kAll, block.data());
        cache_rows::store_f32(block.data(), static_cast<std::size_t>(group_ * dv_),
                              vout + g * group_ * dv_ * static_cast<int64_t>(v.element_size()), dtype);
      }
      blocks_tail::fetch_head_tail(tail_k_, dtype_, bh, group_, dk_, tail, frontier_, offset_, k);
      blocks_tail::fetch_head_tail(tail_v_, dtype_, bh, group_, dv_, tail, frontier_, offset_, v);
    }
  }
  return {std::move(k), std::move(v)};
}

void GearCache::decode_blocks_f32(lm::Tensor& keys, lm::Tensor& values) const {
  const int64_t blocks = frontier_ / group_;
  if (!keys.defined() || keys.dim(0) != batch_ || keys.dim(1) != heads_ || keys.dim(2) < frontier_ ||
      keys.dim(3) != dk_ || values.dim(3) != dv_) {
    // Whole 1024-row steps, so a prefill's growing context reallocates a few times, not per call.
    const int64_t capacity = (frontier_ + 1023) / 1024 * 1024;
    keys = lm::Tensor({batch_, heads_, capacity, dk_}, lm::DType::F32);
    values = lm::Tensor({batch_, heads_, capacity, dv_}, lm::DType::F32);
  }
  const int64_t capacity = keys.dim(2), heads = batch_ * heads_;
  float* kout = keys.data<float>();
  float* vout = values.data<float>();
  base::ThreadPool::global().parallel_for(heads * blocks * 2, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> coef, code_order;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t w = u % 2, g = (u / 2) % blocks, bh = u / (2 * blocks), b = bh / heads_, h = bh % heads_;
      const int64_t d = w == 0 ? dk_ : dv_;
      float* out = (w == 0 ? kout : vout) + (bh * capacity + g * group_) * d;
      decode_block(w == 0, b, h, g, DecodeParts::kSparse, out);
      const int32_t* terms = row_ptr<int32_t>(block_terms_, 0, 0, g);
      const int64_t first = terms[w == 0 ? 0 : 2], rank = terms[w == 0 ? 1 : 3];
      if (rank == 0) continue;
      // L R^T as a rank update of the block's G rows: coefficient (t, i) = left_i[t].
      coef.resize(static_cast<std::size_t>(group_ * rank));
      for (int64_t i = 0; i < rank; ++i) {
        const uint16_t* left = row_ptr<uint16_t>(left_[w], b, h, first + i);
        for (int64_t t = 0; t < group_; ++t) coef[static_cast<std::size_t>(t * rank + i)] = base::f16_to_f32(left[t]);
      }
      const uint16_t* right = row_ptr<uint16_t>(right_[w], b, h, first);
      const int64_t right_stride = right_[w].strides()[2];
      if (w == 1) {  // value right vectors are in natural order: straight onto the rows
        attention::kernels::f16_rank_update(coef.data(), rank, group_, right, right_stride, d, out, d);
        continue;
      }
      // Key right vectors are in code order (position e holds channel natural(e)).
      code_order.assign(static_cast<std::size_t>(group_ * d), 0.0f);
      attention::kernels::f16_rank_update(coef.data(), rank, group_, right, right_stride, d, code_order.data(), d);
      for (int64_t t = 0; t < group_; ++t) {
        for (int64_t e = 0; e < d; ++e)
          out[t * d + key_order_->natural(e)] += code_order[static_cast<std::size_t>(t * d + e)];
      }
    }
  });
}

// One segment for the quantized blocks — codes scored and accumulated by KiviQuantizedRows, the
// outliers' deltas added by DenseAndSparseRows, the low-rank terms by LowRankRows — and one for
// the tail; one online softmax over both. A call with many queries (a prefill chunk) reads the
// blocks decoded once into f32 rows instead (decode_blocks_f32): the fused terms cost every block
// of 16 queries about a block's decoding, and the decoded rows are scored by the plain f32 tile
// kernels — the same values to f32 rounding (the fused path's 16-bit query rounding for 2-bit
// keys and the order of the low-rank sums differ).
void GearCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("GearCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("GearCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  const KiviQuantizedRows quantized(key_codes_, key_params_, value_codes_, value_params_, frontier_, bits_, group_,
                                    *key_order_, *value_order_);
  const DenseAndSparseRows sparse(quantized, *key_position_, no_sinks(), outliers_);
  const attention::RowSource& dense =
      outliers_.enabled() ? static_cast<const attention::RowSource&>(sparse) : quantized;
  const LowRankRows corrected(dense, {&block_terms_, &left_[0], &right_[0], &left_[1], &right_[1], group_});
  const attention::DtypeRowSource tail(tail_k_, tail_v_, offset_ - frontier_, frontier_);
  const attention::RowSource* segments[] = {&corrected, &tail};
  // Grow-only per-thread rows for the decoded blocks (one layer's at a time: every layer's cache
  // on this thread reuses them).
  thread_local lm::Tensor decoded_k, decoded_v;
  std::optional<attention::DtypeRowSource> decoded;
  if (q.dim(2) >= kDecodedQueries && frontier_ > 0) {
    decode_blocks_f32(decoded_k, decoded_v);
    decoded.emplace(decoded_k, decoded_v, frontier_, 0);
    segments[0] = &*decoded;
  }
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, 2, attention::request_pool(request));
}

std::vector<lm::Tensor> GearCache::state() const {
  if (!tail_k_.defined()) return {};
  const int64_t blocks = frontier_ / group_, tail = offset_ - frontier_;
  std::vector<lm::Tensor> out = {key_codes_.slice(2, 0, frontier_), key_params_.slice(2, 0, blocks),
                                 value_codes_.slice(2, 0, frontier_), value_params_.slice(2, 0, frontier_),
                                 block_terms_.slice(2, 0, blocks)};
  for (int w = 0; w < 2; ++w) {
    out.push_back(left_[w].slice(2, 0, terms_used_[w]));
    out.push_back(right_[w].slice(2, 0, terms_used_[w]));
  }
  if (outliers_.enabled()) {
    for (lm::Tensor& t : outliers_.state(blocks)) out.push_back(std::move(t));
  }
  out.push_back(tail_k_.slice(2, 0, tail));
  out.push_back(tail_v_.slice(2, 0, tail));
  return out;
}

std::vector<std::string> GearCache::meta_state() const {
  return {std::to_string(bits_),
          std::to_string(group_),
          rank_ ? std::to_string(*rank_) : "none",
          blocks_tail::exact_double(energy_),
          blocks_tail::exact_double(sparse_fraction_),
          std::to_string(offset_),
          std::to_string(frontier_),
          std::string(lm::dtype_name(dtype_))};
}

void GearCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "GearCache::from_state";
  if (meta.size() != 8) {
    throw base::FormatError(std::string(who) +
                            ": expected 8 meta entries (bits, group, rank, energy, sparse fraction, " +
                            "offset, frontier, dtype), got " + std::to_string(meta.size()));
  }
  std::optional<int> rank;
  if (meta[2] != "none") rank = static_cast<int>(cache_rows::parse_meta_int(meta[2], who, "rank"));
  GearCache fresh(static_cast<int>(cache_rows::parse_meta_int(meta[0], who, "bits")),
                  static_cast<int>(cache_rows::parse_meta_int(meta[1], who, "group")), rank,
                  blocks_tail::parse_meta_double(meta[3], who, "energy threshold"),
                  blocks_tail::parse_meta_double(meta[4], who, "sparse fraction"));
  const blocks_tail::TailMeta saved = blocks_tail::parse_tail_meta(meta, 5, fresh.group_, who);
  const int64_t offset = saved.offset, frontier = saved.frontier;
  const lm::DType dtype = saved.dtype;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[5]);
    *this = fresh;
    return;
  }
  const std::size_t expected = 11 + (fresh.outliers_.enabled() ? 4 : 0);
  if (state.size() != expected) {
    throw base::FormatError(std::string(who) + ": expected " + std::to_string(expected) + " tensors, got " +
                            std::to_string(state.size()));
  }
  const lm::Tensor& rk = state[expected - 2];
  const lm::Tensor& rv = state[expected - 1];
  blocks_tail::check_tail_state(rk, rv, offset - frontier, who, meta[5], meta[6]);
  fresh.allocate(rk.astype(dtype), rv.astype(dtype));
  const int64_t blocks = frontier / fresh.group_;
  // The block table first: it says how many factor rows the other tensors must hold.
  const lm::Tensor& bt = state[4];
  if (bt.ndim() != 4 || bt.dim(0) != 1 || bt.dim(1) != 1 || bt.dim(2) != blocks || bt.dim(3) != 4 ||
      bt.dtype() != lm::DType::I32) {
    throw base::FormatError(std::string(who) + ": block table " + lm::shape_text(bt.shape()) + " does not match " +
                            std::to_string(blocks) + " blocks");
  }
  int64_t used[2] = {0, 0};
  const int64_t dims[2] = {fresh.dk_, fresh.dv_};
  for (int64_t g = 0; g < blocks; ++g) {
    const int32_t* t = row_ptr<int32_t>(bt, 0, 0, g);
    for (int64_t w = 0; w < 2; ++w) {
      if (t[2 * w] != used[w] || t[2 * w + 1] < 0 || t[2 * w + 1] > std::min<int64_t>(fresh.group_, dims[w])) {
        throw base::FormatError(std::string(who) + ": block " + std::to_string(g) + " has inconsistent factor terms");
      }
      used[w] += t[2 * w + 1];
    }
  }
  const lm::Tensor* like[] = {&fresh.key_codes_,    &fresh.key_params_,  &fresh.value_codes_,
                              &fresh.value_params_, &fresh.block_terms_, &fresh.left_[0],
                              &fresh.right_[0],     &fresh.left_[1],     &fresh.right_[1]};
  const int64_t rows[] = {frontier, blocks, frontier, frontier, blocks, used[0], used[0], used[1], used[1]};
  for (int i = 0; i < 9; ++i) {
    const lm::Tensor& s = state[static_cast<std::size_t>(i)];
    if (s.ndim() != 4 || s.dim(0) != like[i]->dim(0) || s.dim(1) != like[i]->dim(1) || s.dim(2) != rows[i] ||
        s.dim(3) != like[i]->dim(3) || s.dtype() != like[i]->dtype()) {
      throw base::FormatError(std::string(who) + ": tensor " + std::to_string(i) + " " + lm::shape_text(s.shape()) +
                              " does not match " + std::to_string(rows[i]) + " rows");
    }
  }
  fresh.key_codes_ = cache_rows::copy_rows(state[0], frontier, frontier);
  fresh.key_params_ = cache_rows::copy_rows(state[1], blocks, blocks);
  fresh.value_codes_ = cache_rows::copy_rows(state[2], frontier, frontier);
  fresh.value_params_ = cache_rows::copy_rows(state[3], frontier, frontier);
  fresh.block_terms_ = cache_rows::copy_rows(state[4], blocks, blocks);
  for (int w = 0; w < 2; ++w) {
    fresh.left_[w] = cache_rows::copy_rows(state[5 + 2 * static_cast<std::size_t>(w)], used[w], used[w]);
    fresh.right_[w] = cache_rows::copy_rows(state[6 + 2 * static_cast<std::size_t>(w)], used[w], used[w]);
    fresh.terms_used_[w] = fresh.terms_capacity_[w] = used[w];
  }
  if (fresh.outliers_.enabled()) fresh.outliers_.from_state(state, 9, blocks, who);
  fresh.capacity_blocks_ = blocks;
  lm::copy_token_rows(rk.astype(fresh.dtype_), fresh.tail_k_, 0);
  lm::copy_token_rows(rv.astype(fresh.dtype_), fresh.tail_v_, 0);
  fresh.offset_ = offset;
  fresh.frontier_ = frontier;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> GearCache::clone() const {
  auto copy = std::make_shared<GearCache>(*this);
  copy->key_codes_ = key_codes_.clone();
  copy->key_params_ = key_params_.clone();
  copy->value_codes_ = value_codes_.clone();
  copy->value_params_ = value_params_.clone();
  copy->outliers_ = outliers_.deep_copy();
  copy->block_terms_ = block_terms_.clone();
  for (int w = 0; w < 2; ++w) {
    copy->left_[w] = left_[w].clone();
    copy->right_[w] = right_[w].clone();
  }
  copy->tail_k_ = tail_k_.clone();
  copy->tail_v_ = tail_v_.clone();
  return copy;
}

void validate_gear_options(const KVCacheConfig& config) {
  const GearOptions& o = config.options<GearOptions>();
  if (o.gear_bits < 1 || o.gear_bits > 8) {
    throw QuantizerConfigError("gear_bits must lie in [1, 8], got " + std::to_string(o.gear_bits));
  }
  if (o.gear_rank && (*o.gear_rank < 0 || *o.gear_rank > 4096)) {
    throw QuantizerConfigError("gear_rank must be None or lie in [0, 4096], got " + std::to_string(*o.gear_rank));
  }
  if (!(o.gear_energy_threshold >= 0.0 && o.gear_energy_threshold <= 1.0)) {
    throw QuantizerConfigError("gear_energy_threshold must lie in [0, 1], got " +
                               std::to_string(o.gear_energy_threshold));
  }
  if (!(o.gear_sparse_fraction >= 0.0 && o.gear_sparse_fraction <= 0.5)) {
    throw QuantizerConfigError("gear_sparse_fraction must lie in [0, 0.5], got " +
                               std::to_string(o.gear_sparse_fraction));
  }
  if (o.gear_group_size < 1 || o.gear_group_size > 4096) {
    throw QuantizerConfigError("gear_group_size must lie in [1, 4096], got " + std::to_string(o.gear_group_size));
  }
  if (!o.gear_quantize_values) {
    throw base::Unsupported(
        "gear_quantize_values=false is not supported: values are always compressed like the keys "
        "(use true)");
  }
}

std::shared_ptr<lm::KVCache> make_gear_cache(const KVCacheConfig& config) {
  validate_gear_options(config);
  const GearOptions& o = config.options<GearOptions>();
  return std::make_shared<GearCache>(o.gear_bits, o.gear_group_size, o.gear_rank, o.gear_energy_threshold,
                                     o.gear_sparse_fraction);
}

MethodDescriptor gear_method() {
  MethodDescriptor m;
  m.name = "gear";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = false, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Uniform gear_bits group quantization plus sparse exact outliers plus a low-rank SVD of what error is "
      "left, per block of gear_group_size tokens (X ~ D + L + S)";
  m.paper =
      "GEAR: An Efficient KV Cache Compression Recipe for Near-Lossless Generative Inference of LLM (Kang et "
      "al., arXiv 2403.05527)";
  m.deviations =
      "Per block of gear_group_size tokens per head: KIVI's group code (keys per channel, values per "
      "token) as the base quantizer; outliers picked per quantization group by distance from the group "
      "median in MADs (kvquant's rule) rather than the matrix's largest and smallest entries; the low-rank "
      "factors are an exact truncated SVD of each block's residual (Jacobi on the Gram matrix, not power "
      "iteration), stored in f16; with gear_rank unset a block's rank is the largest any of its heads "
      "needs to reach gear_energy_threshold. The incomplete last block stays in the input dtype. "
      "gear_quantize_values=false is refused. Not trimmable (as the original).";
  m.docs = "docs/methods/gear.md";
  m.fields = {
      option_field("gear_bits", &GearOptions::gear_bits, "Bits of the base uniform quantizer", 1, 8),
      option_field("gear_rank", &GearOptions::gear_rank,
                   "Low-rank terms per block (None: the fewest holding gear_energy_threshold of the residual energy)",
                   0, 4096),
      option_field("gear_energy_threshold", &GearOptions::gear_energy_threshold,
                   "Fraction of the residual's energy the low-rank terms keep when gear_rank is None, in [0, 1]"),
      option_field("gear_sparse_fraction", &GearOptions::gear_sparse_fraction,
                   "Fraction of each block's elements kept exact as sparse outliers, in [0, 0.5]"),
      option_field("gear_group_size", &GearOptions::gear_group_size,
                   "Tokens per block (per key params row and per factorisation); channels per value group", 1, 4096),
      option_field("gear_quantize_values", &GearOptions::gear_quantize_values,
                   "Compress the values like the keys (true is the only value supported)"),
  };
  m.validate = validate_gear_options;
  m.make_serving = make_gear_cache;
  m.cache_type_name = kTypeName;
  // Placeholder parameters: from_state() rebuilds every one of them from meta_state().
  m.make_restorable = [] { return std::make_shared<GearCache>(2, 32, std::nullopt, 0.9, 0.01); };
  return m;
}

}  // namespace veloxquant
