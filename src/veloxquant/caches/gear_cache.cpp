#include "veloxquant/caches/gear_cache.h"

#include <algorithm>
#include <array>
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

GearCache::GearCache(int bits, int group_size, std::optional<int> rank, double energy_threshold, double sparse_fraction,
                     bool recode)
    : bits_(bits),
      group_(group_size),
      recode_bits_(bits),
      rank_(rank),
      energy_(energy_threshold),
      sparse_fraction_(sparse_fraction) {
  if (bits < 1 || bits > 8) throw QuantizerConfigError("gear_bits must lie in [1, 8], got " + std::to_string(bits));
  if (group_size < 1) throw QuantizerConfigError("gear_group_size must be >= 1, got " + std::to_string(group_size));
  if (rank && *rank < 0) throw QuantizerConfigError("gear_rank must be >= 0, got " + std::to_string(*rank));
  if (!(energy_threshold >= 0.0 && energy_threshold <= 1.0)) {
    throw QuantizerConfigError("gear_energy_threshold must lie in [0, 1], got " + std::to_string(energy_threshold));
  }
  if (!(sparse_fraction >= 0.0 && sparse_fraction <= 0.5)) {
    throw QuantizerConfigError("gear_sparse_fraction must lie in [0, 0.5], got " + std::to_string(sparse_fraction));
  }
  // Only the energy rule's rank is the cache's choice; a fixed gear_rank is the user's.
  if (recode && !rank) recode_bits_ = std::min(8, 2 * bits);
  base_ = GearBlockSet(bits_, group_, sparse_fraction_);
  recoded_ = GearBlockSet(recode_bits_, group_, sparse_fraction_);
}

std::size_t GearCache::nbytes() const {
  std::size_t total = base_.nbytes() + recoded_.nbytes() + block_format_.storage_bytes() +
                      block_terms_.storage_bytes() + tail_k_.storage_bytes() + tail_v_.storage_bytes();
  for (int w = 0; w < 2; ++w) {
    total += left_[w].storage_bytes() + right_[w].storage_bytes() + set_positions_[w].storage_bytes();
  }
  return total;
}

bool GearCache::block_recoded(int64_t block) const {
  // Without re-coding no format table is kept: every block is a base block.
  if (block < 0 || block >= frontier_ / group_ || !block_format_.defined()) return false;
  return row_ptr<int32_t>(block_format_, 0, 0, block)[0] == 1;
}

int64_t GearCache::block_rank(int64_t block, int which) const {
  if (block < 0 || block >= frontier_ / group_ || block_recoded(block)) return 0;
  return row_ptr<int32_t>(block_terms_, 0, 0, set_index_[static_cast<std::size_t>(block)])[which == 0 ? 1 : 3];
}

void GearCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  dtype_ = keys.dtype();
  tail_k_ = lm::Tensor({batch_, heads_, group_, dk_}, dtype_);
  tail_v_ = lm::Tensor({batch_, heads_, group_, dv_}, dtype_);
  base_.allocate(batch_, heads_, dk_, dv_);
  recoded_.allocate(batch_, heads_, dk_, dv_);
  if (recode_bits_ > bits_) block_format_ = lm::Tensor({1, 1, 0, 1}, lm::DType::I32);
  block_terms_ = lm::Tensor({1, 1, 0, 4}, lm::DType::I32);
  const int64_t dims[2] = {dk_, dv_};
  for (int w = 0; w < 2; ++w) {
    left_[w] = lm::Tensor({batch_, heads_, 0, group_}, lm::DType::F16);
    right_[w] = lm::Tensor({batch_, heads_, 0, dims[w]}, lm::DType::F16);
    terms_used_[w] = terms_capacity_[w] = 0;
    set_positions_[w] = lm::Tensor();
  }
  set_index_.clear();
}

