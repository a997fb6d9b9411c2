#include "veloxquant/caches/latent_cache.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/attention/latent_tiles.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/core/linalg.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {

int64_t groups_for(int64_t heads, int requested) {
  int64_t g = std::clamp<int64_t>(requested, 1, heads);
  while (heads % g != 0) --g;
  return g;
}

std::unique_ptr<LatentCodec> copy_codec(const std::unique_ptr<LatentCodec>& c) { return c ? c->clone() : nullptr; }

void copy_side(LatentSide& dst, const LatentSide& src) {
  dst.dim = src.dim;
  dst.width = src.width;
  dst.max_rank = src.max_rank;
  dst.basis = src.basis.defined() ? src.basis.clone() : lm::Tensor();
  dst.mean = src.mean.defined() ? src.mean.clone() : lm::Tensor();
  dst.ranks = src.ranks.defined() ? src.ranks.clone() : lm::Tensor();
  dst.codes = src.codes.defined() ? src.codes.clone() : lm::Tensor();
  dst.codec = copy_codec(src.codec);
}

std::size_t side_bytes(const LatentSide& s) {
  return s.basis.storage_bytes() + s.mean.storage_bytes() + s.ranks.storage_bytes() + s.codes.storage_bytes() +
         (s.codec ? s.codec->nbytes() : 0);
}

}  // namespace

LatentCache::LatentCache(std::string type_name, int n_head_groups, std::unique_ptr<LatentCodec> key_codec,
                         std::unique_ptr<LatentCodec> value_codec)
    : type_name_(std::move(type_name)), fused_who_(type_name_ + "::fused_attention"), requested_groups_(n_head_groups) {
  k_.codec = std::move(key_codec);
  v_.codec = std::move(value_codec);
}

LatentCache::LatentCache(const LatentCache& other) { *this = other; }

LatentCache& LatentCache::operator=(const LatentCache& other) {
  if (this == &other) return *this;
  type_name_ = other.type_name_;
  fused_who_ = other.fused_who_;
  requested_groups_ = other.requested_groups_;
  batch_ = other.batch_;
  heads_ = other.heads_;
  groups_ = other.groups_;
  heads_per_group_ = other.heads_per_group_;
  dtype_ = other.dtype_;
  offset_ = other.offset_;
  capacity_ = other.capacity_;
  fitted_ = other.fitted_;
  raw_k_ = other.raw_k_.defined() ? other.raw_k_.clone() : lm::Tensor();
  raw_v_ = other.raw_v_.defined() ? other.raw_v_.clone() : lm::Tensor();
  copy_side(k_, other.k_);
  copy_side(v_, other.v_);
  return *this;
}

std::size_t LatentCache::nbytes() const {
  return raw_k_.storage_bytes() + raw_v_.storage_bytes() + side_bytes(k_) + side_bytes(v_);
}

void LatentCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dtype_ = keys.dtype();
  groups_ = groups_for(heads_, requested_groups_);
  heads_per_group_ = heads_ / groups_;
  for (auto [side, d] : {std::pair{&k_, keys.dim(3)}, std::pair{&v_, values.dim(3)}}) {
    side->dim = d;
    side->width = heads_per_group_ * d;
    side->max_rank = 0;
    side->basis = side->mean = side->ranks = side->codes = lm::Tensor();
    side->codec->allocate(batch_, groups_, side->width);
  }
  raw_k_ = lm::Tensor({batch_, heads_, 0, keys.dim(3)}, dtype_);
  raw_v_ = lm::Tensor({batch_, heads_, 0, values.dim(3)}, dtype_);
  capacity_ = 0;
  offset_ = 0;
  fitted_ = false;
}

