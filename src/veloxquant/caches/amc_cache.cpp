#include "veloxquant/caches/amc_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "lm/dtype.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/caches/amc_rows.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/core/linalg.h"
#include "veloxquant/cross_layer/xkv_rows.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "AmcCache";

void require_unit(double x, const char* field) {
  if (!(x >= 0.0 && x <= 1.0)) {
    throw QuantizerConfigError(std::string(field) + " must lie in [0, 1], got " + std::to_string(x));
  }
}

void check_options(const AmcOptions& o) {
  require_unit(o.amc_k_high, "amc_k_high");
  require_unit(o.amc_k_mid, "amc_k_mid");
  if (o.amc_k_high + o.amc_k_mid > 1.0 + 1e-12) {
    throw QuantizerConfigError("amc_k_high + amc_k_mid must be <= 1, got " + std::to_string(o.amc_k_high) + " + " +
                               std::to_string(o.amc_k_mid));
  }
  require_unit(o.amc_query_alpha, "amc_query_alpha");
  if (o.amc_threshold_window < 1) {
    throw QuantizerConfigError("amc_threshold_window must be >= 1, got " + std::to_string(o.amc_threshold_window));
  }
  if (!(o.amc_gamma >= 0.0) || !std::isfinite(o.amc_gamma)) {
    throw QuantizerConfigError("amc_gamma must be finite and >= 0, got " + std::to_string(o.amc_gamma));
  }
  if (o.amc_calib_variance && !(*o.amc_calib_variance > 0.0 && std::isfinite(*o.amc_calib_variance))) {
    throw QuantizerConfigError("amc_calib_variance must be > 0, got " + std::to_string(*o.amc_calib_variance));
  }
  if (o.amc_group_size < 1 || o.amc_group_size > 4096) {
    throw QuantizerConfigError("amc_group_size must lie in [1, 4096], got " + std::to_string(o.amc_group_size));
  }
  if (o.amc_adaptive_thresholds && !o.amc_calib_variance) {
    throw QuantizerConfigError("amc_calib_variance is required when amc_adaptive_thresholds is on (got None)");
  }
  // The two saliency refinements need what the spec does not give (the query-mixing and the
  // threshold-update rules); refused clearly rather than guessed.
  if (o.amc_use_query_saliency) {
    throw base::Unsupported("amc_use_query_saliency=true is not supported: saliency is the key's L1 magnitude");
  }
  if (o.amc_adaptive_thresholds) {
    throw base::Unsupported(
        "amc_adaptive_thresholds=true is not supported: tiers use the fixed amc_k_high / amc_k_mid "
        "fractions per block of amc_group_size tokens");
  }
}

const AmcOptions& checked(const AmcOptions& o) {
  check_options(o);
  return o;
}

int64_t param_groups(int64_t coded, int64_t group) { return (coded + group - 1) / group; }
}  // namespace

AmcCache::AmcCache(const AmcOptions& options) : options_(checked(options)), group_(options.amc_group_size) {
  const AmcTierCounts counts = amc_tier_counts(group_, options.amc_k_high, options.amc_k_mid);
  const int64_t per[3] = {counts.high, counts.mid, counts.low};
  for (int t = 0; t < 3; ++t) {
    tiers_[static_cast<std::size_t>(t)].kind = static_cast<AmcTier>(t);
    tiers_[static_cast<std::size_t>(t)].per_block = per[t];
  }
}

std::vector<lm::Tensor*> AmcCache::tier_tensors(Tier& t) {
  if (t.kind == AmcTier::kHigh) return {&t.k, &t.v, &t.pos};
  return {&t.k, &t.kp, &t.v, &t.vp, &t.pos};
}
std::vector<const lm::Tensor*> AmcCache::tier_tensors(const Tier& t) const {
  if (t.kind == AmcTier::kHigh) return {&t.k, &t.v, &t.pos};
  return {&t.k, &t.kp, &t.v, &t.vp, &t.pos};
}

std::size_t AmcCache::nbytes() const {
  std::size_t n =
      key_table_.storage_bytes() + value_table_.storage_bytes() + tail_k_.storage_bytes() + tail_v_.storage_bytes();
  for (const Tier& t : tiers_) {
    for (const lm::Tensor* x : tier_tensors(t)) n += x->storage_bytes();
  }
  return n;
}

void AmcCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = keys.dim(3);
  dv_ = values.dim(3);
  dtype_ = keys.dtype();
  tail_k_ = lm::Tensor({batch_, heads_, group_, dk_}, dtype_);
  tail_v_ = lm::Tensor({batch_, heads_, group_, dv_}, dtype_);
  for (Tier& t : tiers_) {
    if (t.kind == AmcTier::kHigh) {
      t.k = lm::Tensor({batch_, heads_, 0, dk_}, lm::DType::F16);
      t.v = lm::Tensor({batch_, heads_, 0, dv_}, lm::DType::F16);
    } else {
      const AmcTierShape ks = amc_tier_shape(t.kind, dk_), vs = amc_tier_shape(t.kind, dv_);
      t.bits = ks.bits;
      t.key_layout = xkv_latent_layout(dk_, ks.rank, ks.bits);
      t.value_layout = xkv_latent_layout(dv_, vs.rank, vs.bits);
      t.k = lm::Tensor({batch_, heads_, 0, t.key_layout.row_bytes}, lm::DType::U8);
      t.kp = lm::Tensor({batch_, heads_, 0, 2 * param_groups(ks.rank, group_)}, lm::DType::F16);
      t.v = lm::Tensor({batch_, heads_, 0, t.value_layout.row_bytes}, lm::DType::U8);
      t.vp = lm::Tensor({batch_, heads_, 0, 2 * param_groups(vs.rank, group_)}, lm::DType::F16);
    }
    t.pos = lm::Tensor({batch_, heads_, 0, 1}, lm::DType::I32);
  }
  key_table_ = value_table_ = lm::Tensor();
  capacity_blocks_ = 0;
  fitted_ = false;
}

void AmcCache::ensure_blocks(int64_t blocks) {
  if (blocks <= capacity_blocks_) return;
  const int64_t step = std::max<int64_t>(1, kGrowthStep / group_);
  const int64_t grown = capacity_blocks_ + (blocks - capacity_blocks_ + step - 1) / step * step;
  const int64_t used = frontier_ / group_;
  for (Tier& t : tiers_) {
    for (lm::Tensor* x : tier_tensors(t)) *x = cache_rows::copy_rows(*x, used * t.per_block, grown * t.per_block);
  }
  capacity_blocks_ = grown;
}

void AmcCache::fit(int64_t b, int64_t h, const float* keys, const float* values, int64_t rows) {
  // One centred PCA per (head, keys / values); the table keeps the mean and the Mid tier's
  // directions (Low reads the first of them).
  const auto write = [&](lm::Tensor& table, const float* x, int64_t dim) {
    const linalg::Pca pca = linalg::pca(x, rows, dim, true);
    const int64_t r = table.dim(2) - 1;
    float* mean = row_ptr<float>(table, b, h, 0);
    for (int64_t c = 0; c < dim; ++c) mean[c] = static_cast<float>(pca.mean[static_cast<std::size_t>(c)]);
    for (int64_t i = 0; i < r; ++i) {
      float* dir = row_ptr<float>(table, b, h, 1 + i);
      for (int64_t c = 0; c < dim; ++c)
        dir[c] = static_cast<float>(pca.components[static_cast<std::size_t>(i * dim + c)]);
    }
  };
  write(key_table_, keys, dk_);
  write(value_table_, values, dv_);
}