void GearCache::ensure_base_blocks(int64_t blocks) {
  if (blocks <= base_.capacity()) return;
  base_.reserve(blocks);
  block_terms_ = cache_rows::copy_rows(block_terms_, base_.blocks(), base_.capacity());
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

void GearCache::decode_block(bool keys, int64_t b, int64_t h, int64_t block, float* out) const {
  const int64_t d = keys ? dk_ : dv_, index = set_index_[static_cast<std::size_t>(block)];
  if (block_recoded(block)) {
    recoded_.decode_part(keys, b, h, index, true, out);
    return;
  }
  base_.decode_part(keys, b, h, index, true, out);
  const int w = keys ? 0 : 1;
  const int32_t* terms = row_ptr<int32_t>(block_terms_, 0, 0, index);
  const int64_t first = terms[keys ? 0 : 2], rank = terms[keys ? 1 : 3];
  const attention::CodeOrder& order = base_.key_order();
  for (int64_t i = 0; i < rank; ++i) {
    const uint16_t* left = row_ptr<uint16_t>(left_[w], b, h, first + i);
    const uint16_t* right = row_ptr<uint16_t>(right_[w], b, h, first + i);
    for (int64_t t = 0; t < group_; ++t) {
      const float l = base::f16_to_f32(left[t]);
      for (int64_t e = 0; e < d; ++e) {
        // Key right vectors are stored in code order; position e holds channel natural(e).
        const int64_t c = keys ? order.natural(e) : e;
        out[t * d + c] += l * base::f16_to_f32(right[e]);
      }
    }
  }
}

void GearCache::store_factors(int64_t index, const BlockSvd* key_svd, const BlockSvd* value_svd,
                              const int64_t rank[2]) {
  const int64_t heads = batch_ * heads_;
  const int64_t dims[2] = {dk_, dv_};
  const BlockSvd* svd[2] = {key_svd, value_svd};
  int32_t* terms = row_ptr<int32_t>(block_terms_, 0, 0, index);
  for (int w = 0; w < 2; ++w) {
    const int64_t d = dims[w];
    ensure_terms(w, terms_used_[w] + rank[w]);
    const int64_t first = terms_used_[w];
    for (int64_t bh = 0; bh < heads; ++bh) {
      const int64_t b = bh / heads_, h = bh % heads_;
      const BlockSvd& s = svd[w][bh];
      for (int64_t i = 0; i < rank[w]; ++i) {
        uint16_t* left = row_ptr<uint16_t>(left_[w], b, h, first + i);
        uint16_t* right = row_ptr<uint16_t>(right_[w], b, h, first + i);
        const double sigma = s.sigma[static_cast<std::size_t>(i)];
        for (int64_t t = 0; t < group_; ++t) {
          left[t] = base::f32_to_f16(static_cast<float>(sigma * s.left[static_cast<std::size_t>(i * group_ + t)]));
        }
        for (int64_t e = 0; e < d; ++e) {
          // Keys in the code order the fused scorer's prepared query uses.
          const int64_t c = w == 0 ? base_.key_order().natural(e) : e;
          right[e] = base::f32_to_f16(static_cast<float>(s.right[static_cast<std::size_t>(i * d + c)]));
        }
      }
    }
    terms[w == 0 ? 0 : 2] = static_cast<int32_t>(first);
    terms[w == 0 ? 1 : 3] = static_cast<int32_t>(rank[w]);
    terms_used_[w] += rank[w];
  }
}

namespace {
// Squared error of a decoded part [G, D] against its rows (the outliers, restored to f32
// rounding by their deltas, add ~nothing).
double squared_error(const float* src, const float* decoded, int64_t n) {
  double e = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(src[i]) - static_cast<double>(decoded[i]);
    e += d * d;
  }
  return e;
}
}  // namespace

// Byte cost per head of a base block's factors (f16 left and right rows) against the extra bytes
// of re-coding it: words of codes per row and the same params (keys per channel, values per token
// group, both independent of the width).
bool gear_factors_cost_more(int64_t key_rank, int64_t value_rank, int64_t group, int64_t dk, int64_t dv, int bits,
                            int recode_bits) {
  const int64_t factor_bytes = 2 * (key_rank * (group + dk) + value_rank * (group + dv));
  const int64_t extra_words =
      static_cast<int64_t>(core::packed_words(dk, recode_bits) + core::packed_words(dv, recode_bits)) -
      static_cast<int64_t>(core::packed_words(dk, bits) + core::packed_words(dv, bits));
  return factor_bytes > 4 * group * extra_words;
}