void LatentCache::ensure_code_rows(int64_t rows) {
  if (rows <= capacity_) return;
  const int64_t grown = capacity_ + ((rows - capacity_ + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  if (fitted_) {
    k_.codes = cache_rows::copy_rows(k_.codes, offset_, grown);
    v_.codes = cache_rows::copy_rows(v_.codes, offset_, grown);
  } else {
    raw_k_ = cache_rows::copy_rows(raw_k_, offset_, grown);
    raw_v_ = cache_rows::copy_rows(raw_v_, offset_, grown);
  }
  capacity_ = grown;
}

// rows: f32 [B, H, n, D] (one side). Latents z = U (x - mu) of each token's group row x, coded.
// The projection sums in double in the order of the columns (attention/latent_tiles.h), the
// same bits as the plain loop, eight tokens per vector when there are that many.
void LatentCache::encode_rows(LatentSide& side, const float* rows, int64_t n, int64_t first_row) const {
  // Tokens are coded independently, so a prefill chunk's tokens are cut into ranges across the
  // pool (the calling thread coded a 512-token chunk alone while the other waited); a decode
  // step's token is coded here, without a dispatch.
  constexpr int64_t kTokensPerTask = 64;
  const int64_t ranges = (n + kTokensPerTask - 1) / kTokensPerTask, units = batch_ * groups_ * ranges;
  const auto body = [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int64_t t0 = (u % ranges) * kTokensPerTask, bg = u / ranges;
      encode_token_range(side, rows, n, first_row, bg / groups_, bg % groups_, t0, std::min(n, t0 + kTokensPerTask));
    }
  };
  if (n >= 16 && units > 1) {
    base::ThreadPool::global().parallel_for(units, body, 1);
  } else {
    body(0, units);
  }
}

// Tokens [t0, t1) of the n in `rows` (f32 [B, H, n, D]), head group g of batch b.
void LatentCache::encode_token_range(LatentSide& side, const float* rows, int64_t n, int64_t first_row, int64_t b,
                                     int64_t g, int64_t t0, int64_t t1) const {
  const int64_t d = side.dim, w = side.width, m = t1 - t0;
  // Grow-only per thread: a decode step encodes its token without a heap allocation.
  thread_local std::vector<float> x, z;
  x.resize(static_cast<std::size_t>(m * w));
  z.resize(static_cast<std::size_t>(m * std::max<int64_t>(side.max_rank, 1)));
  const int64_t r = side.rank(b, g);
  const float* mu = side.mean_row(b, g);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t l = 0; l < heads_per_group_; ++l) {
      const float* src = rows + ((b * heads_ + g * heads_per_group_ + l) * n + t0 + t) * d;
      float* dst = x.data() + t * w + l * d;
      for (int64_t c = 0; c < d; ++c) dst[c] = src[c] - mu[l * d + c];
    }
  }
  attention::kernels::project_latents(side.basis_row(b, g, 0), w, r, x.data(), w, m, z.data());
  for (int64_t t = 0; t < m; ++t) {
    side.codec->encode(b, g, z.data() + t * r, row_ptr<uint8_t>(side.codes, b, g, first_row + t0 + t));
  }
}