void AmcCache::flush_block(int64_t b, int64_t h, int64_t block, const float* keys, const float* values) {
  // Saliency: L1 magnitude of each key; order by descending saliency, ties to the earlier token.
  std::vector<double> saliency(static_cast<std::size_t>(group_));
  for (int64_t t = 0; t < group_; ++t) {
    double s = 0.0;
    for (int64_t c = 0; c < dk_; ++c) s += std::fabs(static_cast<double>(keys[t * dk_ + c]));
    saliency[static_cast<std::size_t>(t)] = s;
  }
  std::vector<int64_t> order(static_cast<std::size_t>(group_));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) {
    return saliency[static_cast<std::size_t>(a)] > saliency[static_cast<std::size_t>(c)];
  });
  std::vector<float> z(static_cast<std::size_t>(std::max(dk_, dv_)));
  std::vector<uint8_t> codes(z.size());
  std::vector<core::GroupParams> params(z.size());
  const auto encode = [&](const lm::Tensor& table, const SvdqLayout& layout, const float* x, int bits, uint8_t* row,
                          uint16_t* prow) {
    const int64_t dim = layout.dim, r = layout.coded;
    const float* mean = row_ptr<float>(table, b, h, 0);
    for (int64_t i = 0; i < r; ++i) {
      const float* dir = row_ptr<float>(table, b, h, 1 + i);
      double dot = 0.0;
      for (int64_t c = 0; c < dim; ++c) dot += static_cast<double>(dir[c]) * (x[c] - mean[c]);
      z[static_cast<std::size_t>(i)] = static_cast<float>(dot);
    }
    core::quantize_per_token(z.data(), 1, static_cast<std::size_t>(r), bits, static_cast<std::size_t>(group_),
                             codes.data(), params.data());
    pack_svdq_row(layout, codes.data(), row);
    std::memcpy(prow, params.data(), sizeof(core::GroupParams) * static_cast<std::size_t>(param_groups(r, group_)));
  };
  int64_t first = 0;
  for (Tier& t : tiers_) {
    std::vector<int64_t> members(order.begin() + first, order.begin() + first + t.per_block);
    std::sort(members.begin(), members.end());  // positions ascending within the tier
    first += t.per_block;
    for (int64_t i = 0; i < t.per_block; ++i) {
      const int64_t token = members[static_cast<std::size_t>(i)], row = block * t.per_block + i;
      row_ptr<int32_t>(t.pos, b, h, row)[0] = static_cast<int32_t>(block * group_ + token);
      const float* k = keys + token * dk_;
      const float* v = values + token * dv_;
      if (t.kind == AmcTier::kHigh) {
        cache_rows::store_f32(k, static_cast<std::size_t>(dk_),
                              reinterpret_cast<std::byte*>(row_ptr<uint16_t>(t.k, b, h, row)), lm::DType::F16);
        cache_rows::store_f32(v, static_cast<std::size_t>(dv_),
                              reinterpret_cast<std::byte*>(row_ptr<uint16_t>(t.v, b, h, row)), lm::DType::F16);
      } else {
        encode(key_table_, t.key_layout, k, t.bits, row_ptr<uint8_t>(t.k, b, h, row),
               row_ptr<uint16_t>(t.kp, b, h, row));
        encode(value_table_, t.value_layout, v, t.bits, row_ptr<uint8_t>(t.v, b, h, row),
               row_ptr<uint16_t>(t.vp, b, h, row));
      }
    }
  }
}

void AmcCache::decode_row(const Tier& t, int64_t b, int64_t h, int64_t row, float* k, float* v) const {
  if (t.kind == AmcTier::kHigh) {
    cache_rows::load_f32(reinterpret_cast<const std::byte*>(row_ptr<uint16_t>(t.k, b, h, row)), lm::DType::F16,
                         static_cast<std::size_t>(dk_), k);
    cache_rows::load_f32(reinterpret_cast<const std::byte*>(row_ptr<uint16_t>(t.v, b, h, row)), lm::DType::F16,
                         static_cast<std::size_t>(dv_), v);
    return;
  }
  const auto decode = [&](const lm::Tensor& table, const SvdqLayout& layout, const lm::Tensor& codes,
                          const lm::Tensor& params, float* out) {
    const int64_t r = layout.coded, dim = layout.dim;
    std::vector<float> z(static_cast<std::size_t>(3 * r));
    amc_decode_latent_row(layout, row_ptr<uint8_t>(codes, b, h, row), row_ptr<uint16_t>(params, b, h, row), group_,
                          z.data() + r, z.data() + 2 * r, z.data());
    const float* mean = row_ptr<float>(table, b, h, 0);
    std::copy(mean, mean + dim, out);
    for (int64_t i = 0; i < r; ++i) {
      const float* dir = row_ptr<float>(table, b, h, 1 + i);
      for (int64_t c = 0; c < dim; ++c) out[c] += z[static_cast<std::size_t>(i)] * dir[c];
    }
  };
  decode(key_table_, t.key_layout, t.k, t.kp, k);
  decode(value_table_, t.value_layout, t.v, t.vp, v);
}

AmcTier AmcCache::tier_of(int64_t b, int64_t h, int64_t position) const {
  if (position >= frontier_) throw base::InvalidArgument("AmcCache::tier_of: position past the frontier");
  for (const Tier& t : tiers_) {
    const int64_t block = position / group_;
    for (int64_t i = 0; i < t.per_block; ++i) {
      if (row_ptr<int32_t>(t.pos, b, h, block * t.per_block + i)[0] == position) return t.kind;
    }
  }
  throw base::InvalidArgument("AmcCache::tier_of: position not stored");
}