void GearCache::flush_blocks(int64_t first_block, int64_t count, const float* keys, int64_t key_head_stride,
                             const float* values, int64_t value_head_stride) {
  const int64_t heads = batch_ * heads_;
  const bool may_recode = recode_bits_ > bits_;
  // Every (block, head, keys/values) part's outliers, codes and residual SVD are independent
  // (each writes only its own rows): they run across the pool — a prefill chunk of 512 tokens is
  // 16 blocks x heads x 2 parts. Without re-coding every block is a base block, coded in place
  // (at base0 + k). With it, a block's format is known only once all its heads are coded: each
  // part is coded at both widths into the flush's own staging rows (block k at k; freed when the
  // flush returns — a flush may allocate, a decode step that completes no block does not), the
  // outliers isolated once for both, and the chosen code copied into its set below.
  const int64_t base0 = base_.blocks();
  if (!may_recode) ensure_base_blocks(base0 + count);
  GearBlockSet staging[2];
  if (may_recode) {
    const int widths[2] = {bits_, recode_bits_};
    for (int i = 0; i < 2; ++i) {
      staging[i] = GearBlockSet(widths[i], group_, sparse_fraction_);
      staging[i].allocate(batch_, heads_, dk_, dv_);
      staging[i].reserve(count);
    }
  }
  GearBlockSet& coarse = may_recode ? staging[0] : base_;
  const int64_t coarse0 = may_recode ? 0 : base0;
  std::vector<BlockSvd> svd(static_cast<std::size_t>(count * 2 * heads));
  std::vector<double> fine_error(static_cast<std::size_t>(may_recode ? count * 2 * heads : 0));
  base::ThreadPool::global().parallel_for(count * 2 * heads, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> decoded;
    thread_local GearBlockSet::Isolated part;
    for (int64_t u = begin; u < end; ++u) {
      const int64_t k = u / (2 * heads), w = (u / heads) % 2, bh = u % heads, b = bh / heads_, h = bh % heads_;
      const int64_t d = w == 0 ? dk_ : dv_, n = group_ * d;
      const float* src =
          w == 0 ? keys + bh * key_head_stride + k * group_ * dk_ : values + bh * value_head_stride + k * group_ * dv_;
      decoded.resize(static_cast<std::size_t>(n));
      coarse.isolate(static_cast<int>(w), src, part);
      if (may_recode) {
        // The finer code's error (the outliers, restored exactly, add none): what the choice
        // below compares with the factors'.
        staging[1].code_isolated(k, b, h, static_cast<int>(w), part, decoded.data());
        fine_error[static_cast<std::size_t>(u)] = squared_error(src, decoded.data(), n);
      }
      coarse.code_isolated(coarse0 + k, b, h, static_cast<int>(w), part, decoded.data());
      for (int64_t i = 0; i < n; ++i)
        decoded[static_cast<std::size_t>(i)] = src[i] - decoded[static_cast<std::size_t>(i)];
      // A fixed rank keeps only its leading triplets' vectors; the energy rule needs every sigma
      // first (vectors for all, as its rank is known only after every head's spectrum).
      const int64_t kept = rank_ ? std::min<int64_t>(*rank_, std::min<int64_t>(group_, d)) : -1;
      svd[static_cast<std::size_t>(u)] = block_svd(decoded.data(), group_, d, GramSolver::kTridiagonal, kept);
    }
  });
  // Each block's format, in position order.
  const int64_t dims[2] = {dk_, dv_};
  std::vector<uint8_t> recode(static_cast<std::size_t>(count), 0);
  std::vector<std::array<int64_t, 2>> ranks(static_cast<std::size_t>(count));
  int64_t n_recoded = 0;
  for (int64_t k = 0; k < count; ++k) {
    const BlockSvd* parts = svd.data() + k * 2 * heads;
    int64_t* rank = ranks[static_cast<std::size_t>(k)].data();
    for (int w = 0; w < 2; ++w) {
      rank[w] = 0;
      if (rank_) {
        rank[w] = std::min<int64_t>(*rank_, std::min<int64_t>(group_, dims[w]));
      } else {
        for (int64_t bh = 0; bh < heads; ++bh) {
          rank[w] = std::max(rank[w], energy_rank(parts[w * heads + bh].sigma, energy_));
        }
      }
    }
    bool fine = may_recode && gear_factors_cost_more(rank[0], rank[1], group_, dk_, dv_, bits_, recode_bits_);
    // ... and only where the finer code leaves no more squared error than the factors would, over
    // the block's heads, keys and values apart: what the kept triplets leave is the sum of the
    // dropped sigma^2. (Every head alone kept all of SmolLM2's layers 17 and 18 as factors, where a
    // head or two lose to the factors while the block's total gains: one window, KL 0.0113 at
    // 10,514 bytes/token against 0.0096 at 8,826 for the sum.)
    for (int w = 0; w < 2 && fine; ++w) {
      double factors_left = 0.0, fine_left = 0.0;
      for (int64_t bh = 0; bh < heads; ++bh) {
        const std::vector<double>& sigma = parts[w * heads + bh].sigma;
        for (std::size_t i = static_cast<std::size_t>(rank[w]); i < sigma.size(); ++i) {
          factors_left += sigma[i] * sigma[i];
        }
        fine_left += fine_error[static_cast<std::size_t>((k * 2 + w) * heads + bh)];
      }
      if (fine_left > factors_left) fine = false;
    }
    recode[static_cast<std::size_t>(k)] = fine ? 1 : 0;
    n_recoded += fine ? 1 : 0;
    if (may_recode) {
      if (block_format_.dim(2) < first_block + k + 1) {  // whole 256-token steps of blocks, as the sets grow
        const int64_t step = std::max<int64_t>(1, GearBlockSet::kGrowthStep / group_);
        block_format_ =
            cache_rows::copy_rows(block_format_, first_block + k, (first_block + count + step - 1) / step * step);
      }
      row_ptr<int32_t>(block_format_, 0, 0, first_block + k)[0] = fine ? 1 : 0;
    }
  }
  // The chosen codes into their sets (position order within each), the base blocks with factors.
  if (n_recoded < count) ensure_base_blocks(base_.blocks() + count - n_recoded);
  if (n_recoded > 0) recoded_.reserve(recoded_.blocks() + n_recoded);
  for (int64_t k = 0; k < count; ++k) {
    if (recode[static_cast<std::size_t>(k)] != 0) {
      recoded_.copy_block(staging[1], k, recoded_.blocks());
      recoded_.set_blocks(recoded_.blocks() + 1);
      continue;
    }
    const BlockSvd* parts = svd.data() + k * 2 * heads;
    const int64_t index = base_.blocks();
    if (may_recode) base_.copy_block(staging[0], k, index);
    store_factors(index, parts, parts + heads, ranks[static_cast<std::size_t>(k)].data());
    base_.set_blocks(index + 1);
  }
}