// rows: f32 [B, H, n, D], the n stored rows of one side; the first fit_rows of them are fitted on.
void LatentCache::fit_side(LatentSide& side, const std::vector<float>& rows, int64_t n, int64_t fit_rows) {
  const int64_t d = side.dim, w = side.width;
  std::vector<linalg::Pca> pcas;
  std::vector<int64_t> ranks;
  std::vector<float> x(static_cast<std::size_t>(fit_rows * w));
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t g = 0; g < groups_; ++g) {
      for (int64_t t = 0; t < fit_rows; ++t) {
        for (int64_t l = 0; l < heads_per_group_; ++l) {
          const float* src = rows.data() + ((b * heads_ + g * heads_per_group_ + l) * n + t) * d;
          std::copy_n(src, d, x.data() + t * w + l * d);
        }
      }
      pcas.push_back(linalg::pca(x.data(), fit_rows, w, true));
      ranks.push_back(std::clamp<int64_t>(side.codec->choose_rank(b, g, pcas.back().variance), 1, w));
    }
  }
  side.max_rank = *std::max_element(ranks.begin(), ranks.end());
  side.basis = lm::Tensor({batch_, groups_, side.max_rank, w}, lm::DType::F32);
  side.mean = lm::Tensor({batch_, groups_, 1, w}, lm::DType::F32);
  side.ranks = lm::Tensor({batch_, groups_, 1, 1}, lm::DType::I32);
  int64_t row_bytes = 1;
  std::vector<float> latents;
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t g = 0; g < groups_; ++g) {
      const std::size_t at = static_cast<std::size_t>(b * groups_ + g);
      const linalg::Pca& p = pcas[at];
      const int64_t r = ranks[at];
      row_ptr<int32_t>(side.ranks, b, g, 0)[0] = static_cast<int32_t>(r);
      float* mu = row_ptr<float>(side.mean, b, g, 0);
      for (int64_t c = 0; c < w; ++c) mu[c] = static_cast<float>(p.mean[static_cast<std::size_t>(c)]);
      for (int64_t i = 0; i < r; ++i) {
        float* u = row_ptr<float>(side.basis, b, g, i);
        for (int64_t c = 0; c < w; ++c) u[c] = static_cast<float>(p.components[static_cast<std::size_t>(i * w + c)]);
      }
      // The fitting rows' latents, for the codec's own fit (kvtc's ranges).
      latents.assign(static_cast<std::size_t>(fit_rows * r), 0.0f);
      for (int64_t t = 0; t < fit_rows; ++t) {
        for (int64_t l = 0; l < heads_per_group_; ++l) {
          const float* src = rows.data() + ((b * heads_ + g * heads_per_group_ + l) * n + t) * d;
          for (int64_t c = 0; c < d; ++c) x[static_cast<std::size_t>(t * w + l * d + c)] = src[c] - mu[l * d + c];
        }
      }
      attention::kernels::project_latents(row_ptr<float>(side.basis, b, g, 0), w, r, x.data(), w, fit_rows,
                                          latents.data());
      side.codec->fit(b, g, latents.data(), fit_rows, r);
      row_bytes = std::max(row_bytes, side.codec->row_bytes(b, g));
    }
  }
  side.codes = lm::Tensor({batch_, groups_, capacity_, row_bytes}, lm::DType::U8);
  encode_rows(side, rows.data(), n, 0);
}

void LatentCache::fit() {
  // The fit reads whole multiples of kMinFitRows rows, so a cache trimmed by a few rows and one
  // fed only the kept rows fit the same basis (the serving contract's trim case).
  const int64_t fit_rows = offset_ / kMinFitRows * kMinFitRows;
  std::vector<float> rk, rv;
  cache_rows::widen_to_f32(raw_k_.slice(2, 0, offset_).contiguous(), rk);
  cache_rows::widen_to_f32(raw_v_.slice(2, 0, offset_).contiguous(), rv);
  // The two sides are fitted independently (their own PCA, codec and codes): side by side on
  // the pool, as the calling thread fitted both while the other waited (Eigen's solve and the
  // bit DP, ~3% of a kvtc 4k prefill). Their encodes then run inline on each side's thread.
  const auto sides = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (i == 0) {
        fit_side(k_, rk, offset_, fit_rows);
      } else {
        fit_side(v_, rv, offset_, fit_rows);
      }
    }
  };
  base::ThreadPool::global().parallel_for(2, sides, 1);
  raw_k_ = raw_v_ = lm::Tensor();
  fitted_ = true;
}

void LatentCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  const char* who = "LatentCache::update_and_fetch";
  lm::check_new_tokens(keys, values, who);
  if (!k_.codes.defined() && !raw_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, k_.dim, v_.dim}, who);
  }
  const int64_t s = keys.dim(2);
  ensure_code_rows(offset_ + s);
  if (!fitted_) {
    lm::copy_token_rows(keys, raw_k_, offset_);
    lm::copy_token_rows(values, raw_v_, offset_);
    offset_ += s;
    if (offset_ >=
        std::max(kMinFitRows, std::max(k_.codec->min_fit_rows(k_.width), v_.codec->min_fit_rows(v_.width)))) {
      fit();
    }
    return;
  }
  thread_local std::vector<float> nk, nv;
  cache_rows::widen_to_f32(keys, nk);
  cache_rows::widen_to_f32(values, nv);
  base::ThreadPool& pool = base::ThreadPool::global();
  if (s < 16 && pool.size() > 1) {
    // A decode step: its one token's projection (r x width products in double per side, the
    // largest part of the step outside the attention, ~4% of a 2-thread kvtc decode, all on
    // the calling thread while the other waited) runs keys and values side by side.
    // (The rows by pointer: a thread_local named in the lambda would be the worker's own.)
    const float* const rows[2] = {nk.data(), nv.data()};
    const auto sides = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) encode_rows(i == 0 ? k_ : v_, rows[i], s, offset_);
    };
    pool.parallel_for(2, sides, 1);
  } else {
    encode_rows(k_, nk.data(), s, offset_);
    encode_rows(v_, nv.data(), s, offset_);
  }
  offset_ += s;
}

// out: f32 [B, H, offset, D] <- mu + U^T z of every stored row, a block of rows at a time
// (attention/latent_tiles.h: the same bits as one row at a time).
// Every block is rebuilt on its own, so the blocks of both sides run across the pool (a
// prefill chunk rebuilt all its rows on the calling thread while the other waited).
void LatentCache::reconstruct_sides(lm::Tensor& keys, lm::Tensor& values) const {
  const int64_t blocks = (offset_ + kRebuildBlock - 1) / kRebuildBlock, per_side = batch_ * groups_ * blocks;
  base::ThreadPool::global().parallel_for(2 * per_side, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const bool k = u < per_side;
      const int64_t v = k ? u : u - per_side, bg = v / blocks;
      reconstruct_block(k ? k_ : v_, k ? keys : values, bg / groups_, bg % groups_, (v % blocks) * kRebuildBlock);
    }
  });
}

void LatentCache::reconstruct_block(const LatentSide& side, lm::Tensor& out, int64_t b, int64_t g, int64_t t0) const {
  const int64_t d = side.dim, w = side.width, r = side.rank(b, g), m = std::min(kRebuildBlock, offset_ - t0);
  thread_local std::vector<float> z, x;  // grow-only per thread
  z.resize(static_cast<std::size_t>(kRebuildBlock * std::max<int64_t>(side.max_rank, 1)));
  x.resize(static_cast<std::size_t>(kRebuildBlock * w));
  side.codec->decode_rows(b, g, side.code_row(b, g, t0), side.row_stride(), m, z.data());
  attention::kernels::reconstruct_latent_rows(side.basis_row(b, g, 0), w, r, side.mean_row(b, g), z.data(), w, m,
                                              x.data(), w);
  for (int64_t l = 0; l < heads_per_group_; ++l) {
    float* dst = row_ptr<float>(out, b, g * heads_per_group_ + l, t0);
    for (int64_t t = 0; t < m; ++t) std::copy_n(x.data() + t * w + l * d, d, dst + t * d);
  }
}

lm::KeysValues LatentCache::fetch(lm::DType dtype) const {
  if (!fitted_) return {raw_k_.slice(2, 0, offset_).astype(dtype), raw_v_.slice(2, 0, offset_).astype(dtype)};
  lm::Tensor k({batch_, heads_, offset_, k_.dim}, lm::DType::F32), v({batch_, heads_, offset_, v_.dim}, lm::DType::F32);
  reconstruct_sides(k, v);
  if (dtype == lm::DType::F32) return {k, v};
  return {k.astype(dtype), v.astype(dtype)};
}

lm::KeysValues LatentCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