lm::KeysValues AmcCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void AmcCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "AmcCache::update_and_fetch");
  if (!tail_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "AmcCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2), tail = offset_ - frontier_, pending = tail + s, blocks = pending / group_;
  thread_local std::vector<float> new_k, new_v, pk, pv;
  if (blocks == 0) {
    lm::copy_token_rows(keys, tail_k_, tail);
    lm::copy_token_rows(values, tail_v_, tail);
    offset_ += s;
    return;
  }
  ensure_blocks(frontier_ / group_ + blocks);
  if (!fitted_) {
    key_table_ = lm::Tensor({batch_, heads_, 1 + amc_tier_shape(AmcTier::kMid, dk_).rank, dk_}, lm::DType::F32);
    value_table_ = lm::Tensor({batch_, heads_, 1 + amc_tier_shape(AmcTier::kMid, dv_).rank, dv_}, lm::DType::F32);
  }
  cache_rows::widen_to_f32(keys, new_k);
  cache_rows::widen_to_f32(values, new_v);
  pk.resize(static_cast<std::size_t>(pending * dk_));
  pv.resize(static_cast<std::size_t>(pending * dv_));
  const int64_t kept = pending - blocks * group_;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      blocks_tail::gather_pending(tail_k_, dtype_, bh, group_, dk_, tail, new_k.data(), s, pk.data());
      blocks_tail::gather_pending(tail_v_, dtype_, bh, group_, dv_, tail, new_v.data(), s, pv.data());
      if (!fitted_) fit(b, h, pk.data(), pv.data(), blocks * group_);
      for (int64_t k = 0; k < blocks; ++k) {
        flush_block(b, h, frontier_ / group_ + k, pk.data() + k * group_ * dk_, pv.data() + k * group_ * dv_);
      }
      blocks_tail::keep_in_tail(pk.data() + blocks * group_ * dk_, kept, tail_k_, dtype_, bh, group_, dk_);
      blocks_tail::keep_in_tail(pv.data() + blocks * group_ * dv_, kept, tail_v_, dtype_, bh, group_, dv_);
    }
  }
  fitted_ = true;
  offset_ += s;
  frontier_ += blocks * group_;
}

lm::KeysValues AmcCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  std::vector<float> kr(static_cast<std::size_t>(dk_)), vr(static_cast<std::size_t>(dv_));
  const int64_t ke = static_cast<int64_t>(k.element_size()), ve = static_cast<int64_t>(v.element_size());
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      std::byte* kout = k.raw_data() + bh * offset_ * dk_ * ke;
      std::byte* vout = v.raw_data() + bh * offset_ * dv_ * ve;
      for (const Tier& t : tiers_) {
        for (int64_t row = 0; row < frontier_ / group_ * t.per_block; ++row) {
          decode_row(t, b, h, row, kr.data(), vr.data());
          const int64_t p = row_ptr<int32_t>(t.pos, b, h, row)[0];
          cache_rows::store_f32(kr.data(), kr.size(), kout + p * dk_ * ke, dtype);
          cache_rows::store_f32(vr.data(), vr.size(), vout + p * dv_ * ve, dtype);
        }
      }
      blocks_tail::fetch_head_tail(tail_k_, dtype_, bh, group_, dk_, offset_ - frontier_, frontier_, offset_, k);
      blocks_tail::fetch_head_tail(tail_v_, dtype_, bh, group_, dv_, offset_ - frontier_, frontier_, offset_, v);
    }
  }
  return {std::move(k), std::move(v)};
}

void AmcCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("AmcCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("AmcCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  const int64_t blocks = frontier_ / group_;
  const Tier& hi = tiers_[0];
  attention::DtypeRowSource high(hi.k, hi.v, blocks * hi.per_block);
  if (hi.pos.defined() && hi.pos.dim(2) > 0) {
    high.set_positions(hi.pos.data<int32_t>(), hi.pos.strides()[1], hi.pos.strides()[0]);
  }
  const auto latent = [&](const Tier& t) {
    return AmcLatentRows({&t.k, &t.kp, &t.v, &t.vp, &t.pos, &key_table_, &value_table_}, t.key_layout, t.value_layout,
                         group_, blocks * t.per_block);
  };
  const AmcLatentRows mid = latent(tiers_[1]), low = latent(tiers_[2]);
  const attention::DtypeRowSource tail(tail_k_, tail_v_, offset_ - frontier_, frontier_);
  const attention::RowSource* segments[4];
  int n = 0;
  if (blocks > 0) {
    if (hi.per_block > 0) segments[n++] = &high;
    if (tiers_[1].per_block > 0) segments[n++] = &mid;
    if (tiers_[2].per_block > 0) segments[n++] = &low;
  }
  if (offset_ > frontier_) segments[n++] = &tail;
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, n, attention::request_pool(request));
}