void GearCache::rebuild_block_index() {
  const int64_t blocks = frontier_ / group_;
  set_index_.resize(static_cast<std::size_t>(blocks));
  int64_t next[2] = {0, 0};
  for (int64_t g = 0; g < blocks; ++g) {
    const int set = block_recoded(g) ? 1 : 0;
    set_index_[static_cast<std::size_t>(g)] = static_cast<int32_t>(next[set]++);
  }
  // Both sets' rows then interleave: each set's source reports its rows' true positions.
  for (int set = 0; set < 2; ++set) {
    if (next[0] == 0 || next[1] == 0) {
      set_positions_[set] = lm::Tensor();
      continue;
    }
    set_positions_[set] = lm::Tensor({batch_, heads_, next[set] * group_, 1}, lm::DType::I32);
    for (int64_t bh = 0; bh < batch_ * heads_; ++bh) {
      int32_t* pos = row_ptr<int32_t>(set_positions_[set], bh / heads_, bh % heads_, 0);
      for (int64_t g = 0; g < blocks; ++g) {
        if ((block_recoded(g) ? 1 : 0) != set) continue;
        const int64_t row0 = int64_t{set_index_[static_cast<std::size_t>(g)]} * group_;
        for (int64_t t = 0; t < group_; ++t) pos[row0 + t] = static_cast<int32_t>(g * group_ + t);
      }
    }
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
  thread_local std::vector<float> pk, pv;
  blocks_tail::gather_all_pending({heads, group_, dk_, dv_, tail, dtype_}, tail_k_, tail_v_, keys, values, pk, pv);
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
  rebuild_block_index();
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
        decode_block(true, b, h, g, block.data());
        cache_rows::store_f32(block.data(), static_cast<std::size_t>(group_ * dk_),
                              kout + g * group_ * dk_ * static_cast<int64_t>(k.element_size()), dtype);
        decode_block(false, b, h, g, block.data());
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
      const int64_t d = w == 0 ? dk_ : dv_, index = set_index_[static_cast<std::size_t>(g)];
      float* out = (w == 0 ? kout : vout) + (bh * capacity + g * group_) * d;
      if (block_recoded(g)) {
        recoded_.decode_part(w == 0, b, h, index, true, out);
        continue;
      }
      base_.decode_part(w == 0, b, h, index, true, out);
      const int32_t* terms = row_ptr<int32_t>(block_terms_, 0, 0, index);
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
      const attention::CodeOrder& order = base_.key_order();
      for (int64_t t = 0; t < group_; ++t) {
        for (int64_t e = 0; e < d; ++e)
          out[t * d + order.natural(e)] += code_order[static_cast<std::size_t>(t * d + e)];
      }
    }
  });
}