// Per stored row, the latent path's multiply-adds are q_heads x n x (rk + rv) (every query head
// reads the group's whole latent, K and V); rebuilding costs G x (width_k rk + width_v rv) once
// per call and then the plain rows' q_heads x n x (Dk + Dv). A decode step (n = 1) stays latent
// (9 x 384 against 73,728 at SmolLM2's r = 192); a prefill chunk of more than ~32 queries per
// head at r = 192 (~64 at r = 96) rebuilds. Both give the rows' scores up to rounding: the
// latent scores are <U q, z> and the rebuilt ones <q, mu + U^T z> (f32).
bool LatentCache::rebuild_rows_for(int64_t q_heads, int64_t n) const {
  if (!k_.codec->prefill_over_rebuilt_rows() || !v_.codec->prefill_over_rebuilt_rows()) return false;
  const int64_t rk = k_.max_rank, rv = v_.max_rank;
  const int64_t latent = q_heads * n * (rk + rv);
  const int64_t rebuilt = groups_ * (k_.width * rk + v_.width * rv) + q_heads * n * (k_.dim + v_.dim);
  return latent > rebuilt;
}

void LatentCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  const std::string& who = fused_who_;
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument(who + ": queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes(who, q, *request.keys, batch_, heads_, k_.dim, v_.dim, out);
  lm::Tensor contiguous_queries;
  attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  if (!fitted_) {
    const attention::DtypeRowSource raw(raw_k_, raw_v_, offset_);
    attention::attend(call, raw, attention::request_pool(request));
    return;
  }
  const int64_t hq = q.dim(1), n = q.dim(2);
  if (rebuild_rows_for(hq, n)) {
    // A prefill chunk: the rows mu + U^T z rebuilt in f32 (as update_and_fetch rebuilds them,
    // before its cast to the input dtype) and attended as plain rows. Rounding them to f16 as
    // well moved a 1-chunk eval's KL from 1.069 to 1.156; in f32 it measured 1.019.
    // Grow-only per-thread rows (every layer's cache on this thread reuses them; whole 1024-row
    // steps, so a prefill's growing context reallocates a few times, not per call).
    thread_local lm::Tensor rebuilt_k, rebuilt_v;
    for (auto [t, dim] : {std::pair{&rebuilt_k, k_.dim}, std::pair{&rebuilt_v, v_.dim}}) {
      if (!t->defined() || t->dim(0) != batch_ || t->dim(1) != heads_ || t->dim(2) < offset_ || t->dim(3) != dim) {
        *t = lm::Tensor({batch_, heads_, (offset_ + 1023) / 1024 * 1024, dim}, lm::DType::F32);
      }
    }
    reconstruct_sides(rebuilt_k, rebuilt_v);
    const attention::DtypeRowSource plain(rebuilt_k, rebuilt_v, offset_);
    attention::attend(call, plain, attention::request_pool(request));
    return;
  }
  // Queries projected once per call, latents accumulated by the driver, outputs rebuilt once.
  const LatentRows rows(k_, v_, 1, offset_);
  projected_.resize(static_cast<std::size_t>(batch_ * hq * n * k_.max_rank));
  latent_out_.resize(static_cast<std::size_t>(batch_ * hq * n * v_.max_rank));
  project_queries(k_, heads_, heads_per_group_, call.queries, batch_, hq, n, projected_.data());
  call.queries = projected_.data();
  call.out = latent_out_.data();
  if (rows.integer_keys()) {  // keys scored from their integer codes (kvtc)
    plane_queries_.resize(static_cast<std::size_t>(batch_ * hq * n * rows.key_dim()));
    rows.queries_to_codes(projected_.data(), batch_, hq, n, plane_queries_.data());
    call.queries = plane_queries_.data();
  }
  if (rows.planes()) {  // queries and outputs in the rows' plane order (LatentRows)
    plane_queries_.resize(static_cast<std::size_t>(batch_ * hq * n * rows.key_dim()));
    plane_out_.resize(static_cast<std::size_t>(batch_ * hq * n * rows.value_dim()));
    rows.queries_to_planes(projected_.data(), batch_, hq, n, plane_queries_.data());
    call.queries = plane_queries_.data();
    call.out = plane_out_.data();
  }
  // Every query head of a head group scores the group's one latent row, so the driver sees each
  // group as one kv head of Hq / G query heads: a tile is decoded once for the whole group
  // instead of once per kv head (the projected queries are already in the group's basis).
  call.kv_heads = groups_;
  attention::attend(call, rows, attention::request_pool(request));
  if (rows.planes()) rows.latents_from_planes(plane_out_.data(), batch_, hq, n, latent_out_.data());
  reconstruct_outputs(v_, heads_, heads_per_group_, latent_out_.data(), batch_, hq, n, out.data<float>());
}