std::vector<lm::Tensor> AmcCache::state() const {
  if (!tail_k_.defined()) return {};
  const int64_t rows = offset_ - frontier_, blocks = frontier_ / group_;
  std::vector<lm::Tensor> out = {tail_k_.slice(2, 0, rows), tail_v_.slice(2, 0, rows)};
  if (!fitted_) return out;
  out.push_back(key_table_);
  out.push_back(value_table_);
  for (const Tier& t : tiers_) {
    for (const lm::Tensor* x : tier_tensors(t)) out.push_back(x->slice(2, 0, blocks * t.per_block));
  }
  return out;
}

std::vector<std::string> AmcCache::meta_state() const {
  const AmcOptions& o = options_;
  return {blocks_tail::exact_double(o.amc_k_high),
          blocks_tail::exact_double(o.amc_k_mid),
          std::to_string(group_),
          std::to_string(fitted_ ? 1 : 0),
          std::to_string(offset_),
          std::to_string(frontier_),
          std::string(lm::dtype_name(dtype_))};
}

void AmcCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "AmcCache::from_state";
  if (meta.size() != 7) {
    throw base::FormatError(std::string(who) + ": expected 7 meta entries (amc_k_high, amc_k_mid, amc_group_size, " +
                            "fitted, offset, frontier, dtype), got " + std::to_string(meta.size()));
  }
  AmcOptions o;
  o.amc_k_high = blocks_tail::parse_meta_double(meta[0], who, "amc_k_high");
  o.amc_k_mid = blocks_tail::parse_meta_double(meta[1], who, "amc_k_mid");
  o.amc_group_size = static_cast<int>(cache_rows::parse_meta_int(meta[2], who, "amc_group_size"));
  AmcCache fresh(o);
  const bool fitted = cache_rows::parse_meta_int(meta[3], who, "fitted") != 0;
  const blocks_tail::TailMeta saved = blocks_tail::parse_tail_meta(meta, 4, fresh.group_, who);
  if (state.empty()) {
    if (saved.offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[4]);
    *this = std::move(fresh);
    return;
  }
  const std::size_t want = fitted ? 4 + 3 + 5 + 5 : 2;
  if (state.size() != want) {
    throw base::FormatError(std::string(who) + ": expected " + std::to_string(want) + " tensors, got " +
                            std::to_string(state.size()));
  }
  const int64_t rows = saved.offset - saved.frontier, blocks = saved.frontier / fresh.group_;
  blocks_tail::check_tail_state(state[0], state[1], rows, who, meta[4], meta[5]);
  if (saved.frontier > 0 && !fitted) throw base::FormatError(std::string(who) + ": coded rows without fitted bases");
  fresh.allocate(state[0].astype(saved.dtype), state[1].astype(saved.dtype));
  lm::copy_token_rows(state[0].astype(saved.dtype), fresh.tail_k_, 0);
  lm::copy_token_rows(state[1].astype(saved.dtype), fresh.tail_v_, 0);
  if (fitted) {
    const int64_t step = std::max<int64_t>(1, kGrowthStep / fresh.group_);
    fresh.capacity_blocks_ = (blocks + step - 1) / step * step;
    const lm::Tensor* tables[2] = {&state[2], &state[3]};
    const int64_t dims[2] = {fresh.dk_, fresh.dv_};
    for (int i = 0; i < 2; ++i) {
      const lm::Tensor& t = *tables[i];
      const int64_t r = amc_tier_shape(AmcTier::kMid, dims[i]).rank;
      if (t.ndim() != 4 || t.dtype() != lm::DType::F32 || t.dim(0) != fresh.batch_ || t.dim(1) != fresh.heads_ ||
          t.dim(2) != 1 + r || t.dim(3) != dims[i]) {
        throw base::FormatError(std::string(who) + ": basis table " + lm::shape_text(t.shape()) + " does not fit");
      }
    }
    fresh.key_table_ = state[2].clone();
    fresh.value_table_ = state[3].clone();
    std::size_t next = 4;
    for (Tier& t : fresh.tiers_) {
      for (lm::Tensor* x : fresh.tier_tensors(t)) {
        const lm::Tensor& s = state[next++];
        if (s.ndim() != 4 || s.dim(0) != fresh.batch_ || s.dim(1) != fresh.heads_ || s.dim(2) != blocks * t.per_block ||
            s.dim(3) != x->dim(3) || s.dtype() != x->dtype()) {
          throw base::FormatError(std::string(who) + ": tensor " + std::to_string(next - 1) + " " +
                                  lm::shape_text(s.shape()) + " does not match frontier " + meta[5]);
        }
        *x = cache_rows::copy_rows(s, blocks * t.per_block, fresh.capacity_blocks_ * t.per_block);
      }
    }
    fresh.fitted_ = true;
  }
  fresh.offset_ = saved.offset;
  fresh.frontier_ = saved.frontier;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> AmcCache::clone() const {
  auto copy = std::make_shared<AmcCache>(*this);
  copy->key_table_ = key_table_.clone();
  copy->value_table_ = value_table_.clone();
  copy->tail_k_ = tail_k_.clone();
  copy->tail_v_ = tail_v_.clone();
  for (std::size_t i = 0; i < 3; ++i) {
    const std::vector<const lm::Tensor*> src = tier_tensors(tiers_[i]);
    const std::vector<lm::Tensor*> dst = copy->tier_tensors(copy->tiers_[i]);
    for (std::size_t j = 0; j < src.size(); ++j) *dst[j] = src[j]->clone();
  }
  return copy;
}