// Per block set one segment — codes scored and accumulated by KiviQuantizedRows, the outliers'
// deltas added by DenseAndSparseRows, for the base set the low-rank terms by LowRankRows — and one
// for the tail; one online softmax over all. A call with many queries (a prefill chunk) reads the
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
  const attention::DtypeRowSource tail(tail_k_, tail_v_, offset_ - frontier_, frontier_);
  const attention::RowSource* segments[3] = {&tail, nullptr, nullptr};
  int n_segments = 0;
  // Grow-only per-thread rows for the decoded blocks (one layer's at a time: every layer's cache
  // on this thread reuses them).
  thread_local lm::Tensor decoded_k, decoded_v;
  std::optional<attention::DtypeRowSource> decoded;
  std::optional<KiviQuantizedRows> codes[2];
  std::optional<DenseAndSparseRows> sparse[2];
  std::optional<LowRankRows> corrected;
  if (q.dim(2) >= kDecodedQueries && frontier_ > 0) {
    decode_blocks_f32(decoded_k, decoded_v);
    decoded.emplace(decoded_k, decoded_v, frontier_, 0);
    segments[n_segments++] = &*decoded;
  } else {
    const GearBlockSet* sets[2] = {&base_, &recoded_};
    for (int i = 0; i < 2; ++i) {
      const GearBlockSet& set = *sets[i];
      if (set.blocks() == 0) continue;
      codes[i].emplace(set.key_codes(), set.key_params(), set.value_codes(), set.value_params(), set.blocks() * group_,
                       set.bits(), group_, set.key_order(), set.value_order());
      if (set_positions_[i].defined()) codes[i]->with_positions(&set_positions_[i]);
      const attention::RowSource* source = &*codes[i];
      if (set.outliers().enabled()) {
        sparse[i].emplace(*codes[i], set.key_position(), no_sinks(), set.outliers());
        source = &*sparse[i];
      }
      if (i == 0) {
        corrected.emplace(*source, LowRankFactors{&block_terms_, &left_[0], &right_[0], &left_[1], &right_[1], group_});
        source = &*corrected;
      }
      segments[n_segments++] = source;
    }
  }
  segments[n_segments++] = &tail;
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, n_segments, attention::request_pool(request));
}