int64_t LatentCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument(type_name_ + "::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset_);
  offset_ -= removed;
  // Codes are per token, so the kept rows are exactly what feeding only them stored (the basis
  // stays as fitted). An emptied cache fits a new basis on the next prompt.
  if (offset_ == 0 && (raw_k_.defined() || k_.codes.defined())) {
    const lm::Tensor like_k({batch_, heads_, 1, k_.dim}, dtype_), like_v({batch_, heads_, 1, v_.dim}, dtype_);
    allocate(like_k, like_v);
  }
  return removed;
}

std::vector<lm::Tensor> LatentCache::state() const {
  if (!fitted_) {
    if (!raw_k_.defined()) return {};
    return {raw_k_.slice(2, 0, offset_), raw_v_.slice(2, 0, offset_)};
  }
  std::vector<lm::Tensor> out = {k_.codes.slice(2, 0, offset_), k_.basis, k_.mean, k_.ranks,
                                 v_.codes.slice(2, 0, offset_), v_.basis, v_.mean, v_.ranks};
  for (const LatentSide* side : {&k_, &v_}) {
    for (lm::Tensor& t : side->codec->state()) out.push_back(std::move(t));
  }
  return out;
}

std::vector<std::string> LatentCache::meta_state() const {
  std::vector<std::string> meta = k_.codec->meta();
  meta.push_back(std::to_string(requested_groups_));
  meta.push_back(std::to_string(heads_));
  meta.push_back(std::to_string(fitted_ ? 1 : 0));
  meta.push_back(std::to_string(offset_));
  meta.push_back(std::string(lm::dtype_name(dtype_)));
  return meta;
}

void LatentCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const std::string who_s = type_name_ + "::from_state";
  const char* who = who_s.c_str();
  const std::size_t options = k_.codec->meta_size();
  if (meta.size() != options + 5) {
    throw base::FormatError(who_s + ": expected " + std::to_string(options + 5) + " meta entries, got " +
                            std::to_string(meta.size()));
  }
  LatentCache fresh(*this);
  const std::vector<std::string> codec_meta(meta.begin(), meta.begin() + static_cast<std::ptrdiff_t>(options));
  fresh.k_.codec->set_meta(codec_meta);
  fresh.v_.codec->set_meta(codec_meta);
  fresh.requested_groups_ = static_cast<int>(cache_rows::parse_meta_int(meta[options], who, "head groups"));
  if (fresh.requested_groups_ < 1) throw base::FormatError(who_s + ": bad head groups '" + meta[options] + "'");
  const int64_t saved_heads = cache_rows::parse_meta_int(meta[options + 1], who, "heads");
  const bool fitted = cache_rows::parse_meta_int(meta[options + 2], who, "fitted") != 0;
  const int64_t offset = cache_rows::parse_meta_int(meta[options + 3], who, "offset");
  const lm::DType dtype = lm::parse_float_dtype(meta[options + 4]);
  fresh.raw_k_ = fresh.raw_v_ = lm::Tensor();
  fresh.k_.codes = fresh.v_.codes = lm::Tensor();
  fresh.offset_ = 0;
  fresh.fitted_ = false;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(who_s + ": no tensors for offset " + meta[options + 3]);
    *this = fresh;
    return;
  }
  const std::size_t expected = fitted ? 8 : 2;
  if (state.size() < expected || (!fitted && state.size() != 2) || (state.size() - expected) % 2 != 0) {
    throw base::FormatError(who_s + ": unexpected tensor count " + std::to_string(state.size()));
  }
  const lm::Tensor& first_k = state[0];
  const lm::Tensor& first_v = state[fitted ? 4 : 1];
  if (first_k.ndim() != 4 || first_v.ndim() != 4 || first_k.dim(2) != offset || first_v.dim(2) != offset) {
    throw base::FormatError(who_s + ": rows do not match offset " + meta[options + 3]);
  }
  if (!fitted) {
    fresh.allocate(first_k.astype(dtype), first_v.astype(dtype));
    fresh.ensure_code_rows(offset);
    lm::copy_token_rows(first_k.astype(dtype), fresh.raw_k_, 0);
    lm::copy_token_rows(first_v.astype(dtype), fresh.raw_v_, 0);
    fresh.offset_ = offset;
    *this = fresh;
    return;
  }
  // Fitted: the geometry comes from the bases ([B, G, r, (H / G) D]); heads from the groups.
  const lm::Tensor& kb = state[1];
  const lm::Tensor& vb = state[5];
  if (kb.ndim() != 4 || vb.ndim() != 4 || first_k.dim(1) != kb.dim(1) || kb.dim(0) != first_k.dim(0)) {
    throw base::FormatError(who_s + ": basis does not match the codes");
  }
  fresh.batch_ = kb.dim(0);
  fresh.groups_ = kb.dim(1);
  fresh.dtype_ = dtype;
  if (saved_heads < 1 || saved_heads % fresh.groups_ != 0 ||
      groups_for(saved_heads, fresh.requested_groups_) != fresh.groups_) {
    throw base::FormatError(who_s + ": " + std::to_string(fresh.groups_) + " saved head groups do not fit " +
                            std::to_string(saved_heads) + " heads");
  }
  const int64_t heads_per_group = saved_heads / fresh.groups_;
  fresh.heads_per_group_ = heads_per_group;
  fresh.heads_ = fresh.groups_ * heads_per_group;
  const std::size_t per_codec = (state.size() - 8) / 2;
  const lm::Tensor* tensors[] = {&state[0], &state[1], &state[2], &state[3],
                                 &state[4], &state[5], &state[6], &state[7]};
  LatentSide* sides[] = {&fresh.k_, &fresh.v_};
  for (int64_t s = 0; s < 2; ++s) {
    LatentSide& side = *sides[s];
    const lm::Tensor* const* t = tensors + 4 * s;
    side.width = t[1]->dim(3);
    side.dim = side.width / heads_per_group;
    side.max_rank = t[1]->dim(2);
    side.codec->allocate(fresh.batch_, fresh.groups_, side.width);
    std::vector<lm::Tensor> codec_state(state.begin() + static_cast<std::ptrdiff_t>(8 + s * per_codec),
                                        state.begin() + static_cast<std::ptrdiff_t>(8 + (s + 1) * per_codec));
    side.codec->restore(codec_state);
    side.basis = t[1]->clone();
    side.mean = t[2]->clone();
    side.ranks = t[3]->clone();
    if (t[2]->dim(3) != side.width || t[3]->dtype() != lm::DType::I32 || t[0]->dtype() != lm::DType::U8) {
      throw base::FormatError(who_s + ": side " + std::to_string(s) + " tensors do not fit together");
    }
    for (int64_t b = 0; b < fresh.batch_; ++b) {
      for (int64_t g = 0; g < fresh.groups_; ++g) {
        const int64_t r = side.rank(b, g);
        if (r < 1 || r > side.max_rank || side.codec->row_bytes(b, g) > t[0]->dim(3)) {
          throw base::FormatError(who_s + ": bad rank or row size in side " + std::to_string(s));
        }
      }
    }
  }
  fresh.capacity_ = offset;
  fresh.fitted_ = true;
  fresh.k_.codes = cache_rows::copy_rows(state[0], offset, offset);
  fresh.v_.codes = cache_rows::copy_rows(state[4], offset, offset);
  fresh.offset_ = offset;
  *this = fresh;
}

std::shared_ptr<lm::KVCache> LatentCache::clone() const { return std::make_shared<LatentCache>(*this); }

}  // namespace veloxquant