void validate_amc_options(const KVCacheConfig& config) { check_options(config.options<AmcOptions>()); }

std::shared_ptr<lm::KVCache> make_amc_cache(const KVCacheConfig& config) {
  validate_amc_options(config);
  return std::make_shared<AmcCache>(config.options<AmcOptions>());
}

MethodDescriptor amc_method() {
  MethodDescriptor m;
  m.name = "amc";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.fused_attention = true, .real_compression = true};
  m.blurb =
      "Per-token L1 key saliency per block of amc_group_size tokens: top amc_k_high kept f16, next amc_k_mid "
      "as rank d/3 PCA latents at 8 bits, the rest rank d/16 at 4 bits; never evicts";
  m.paper = "AMC (Hu et al., Apple), preprint arXiv 2607.10109 (the spec's venue exception)";
  m.deviations =
      "Ranks 128/43/8 read as fractions of head_dim (d, ceil(d/3), max(1, d/16)). Tiers chosen per complete "
      "block of amc_group_size tokens (the incomplete block stays in the input dtype); latent bases are "
      "centred PCA of the prompt's keys and values per kv head (core/linalg.h), frozen; latent coordinates "
      "quantized per token (f16 scale and min per amc_group_size coordinates). Real packed storage (the "
      "original counts bytes). amc_use_query_saliency and amc_adaptive_thresholds are refused (Unsupported). "
      "Family label 'quantization' (the original's is 'eviction', but nothing is evicted and this registry "
      "ties 'eviction' to budgets).";
  m.docs = "docs/methods/amc.md";
  m.fields = {
      option_field("amc_k_high", &AmcOptions::amc_k_high,
                   "Share of each block's tokens (most salient) kept f16, [0, 1]"),
      option_field("amc_k_mid", &AmcOptions::amc_k_mid,
                   "Share of each block's tokens in the Mid tier (rank d/3, 8 bits)"),
      option_field("amc_use_query_saliency", &AmcOptions::amc_use_query_saliency,
                   "Mix query attention into the saliency (not supported: must stay false)"),
      option_field("amc_query_alpha", &AmcOptions::amc_query_alpha, "Weight of the query saliency, [0, 1]"),
      option_field("amc_adaptive_thresholds", &AmcOptions::amc_adaptive_thresholds,
                   "Adapt the tier thresholds over a window (not supported: must stay false)"),
      option_field("amc_threshold_window", &AmcOptions::amc_threshold_window, "Tokens in the threshold window", 1),
      option_field("amc_gamma", &AmcOptions::amc_gamma, "Threshold adaptation rate (with adaptive thresholds)"),
      option_field("amc_calib_variance", &AmcOptions::amc_calib_variance,
                   "Calibrated saliency variance; required when amc_adaptive_thresholds is on"),
      option_field("amc_group_size", &AmcOptions::amc_group_size,
                   "Tokens per tiering block, and latent coordinates per (scale, min)", 1, 4096),
  };
  m.validate = validate_amc_options;
  m.make_serving = make_amc_cache;
  m.cache_type_name = kTypeName;
  m.make_restorable = [] { return std::make_shared<AmcCache>(AmcOptions{}); };
  return m;
}

}  // namespace veloxquant