std::vector<lm::Tensor> GearCache::state() const {
  if (!tail_k_.defined()) return {};
  const int64_t blocks = frontier_ / group_, tail = offset_ - frontier_;
  std::vector<lm::Tensor> out = base_.state();
  out.push_back(block_terms_.slice(2, 0, base_.blocks()));
  for (int w = 0; w < 2; ++w) {
    out.push_back(left_[w].slice(2, 0, terms_used_[w]));
    out.push_back(right_[w].slice(2, 0, terms_used_[w]));
  }
  if (recode_bits_ > bits_) {  // the block formats and the re-coded set (not kept without re-coding)
    out.push_back(block_format_.slice(2, 0, blocks));
    for (lm::Tensor& t : recoded_.state()) out.push_back(std::move(t));
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
          std::string(lm::dtype_name(dtype_)),
          recode_bits_ > bits_ ? "recode" : "factors"};
}

void GearCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "GearCache::from_state";
  if (meta.size() != 9) {
    throw base::FormatError(std::string(who) +
                            ": expected 9 meta entries (bits, group, rank, energy, sparse fraction, " +
                            "offset, frontier, dtype, block formats), got " + std::to_string(meta.size()));
  }
  if (meta[8] != "recode" && meta[8] != "factors") {
    throw base::FormatError(std::string(who) + ": block formats must be 'recode' or 'factors', got '" + meta[8] + "'");
  }
  std::optional<int> rank;
  if (meta[2] != "none") rank = static_cast<int>(cache_rows::parse_meta_int(meta[2], who, "rank"));
  GearCache fresh(static_cast<int>(cache_rows::parse_meta_int(meta[0], who, "bits")),
                  static_cast<int>(cache_rows::parse_meta_int(meta[1], who, "group")), rank,
                  blocks_tail::parse_meta_double(meta[3], who, "energy threshold"),
                  blocks_tail::parse_meta_double(meta[4], who, "sparse fraction"), meta[8] == "recode");
  const blocks_tail::TailMeta saved = blocks_tail::parse_tail_meta(meta, 5, fresh.group_, who);
  const int64_t offset = saved.offset, frontier = saved.frontier;
  const lm::DType dtype = saved.dtype;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[5]);
    *this = fresh;
    return;
  }
  const bool recoding = fresh.recode_bits_ > fresh.bits_;
  const std::size_t set_tensors = fresh.base_.state_size();
  const std::size_t expected = set_tensors + 5 + (recoding ? 1 + set_tensors : 0) + 2;
  if (state.size() != expected) {
    throw base::FormatError(std::string(who) + ": expected " + std::to_string(expected) + " tensors, got " +
                            std::to_string(state.size()));
  }
  const lm::Tensor& rk = state[expected - 2];
  const lm::Tensor& rv = state[expected - 1];
  blocks_tail::check_tail_state(rk, rv, offset - frontier, who, meta[5], meta[6]);
  fresh.allocate(rk.astype(dtype), rv.astype(dtype));
  const int64_t blocks = frontier / fresh.group_;
  // The block formats first (every block in the base set without re-coding): they say how many
  // blocks each set holds; then the base set's block table says how many factor rows.
  int64_t in_set[2] = {blocks, 0};
  if (recoding) {
    const lm::Tensor& bf = state[set_tensors + 5];
    if (bf.ndim() != 4 || bf.dim(0) != 1 || bf.dim(1) != 1 || bf.dim(2) != blocks || bf.dim(3) != 1 ||
        bf.dtype() != lm::DType::I32) {
      throw base::FormatError(std::string(who) + ": block formats " + lm::shape_text(bf.shape()) + " do not match " +
                              std::to_string(blocks) + " blocks");
    }
    in_set[0] = 0;
    for (int64_t g = 0; g < blocks; ++g) {
      const int32_t f = row_ptr<int32_t>(bf, 0, 0, g)[0];
      if (f != 0 && f != 1)
        throw base::FormatError(std::string(who) + ": block " + std::to_string(g) + " has format " + std::to_string(f));
      ++in_set[f];
    }
    fresh.block_format_ = cache_rows::copy_rows(bf, blocks, blocks);
  }
  const lm::Tensor& bt = state[set_tensors];
  if (bt.ndim() != 4 || bt.dim(0) != 1 || bt.dim(1) != 1 || bt.dim(2) != in_set[0] || bt.dim(3) != 4 ||
      bt.dtype() != lm::DType::I32) {
    throw base::FormatError(std::string(who) + ": block table " + lm::shape_text(bt.shape()) + " does not match " +
                            std::to_string(in_set[0]) + " base blocks");
  }
  int64_t used[2] = {0, 0};
  const int64_t dims[2] = {fresh.dk_, fresh.dv_};
  for (int64_t g = 0; g < in_set[0]; ++g) {
    const int32_t* t = row_ptr<int32_t>(bt, 0, 0, g);
    for (int64_t w = 0; w < 2; ++w) {
      if (t[2 * w] != used[w] || t[2 * w + 1] < 0 || t[2 * w + 1] > std::min<int64_t>(fresh.group_, dims[w])) {
        throw base::FormatError(std::string(who) + ": block " + std::to_string(g) + " has inconsistent factor terms");
      }
      used[w] += t[2 * w + 1];
    }
  }
  for (int w = 0; w < 2; ++w) {
    const lm::Tensor* like[] = {&fresh.left_[w], &fresh.right_[w]};
    for (int i = 0; i < 2; ++i) {
      const lm::Tensor& s = state[set_tensors + 1 + 2 * static_cast<std::size_t>(w) + static_cast<std::size_t>(i)];
      if (s.ndim() != 4 || s.dim(0) != like[i]->dim(0) || s.dim(1) != like[i]->dim(1) || s.dim(2) != used[w] ||
          s.dim(3) != like[i]->dim(3) || s.dtype() != like[i]->dtype()) {
        throw base::FormatError(std::string(who) + ": factor tensor " + lm::shape_text(s.shape()) + " does not match " +
                                std::to_string(used[w]) + " rows");
      }
    }
  }
  fresh.base_.from_state(state, 0, in_set[0], who);
  if (recoding) fresh.recoded_.from_state(state, set_tensors + 6, in_set[1], who);
  fresh.block_terms_ = cache_rows::copy_rows(bt, in_set[0], in_set[0]);
  for (int w = 0; w < 2; ++w) {
    fresh.left_[w] = cache_rows::copy_rows(state[set_tensors + 1 + 2 * static_cast<std::size_t>(w)], used[w], used[w]);
    fresh.right_[w] = cache_rows::copy_rows(state[set_tensors + 2 + 2 * static_cast<std::size_t>(w)], used[w], used[w]);
    fresh.terms_used_[w] = fresh.terms_capacity_[w] = used[w];
  }
  lm::copy_token_rows(rk.astype(fresh.dtype_), fresh.tail_k_, 0);
  lm::copy_token_rows(rv.astype(fresh.dtype_), fresh.tail_v_, 0);
  fresh.offset_ = offset;
  fresh.frontier_ = frontier;
  fresh.rebuild_block_index();
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> GearCache::clone() const {
  auto copy = std::make_shared<GearCache>(*this);
  copy->base_ = base_.deep_copy();
  copy->recoded_ = recoded_.deep_copy();
  copy->block_format_ = block_format_.clone();
  copy->block_terms_ = block_terms_.clone();
  for (int w = 0; w < 2; ++w) {
    copy->left_[w] = left_[w].clone();
    copy->right_[w] = right_[w].clone();
    copy->set_positions_[w] = set_positions_[w].clone();
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
                                     o.gear_sparse_fraction, o.gear_recode);
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
      "gear_quantize_values=false is refused. Not trimmable (as the original). With gear_rank unset "
      "and gear_recode (default), a block whose factors would take more bytes than coding it at "
      "2 * gear_bits bits (at most 8), and which that code approximates at least as well, is stored at "
      "that width without factors (gear_recode=false: the original's factors for every block).";
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
      option_field("gear_recode", &GearOptions::gear_recode,
                   "With gear_rank None: re-code at 2 * gear_bits (<= 8) bits the blocks whose factors cost more "
                   "bytes and approximate no better (false: factors for every block, as the original)"),
  };
  m.validate = validate_gear_options;
  m.make_serving = make_gear_cache;
  m.cache_type_name = kTypeName;
  // Placeholder parameters: from_state() rebuilds every one of them from meta_state().
  m.make_restorable = [] { return std::make_shared<GearCache>(2, 32, std::nullopt, 0.9, 0.01, true); };
  return m;
}

}  // namespace veloxquant
