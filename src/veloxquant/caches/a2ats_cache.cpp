#include "veloxquant/caches/a2ats_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <type_traits>

#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/attention/softmax_mass.h"
#include "veloxquant/caches/a2ats_row_scan.h"
#include "veloxquant/caches/a2ats_rows.h"
#include "veloxquant/caches/kaq_mass.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/caches/top_mass_rows.h"
#include "veloxquant/core/column_distances.h"
#include "veloxquant/core/kmeans.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {
constexpr const char* kTypeName = "A2atsCache";

void check_params(const A2atsParams& p) {
  if (p.codebook_bits < 1 || p.codebook_bits > 8) {
    throw QuantizerConfigError("a2ats_codebook_bits must lie in [1, 8] (codes are one byte), got " +
                               std::to_string(p.codebook_bits));
  }
  if (p.sub_dim < 1 || p.sub_dim > 256) {
    throw QuantizerConfigError("a2ats_sub_dim must lie in [1, 256], got " + std::to_string(p.sub_dim));
  }
  if (p.window < 1 || p.window > 65536) {
    throw QuantizerConfigError("a2ats_window must lie in [1, 65536], got " + std::to_string(p.window));
  }
  if (!(p.beta >= 0.0 && p.beta <= 1.0)) {
    throw QuantizerConfigError("a2ats_beta must lie in [0, 1], got " + blocks_tail::exact_double(p.beta));
  }
  if (!(p.retrieval_fraction > 0.0 && p.retrieval_fraction <= 1.0)) {
    throw QuantizerConfigError("a2ats_retrieval_fraction must lie in (0, 1], got " +
                               blocks_tail::exact_double(p.retrieval_fraction));
  }
}

// The f16 codebook [subs, sub, entries] decoded to f32 (SIMD widening; stored transposed, so
// no per-call transposition).
void decode_codebook(const lm::Tensor& book, std::vector<float>& out) {
  out.resize(static_cast<std::size_t>(book.numel()));
  cache_rows::load_f32(book.raw_data(), lm::DType::F16, out.size(), out.data());
}

// [subs, a, b] -> [subs, b, a] (the codebook between its stored and its natural layout).
lm::Tensor swap_last_axes(const lm::Tensor& t) {
  const int64_t subs = t.dim(0), a = t.dim(1), b = t.dim(2);
  lm::Tensor out({subs, b, a}, lm::DType::F16);
  const uint16_t* from = t.data<uint16_t>();
  uint16_t* to = out.data<uint16_t>();
  for (int64_t m = 0; m < subs; ++m) {
    for (int64_t i = 0; i < a; ++i) {
      for (int64_t j = 0; j < b; ++j) to[(m * b + j) * a + i] = from[(m * a + i) * b + j];
    }
  }
  return out;
}
}  // namespace

A2atsCache::A2atsCache(const A2atsParams& params) : p_(params) { check_params(p_); }

int64_t A2atsCache::retrieved_rows(int64_t far) const {
  if (far <= 0) return 0;
  // Never fewer than the window holds: below window / fraction far rows every far row is read (a
  // retrieval pass would save nothing worth its cost at such lengths).
  const auto k = static_cast<int64_t>(std::ceil(p_.retrieval_fraction * static_cast<double>(far) - 1e-9));
  return std::min<int64_t>(far, std::max<int64_t>(k, p_.window));
}

const std::vector<int32_t>& A2atsCache::last_positions(int64_t b, int64_t h) const {
  static const std::vector<int32_t> none;
  const auto i = static_cast<std::size_t>(b * heads_ + h);
  return i < retrieved_.size() ? retrieved_[i] : none;
}

std::size_t A2atsCache::nbytes() const {
  return codebook_.storage_bytes() + codes_.storage_bytes() + far_values_.storage_bytes() + tail_k_.storage_bytes() +
         tail_v_.storage_bytes();
}

void A2atsCache::allocate(const lm::Tensor& keys, const lm::Tensor& values) {
  const int64_t dk = keys.dim(3);
  if (dk % p_.sub_dim != 0) {
    throw QuantizerConfigError("a2ats_sub_dim " + std::to_string(p_.sub_dim) + " must divide head_dim " +
                               std::to_string(dk));
  }
  batch_ = keys.dim(0);
  heads_ = keys.dim(1);
  dk_ = dk;
  dv_ = values.dim(3);
  subs_ = dk / p_.sub_dim;
  entries_ = int64_t{1} << p_.codebook_bits;
  dtype_ = keys.dtype();
  tail_k_ = lm::Tensor({batch_, heads_, p_.window, dk_}, dtype_);
  tail_v_ = lm::Tensor({batch_, heads_, p_.window, dv_}, dtype_);
  codes_ = lm::Tensor({batch_, heads_, 0, subs_}, lm::DType::U8);
  far_values_ = lm::Tensor({batch_, heads_, 0, dv_}, dtype_);
  far_capacity_ = 0;
}

void A2atsCache::ensure_far_rows(int64_t rows) {
  if (rows <= far_capacity_) return;
  const int64_t grown = far_capacity_ + ((rows - far_capacity_ + kGrowthStep - 1) / kGrowthStep) * kGrowthStep;
  codes_ = cache_rows::copy_rows(codes_, far_rows_, grown);
  far_values_ = cache_rows::copy_rows(far_values_, far_rows_, grown);
  far_capacity_ = grown;
}

// The codebook: per sub-vector position m, k-means of the m-th sub-vectors of (a strided sample
// of at most kMaxTrainingPoints of) every row in hand, of every batch row and head. Query-aware:
// each point weighted by (1 - beta) + beta * n * (its KaQ mass / the head's total mass), so rows
// the newest keys attend to pull the centroids toward themselves (the paper's objective is the
// error of the attention score, not of the key).
void A2atsCache::train(const std::vector<std::vector<float>>& pending_keys, int64_t n) {
  const int64_t heads = batch_ * heads_, total = heads * n;
  const int64_t step = std::max<int64_t>(1, (total + kMaxTrainingPoints - 1) / kMaxTrainingPoints);
  std::vector<float> weights_all;
  if (p_.query_aware && p_.beta > 0.0) {
    weights_all.resize(static_cast<std::size_t>(total));
    const int64_t proxies = std::min<int64_t>(n, p_.window);
    std::vector<float> mass(static_cast<std::size_t>(n));
    for (int64_t bh = 0; bh < heads; ++bh) {
      const float* rows = pending_keys[static_cast<std::size_t>(bh)].data();
      kaq_mass(rows, n, rows + (n - proxies) * dk_, proxies, dk_, mass.data());
      double sum = 0.0;
      for (float m : mass) sum += m;
      for (int64_t i = 0; i < n; ++i) {
        const double share = sum > 0.0 ? static_cast<double>(mass[static_cast<std::size_t>(i)]) / sum : 1.0 / double(n);
        weights_all[static_cast<std::size_t>(bh * n + i)] =
            static_cast<float>((1.0 - p_.beta) + p_.beta * static_cast<double>(n) * share);
      }
    }
  }
  const int64_t points = (total + step - 1) / step;
  lm::Tensor natural({subs_, entries_, p_.sub_dim}, lm::DType::F16);
  // Each sub-vector position's k-means is independent (its own points and seed): they run on the
  // pool's threads, each writing its own part of the codebook.
  const auto fit_one = [&](int64_t m) {
    std::vector<float> x(static_cast<std::size_t>(points * p_.sub_dim)), w;
    if (!weights_all.empty()) w.resize(static_cast<std::size_t>(points));
    for (int64_t t = 0, i = 0; t < total; t += step, ++i) {
      const float* row = pending_keys[static_cast<std::size_t>(t / n)].data() + (t % n) * dk_ + m * p_.sub_dim;
      std::copy(row, row + p_.sub_dim, x.begin() + i * p_.sub_dim);
      if (!w.empty()) w[static_cast<std::size_t>(i)] = weights_all[static_cast<std::size_t>(t)];
    }
    const core::KMeansResult fit =
        core::kmeans(x.data(), points, p_.sub_dim, entries_, kKMeansIterations,
                     static_cast<uint64_t>(p_.seed) + static_cast<uint64_t>(m), w.empty() ? nullptr : w.data());
    cache_rows::store_f32(fit.centroids.data(), fit.centroids.size(),
                          natural.raw_data() + m * entries_ * p_.sub_dim * 2, lm::DType::F16);
  };
  base::ThreadPool::global().parallel_for(subs_, [&](int64_t begin, int64_t end) {
    for (int64_t m = begin; m < end; ++m) fit_one(m);
  });
  codebook_ = swap_last_axes(natural);
}

std::vector<float> A2atsCache::centroid(int64_t m, int64_t c) const {
  std::vector<float> out(static_cast<std::size_t>(p_.sub_dim));
  const uint16_t* book = codebook_.data<uint16_t>();
  for (int64_t k = 0; k < p_.sub_dim; ++k) out[k] = base::f16_to_f32(book[(m * p_.sub_dim + k) * entries_ + c]);
  return out;
}

std::byte* A2atsCache::far_value_row(int64_t b, int64_t h, int64_t j) const {
  const auto& st = far_values_.strides();
  return const_cast<std::byte*>(far_values_.raw_data()) +
         (b * st[0] + h * st[1] + j * st[2]) * static_cast<int64_t>(far_values_.element_size());
}

const uint8_t* A2atsCache::codes(int64_t b, int64_t h, int64_t j) const { return row_ptr<uint8_t>(codes_, b, h, j); }

void A2atsCache::decode_key(int64_t b, int64_t h, int64_t j, float* out) const {
  const uint8_t* code = codes(b, h, j);
  const uint16_t* book = codebook_.data<uint16_t>();
  for (int64_t m = 0; m < subs_; ++m) {
    const uint16_t* c = book + m * p_.sub_dim * entries_ + code[m];
    for (int64_t s = 0; s < p_.sub_dim; ++s) out[m * p_.sub_dim + s] = base::f16_to_f32(c[s * entries_]);
  }
}

void A2atsCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  const int64_t s = keys.dim(2), tail = offset_ - tail_start_, n = tail + s, w = p_.window;
  if (n <= w) {  // everything still fits in the exact window
    lm::copy_token_rows(keys, tail_k_, tail);
    lm::copy_token_rows(values, tail_v_, tail);
    offset_ += s;
    return;
  }
  const int64_t spill = n - w, heads = batch_ * heads_;
  thread_local std::vector<float> new_k, new_v;
  cache_rows::widen_to_f32(keys, new_k);
  cache_rows::widen_to_f32(values, new_v);
  if (!trained()) {
    // Every pending row of every head (tail then the call's rows) in f32, once, for the k-means.
    std::vector<std::vector<float>> pk(static_cast<std::size_t>(heads));
    for (int64_t bh = 0; bh < heads; ++bh) {
      pk[bh].resize(static_cast<std::size_t>(n * dk_));
      blocks_tail::gather_pending(tail_k_, dtype_, bh, w, dk_, tail, new_k.data(), s, pk[bh].data());
    }
    train(pk, n);
  }
  ensure_far_rows(far_rows_ + spill);
  thread_local std::vector<float> book_f32;
  decode_codebook(codebook_, book_f32);
  // The calling thread's buffers, by reference: inside the lambda below a thread_local's name
  // would mean the running worker's own (empty) copy.
  const std::vector<float>&book = book_f32, &keys_f32 = new_k, &values_f32 = new_v;
  const int64_t from_tail = std::min(spill, tail), esize = static_cast<int64_t>(lm::dtype_size(dtype_));
  // One kv head's spilled rows: encoded, their values moved, its window shifted. Heads are
  // independent (disjoint rows of every tensor); a prefill chunk's heads run on the pool's threads,
  // a decode step's single rows inline.
  const auto spill_head = [&](int64_t bh) {
    thread_local std::vector<float> spilled;
    spilled.resize(static_cast<std::size_t>(spill * std::max(dk_, dv_)));
    const int64_t b = bh / heads_, h = bh % heads_;
    // Spilled keys in f32 (the oldest pending rows: tail rows first, then call rows).
    cache_rows::load_f32(blocks_tail::head_rows(tail_k_, bh, w, dk_), dtype_, static_cast<std::size_t>(from_tail * dk_),
                         spilled.data());
    std::memcpy(spilled.data() + from_tail * dk_, keys_f32.data() + bh * s * dk_,
                sizeof(float) * static_cast<std::size_t>((spill - from_tail) * dk_));
    for (int64_t i = 0; i < spill; ++i) {
      const float* k = spilled.data() + i * dk_;
      uint8_t* code = row_ptr<uint8_t>(codes_, b, h, far_rows_ + i);
      // Nearest centroid of each sub-vector against the f16 codebook: core::nearest_centroid's
      // double distances and lowest-index ties, one SIMD pass over the transposed centroids.
      for (int64_t m = 0; m < subs_; ++m) {
        code[m] = static_cast<uint8_t>(core::nearest_column(k + m * p_.sub_dim, book.data() + m * p_.sub_dim * entries_,
                                                            entries_, p_.sub_dim, entries_));
      }
    }
    // Spilled values as stored: tail rows byte for byte, call rows from f32.
    std::byte* tv = blocks_tail::head_rows(tail_v_, bh, w, dv_);
    std::memcpy(far_value_row(b, h, far_rows_), tv, static_cast<std::size_t>(from_tail * dv_ * esize));
    if (spill > from_tail) {
      cache_rows::store_f32(values_f32.data() + bh * s * dv_, static_cast<std::size_t>((spill - from_tail) * dv_),
                            far_value_row(b, h, far_rows_ + from_tail), dtype_);
    }
    // The window keeps pending rows [spill, n): surviving tail rows move down, call rows follow.
    for (int which = 0; which < 2; ++which) {
      const int64_t d = which == 0 ? dk_ : dv_;
      lm::Tensor& t = which == 0 ? tail_k_ : tail_v_;
      std::byte* rows = blocks_tail::head_rows(t, bh, w, d);
      const int64_t kept_tail = tail - from_tail;
      if (kept_tail > 0) {
        std::memmove(rows, rows + from_tail * d * esize, static_cast<std::size_t>(kept_tail * d * esize));
      }
      const int64_t first_call = spill > tail ? spill - tail : 0;
      const std::vector<float>& fresh = which == 0 ? keys_f32 : values_f32;
      cache_rows::store_f32(fresh.data() + (bh * s + first_call) * d, static_cast<std::size_t>((s - first_call) * d),
                            rows + kept_tail * d * esize, dtype_);
    }
  };
  base::ThreadPool::global().parallel_for(
      heads,
      [&](int64_t begin, int64_t end) {
        for (int64_t bh = begin; bh < end; ++bh) spill_head(bh);
      },
      spill >= 64 ? 1 : heads);
  far_rows_ += spill;
  tail_start_ += spill;
  offset_ += s;
}

lm::KeysValues A2atsCache::fetch_with(const lm::Tensor& keys, const lm::Tensor& values) const {
  // What attention over this call sees: the retrievable rows (keys decoded from their codes), the
  // exact tail, then the call's own rows as given.
  const int64_t s = keys.dim(2), tail = offset_ - tail_start_, t = far_rows_ + tail + s;
  const lm::DType dtype = keys.dtype();
  lm::Tensor k({batch_, heads_, t, dk_}, dtype), v({batch_, heads_, t, dv_}, dtype);
  std::vector<float> row(static_cast<std::size_t>(std::max(dk_, dv_)));
  thread_local std::vector<float> new_k, new_v;
  cache_rows::widen_to_f32(keys, new_k);
  cache_rows::widen_to_f32(values, new_v);
  const std::size_t ke = k.element_size();
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      std::byte* kh = k.raw_data() + bh * t * dk_ * static_cast<int64_t>(ke);
      std::byte* vh = v.raw_data() + bh * t * dv_ * static_cast<int64_t>(ke);
      for (int64_t j = 0; j < far_rows_; ++j) {
        decode_key(b, h, j, row.data());
        cache_rows::store_f32(row.data(), static_cast<std::size_t>(dk_), kh + j * dk_ * static_cast<int64_t>(ke),
                              dtype);
        cache_rows::load_f32(far_value_row(b, h, j), dtype_, static_cast<std::size_t>(dv_), row.data());
        cache_rows::store_f32(row.data(), static_cast<std::size_t>(dv_), vh + j * dv_ * static_cast<int64_t>(ke),
                              dtype);
      }
      std::vector<float> rows(static_cast<std::size_t>((tail + s) * std::max(dk_, dv_)));
      blocks_tail::gather_pending(tail_k_, dtype_, bh, p_.window, dk_, tail, new_k.data(), s, rows.data());
      cache_rows::store_f32(rows.data(), static_cast<std::size_t>((tail + s) * dk_),
                            kh + far_rows_ * dk_ * static_cast<int64_t>(ke), dtype);
      blocks_tail::gather_pending(tail_v_, dtype_, bh, p_.window, dv_, tail, new_v.data(), s, rows.data());
      cache_rows::store_f32(rows.data(), static_cast<std::size_t>((tail + s) * dv_),
                            vh + far_rows_ * dv_ * static_cast<int64_t>(ke), dtype);
    }
  }
  return {std::move(k), std::move(v)};
}

lm::KeysValues A2atsCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "A2atsCache::update_and_fetch");
  if (!tail_k_.defined()) {
    allocate(keys, values);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "A2atsCache::update_and_fetch");
  }
  lm::KeysValues out = fetch_with(keys, values);
  store(keys, values);
  return out;
}

void A2atsCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("A2atsCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  lm::check_new_tokens(*request.keys, *request.values, "A2atsCache::fused_attention");
  if (!tail_k_.defined()) {
    allocate(*request.keys, *request.values);
  } else {
    cache_rows::check_row_layout(*request.keys, *request.values, {batch_, heads_, dk_, dv_},
                                 "A2atsCache::fused_attention");
  }
  attention::check_fused_shapes("A2atsCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, offset_, out, contiguous_queries);
  // Before this call's rows are stored: the retrieved far rows, the exact tail, the call's rows.
  lm::Tensor call_k_copy, call_v_copy;  // only for tensors whose rows are strided
  const lm::Tensor& call_k = cache_rows::with_contiguous_rows(*request.keys, call_k_copy);
  const lm::Tensor& call_v = cache_rows::with_contiguous_rows(*request.values, call_v_copy);
  thread_local std::vector<float> book;
  const int64_t k_rows = retrieved_rows(far_rows_), tail = offset_ - tail_start_, s = call_k.dim(2);
  // The retrieval's dot products, for the attention pass: one grow-only buffer per thread, shared
  // by every layer's cache (as a member, each layer kept up to 16 MiB of a prefill's scores).
  thread_local std::vector<float> far_dots;
  bool dots_valid = false;
  if (far_rows_ > 0) {
    decode_codebook(codebook_, book);                    // [subs, sub, entries], the tables' layout
    dots_valid = retrieve(call, book.data(), far_dots);  // every far row when k_rows == far_rows_
  } else {
    retrieved_.assign(static_cast<std::size_t>(batch_ * heads_), {});
  }
  for (std::vector<int32_t>& pos : retrieved_) {
    for (int64_t t = 0; t < tail + s; ++t) pos.push_back(static_cast<int32_t>(tail_start_ + t));
  }
  A2atsCallRows parts;
  parts.centroids = book.data();
  parts.subs = subs_;
  parts.entries = entries_;
  parts.sub = p_.sub_dim;
  parts.heads = heads_;
  parts.codes = &codes_;
  parts.far_values = &far_values_;
  parts.tail_k = &tail_k_;
  parts.tail_v = &tail_v_;
  parts.call_k = &call_k;
  parts.call_v = &call_v;
  parts.far = k_rows;
  parts.tail = tail;
  parts.s = s;
  parts.positions = &retrieved_;
  if (dots_valid) {
    parts.far_dots = far_dots.data();
    parts.queries = call.queries;
    parts.far_rows = far_rows_;
  }
  const A2atsRows rows(parts);
  const attention::RowSource* segments[] = {&rows};
  const int n = 1;
  attention::attend(call, segments, n, attention::request_pool(request));
  store(*request.keys, *request.values);
}

namespace {

// Query heads per kv head whose row pass is shared (one read of a row's codes for all of them);
// larger groups take one pass per query head.
constexpr int64_t kMaxRetrievalGroup = 16;

// The row pass of a group wider than the interleaved tables (more than kA2atsScanLanes query
// heads; tables: the heads' own tables back to back, subs x entries each): every far row's table
// sum per head, stored at dots + g * dots_head_stride + j when dots is given, scaled into
// logit[g * rows.n + j]; then each head's softmax over the rows added to their mass.
void scan_wide_group(const A2atsTables& tables, const A2atsCodeRows& rows, int64_t group, float scale, float* dots,
                     int64_t dots_head_stride, float* logit, double* mass) {
  const int64_t subs = tables.subs, entries = tables.entries, far = rows.n;
  float top[kMaxRetrievalGroup];
  const bool grouped = group <= kMaxRetrievalGroup;
  for (int64_t g0 = 0; g0 < group; g0 += grouped ? group : 1) {
    const int64_t gn = grouped ? group : 1;
    for (int64_t g = 0; g < gn; ++g) top[g] = -INFINITY;
    const uint8_t* code = rows.codes;
    for (int64_t j = 0; j < far; ++j, code += rows.stride) {
      for (int64_t g = 0; g < gn; ++g) {
        const float* t = tables.lut4 + (g0 + g) * subs * entries;
        float dot = 0.0f;
        for (int64_t m = 0; m < subs; ++m, t += entries) dot += t[code[m]];
        if (dots != nullptr) dots[(g0 + g) * dots_head_stride + j] = dot;
        const float l = dot * scale;
        logit[(g0 + g) * far + j] = l;
        top[g] = std::max(top[g], l);
      }
    }
    // Each query head's softmax over the far rows, added to the rows' mass (SIMD exp).
    for (int64_t g = 0; g < gn; ++g) attention::kernels::add_softmax_mass(logit + (g0 + g) * far, far, top[g], mass);
  }
}

}  // namespace

// The paper's retrieval: approximate scores of every far row through the codes (one lookup table
// per query), their softmax per query head and query, summed over the kv head's query heads and
// the call's queries; the retrieved_rows(far) rows with the most mass, ties to the older row.
bool A2atsCache::retrieve(const attention::AttentionCall& call, const float* centroids, std::vector<float>& far_dots) {
  const int64_t k_rows = retrieved_rows(far_rows_), group = call.q_heads / heads_;
  if (k_rows == far_rows_) {  // nothing to choose
    retrieved_.assign(static_cast<std::size_t>(batch_ * heads_),
                      std::vector<int32_t>(static_cast<std::size_t>(far_rows_)));
    for (auto& chosen : retrieved_) std::iota(chosen.begin(), chosen.end(), 0);
    return false;
  }
  retrieved_.resize(static_cast<std::size_t>(batch_ * heads_));
  constexpr int64_t kLanes = kA2atsScanLanes;
  // The scores are kept for the attention pass (which then builds no table of its own) while
  // they fit in 16 Mi floats (64 MiB: every chunk of a 4k prefill, always for decode) or take no
  // more room than the tables that pass would otherwise prepare per query row (subs x entries
  // floats each, in the attention driver's grow-only per-thread buffer, 39 MiB for a 512-row
  // chunk at the defaults). Longer chunks build every query's table twice. The cap was 4 Mi
  // floats per layer's cache (896 far rows per 512-row chunk): the 4k prefill's last five chunks
  // rebuilt their tables and then held both buffers.
  const int64_t dot_rows = batch_ * call.q_heads * call.n_queries;
  const bool keep = dot_rows * far_rows_ <= std::max(int64_t{16} << 20, dot_rows * subs_ * entries_);
  if (keep && far_dots.size() < static_cast<std::size_t>(dot_rows * far_rows_)) {
    far_dots.resize(static_cast<std::size_t>(dot_rows * far_rows_));
  }
  // Geometry and pointers in locals: the stores below cannot make the compiler reload them.
  const int64_t subs = subs_, entries = entries_, far = far_rows_, stride = codes_.strides()[2];
  const float scale = call.scale;
  // One kv head's retrieval; the heads run on the pool's threads (disjoint far_dots rows and
  // position lists), as the attention after them does.
  const auto one_head = [&](int64_t bh) {
    const int64_t b = bh / heads_, h = bh % heads_;
    // Grow-only per-thread buffers: no allocation per decode step once a context has been seen.
    thread_local std::vector<float> lut, lut4, logit;
    thread_local std::vector<double> mass;
    thread_local std::vector<uint64_t> keys, candidates;
    lut.resize(static_cast<std::size_t>(group * subs * entries));
    lut4.resize(static_cast<std::size_t>(kLanes * subs * entries));
    logit.resize(static_cast<std::size_t>(group * far));
    // resize + fill, not assign: assign(n, v) past the capacity reallocates to exactly n, so a
    // context growing by one row per step would allocate at every step.
    mass.resize(static_cast<std::size_t>(far));
    std::fill(mass.begin(), mass.end(), 0.0);
    for (int64_t i = 0; i < call.n_queries; ++i) {
      // The tables of the group's query heads, then one pass over the far rows for all of them:
      // each row's code bytes are read once for the group (the same adds, in the same order,
      // as a pass per query head).
      const float* group_queries[kLanes] = {};
      for (int64_t g = 0; g < std::min(group, kLanes); ++g) {
        group_queries[g] = call.queries + ((b * call.q_heads + h * group + g) * call.n_queries + i) * dk_;
      }
      // The group's tables built together and interleaved (caches/a2ats_row_scan.h), where the
      // group and the table width allow it; otherwise one table per query head.
      const bool interleaved = group <= kLanes && a2ats_group_tables(centroids, subs, entries, p_.sub_dim,
                                                                     group_queries, group, lut4.data());
      if (!interleaved) {
        for (int64_t g = 0; g < group; ++g) {
          const float* query = call.queries + ((b * call.q_heads + h * group + g) * call.n_queries + i) * dk_;
          a2ats_lookup_table(centroids, subs, entries, p_.sub_dim, query, lut.data() + g * subs * entries);
        }
      }
      if (group <= kLanes) {
        // Up to four query heads (SmolLM2's 3): their tables interleaved, lut4[(m * entries + c) *
        // 4 + g], so one code byte addresses every head's entry on one cache line — the same
        // adds in the same order per head as the pass below (bit for bit); the retrieval pass
        // fell from 6.5M to 4.4M instructions (8 decode steps, ctx 1024, one layer).
        if (!interleaved) a2ats_interleave_tables(lut.data(), group, subs * entries, lut4.data());
        // The row pass (caches/a2ats_row_scan.h): the same adds in the same order as a pass
        // per head, the per-head scale, stores and maximum a vector of rows at a time.
        float top[kLanes];
        float* dots_of[kLanes] = {};
        float* logit_of[kLanes] = {};
        for (int64_t g = 0; g < group; ++g) {
          if (keep) dots_of[g] = far_dots.data() + ((b * call.q_heads + h * group + g) * call.n_queries + i) * far;
          logit_of[g] = logit.data() + g * far;
        }
        a2ats_scan_rows({lut4.data(), subs, entries}, {codes(b, h, 0), stride, far}, group, scale,
                        {keep ? dots_of : nullptr, logit_of, top});
        for (int64_t g = 0; g < group; ++g) {
          attention::kernels::add_softmax_mass(logit.data() + g * far, far, top[g], mass.data());
        }
        continue;
      }
      float* dots = keep ? far_dots.data() + ((b * call.q_heads + h * group) * call.n_queries + i) * far : nullptr;
      scan_wide_group({lut.data(), subs, entries}, {codes(b, h, 0), stride, far}, group, scale, dots,
                      call.n_queries * far, logit.data(), mass.data());
    }
    // The k_rows rows with the most mass, ties to the older row, ascending (a threshold by
    // radix select, caches/top_mass_rows.h: the rows a stable sort by mass would put first).
    std::vector<int32_t>& chosen = retrieved_[static_cast<std::size_t>(bh)];
    chosen.resize(static_cast<std::size_t>(k_rows));
    top_mass_rows(mass.data(), far, k_rows, keys, candidates, chosen.data());
  };
  base::ThreadPool::global().parallel_for(batch_ * heads_, [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; ++bh) one_head(bh);
  });
  return keep;
}

std::vector<lm::Tensor> A2atsCache::state() const {
  if (!tail_k_.defined()) return {};
  const int64_t tail = offset_ - tail_start_;
  std::vector<lm::Tensor> out = {codes_.slice(2, 0, far_rows_), far_values_.slice(2, 0, far_rows_),
                                 tail_k_.slice(2, 0, tail), tail_v_.slice(2, 0, tail)};
  if (trained()) out.push_back(swap_last_axes(codebook_));  // saved in its natural layout
  return out;
}

std::vector<std::string> A2atsCache::meta_state() const {
  return {std::to_string(p_.codebook_bits),
          std::to_string(p_.sub_dim),
          std::to_string(p_.window),
          p_.query_aware ? "1" : "0",
          blocks_tail::exact_double(p_.beta),
          blocks_tail::exact_double(p_.retrieval_fraction),
          std::to_string(p_.seed),
          std::to_string(offset_),
          std::to_string(far_rows_),
          std::string(lm::dtype_name(dtype_))};
}

void A2atsCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "A2atsCache::from_state";
  if (meta.size() != 10) {
    throw base::FormatError(std::string(who) + ": expected 10 meta entries, got " + std::to_string(meta.size()));
  }
  const auto integer = [&](std::size_t i, const char* what) { return cache_rows::parse_meta_int(meta[i], who, what); };
  A2atsParams p;
  p.codebook_bits = static_cast<int>(integer(0, "codebook bits"));
  p.sub_dim = static_cast<int>(integer(1, "sub-vector dim"));
  p.window = static_cast<int>(integer(2, "window"));
  p.query_aware = integer(3, "query-aware flag") != 0;
  p.beta = blocks_tail::parse_meta_double(meta[4], who, "beta");
  p.retrieval_fraction = blocks_tail::parse_meta_double(meta[5], who, "retrieval fraction");
  p.seed = integer(6, "seed");
  const int64_t offset = integer(7, "offset"), far = integer(8, "far rows");
  std::optional<A2atsCache> made;
  try {
    made.emplace(p);
  } catch (const QuantizerConfigError& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  A2atsCache& fresh = *made;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[7]);
    *this = std::move(fresh);
    return;
  }
  if (state.size() != 4 && state.size() != 5) {
    throw base::FormatError(std::string(who) + ": expected 4 or 5 tensors, got " + std::to_string(state.size()));
  }
  const int64_t tail = offset - far;
  if (far < 0 || tail < 0 || tail > p.window || (far > 0) != (state.size() == 5)) {
    throw base::FormatError(std::string(who) + ": inconsistent offset " + meta[7] + " / far rows " + meta[8]);
  }
  blocks_tail::check_tail_state(state[2], state[3], tail, who, meta[7], meta[8]);
  lm::DType dtype{};
  try {
    dtype = lm::parse_float_dtype(meta[9]);
    fresh.allocate(state[2].astype(dtype), state[3].astype(dtype));
  } catch (const QuantizerConfigError& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  } catch (const base::InvalidArgument& e) {
    throw base::FormatError(std::string(who) + ": " + e.what());
  }
  const lm::Tensor* like[] = {&fresh.codes_, &fresh.far_values_};
  for (int i = 0; i < 2; ++i) {
    const lm::Tensor& s = state[static_cast<std::size_t>(i)];
    if (s.ndim() != 4 || s.dim(0) != fresh.batch_ || s.dim(1) != fresh.heads_ || s.dim(2) != far ||
        s.dim(3) != like[i]->dim(3) || (i == 0 && s.dtype() != lm::DType::U8)) {
      throw base::FormatError(std::string(who) + ": tensor " + std::to_string(i) + " " + lm::shape_text(s.shape()) +
                              " does not match " + std::to_string(far) + " rows");
    }
  }
  if (state.size() == 5) {
    const lm::Tensor& book = state[4];
    if (book.ndim() != 3 || book.dim(0) != fresh.subs_ || book.dim(1) != fresh.entries_ || book.dim(2) != p.sub_dim ||
        book.dtype() != lm::DType::F16) {
      throw base::FormatError(std::string(who) + ": codebook " + lm::shape_text(book.shape()) + " does not match");
    }
    fresh.codebook_ = swap_last_axes(book.contiguous());
  }
  fresh.far_rows_ = far;
  fresh.far_capacity_ = far;
  fresh.codes_ = cache_rows::copy_rows(state[0], far, far);
  fresh.far_values_ = cache_rows::copy_rows(state[1].astype(dtype), far, far);
  lm::copy_token_rows(state[2].astype(dtype), fresh.tail_k_, 0);
  lm::copy_token_rows(state[3].astype(dtype), fresh.tail_v_, 0);
  fresh.offset_ = offset;
  fresh.tail_start_ = far;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> A2atsCache::clone() const {
  auto copy = std::make_shared<A2atsCache>(*this);
  for (lm::Tensor* t : {&copy->codebook_, &copy->codes_, &copy->far_values_, &copy->tail_k_, &copy->tail_v_}) {
    if (t->defined()) *t = t->clone();
  }
  return copy;
}

A2atsParams a2ats_params(const KVCacheConfig& config) {
  const A2atsOptions& o = config.options<A2atsOptions>();
  A2atsParams p;
  p.codebook_bits = o.a2ats_codebook_bits;
  p.sub_dim = o.a2ats_sub_dim;
  p.window = o.a2ats_window;
  p.query_aware = o.a2ats_use_query_aware;
  p.beta = o.a2ats_beta;
  p.retrieval_fraction = o.a2ats_retrieval_fraction;
  p.seed = config.seed;
  return p;
}

void validate_a2ats_options(const KVCacheConfig& config) {
  const A2atsOptions& o = config.options<A2atsOptions>();
  check_params(a2ats_params(config));
  if (config.head_dim % o.a2ats_sub_dim != 0) {
    throw QuantizerConfigError("a2ats_sub_dim " + std::to_string(o.a2ats_sub_dim) + " must divide head_dim " +
                               std::to_string(config.head_dim));
  }
  if (o.a2ats_b < 0) throw QuantizerConfigError("a2ats_b must be >= 0, got " + std::to_string(o.a2ats_b));
  if (!(o.a2ats_rope_base > 0.0) || !std::isfinite(o.a2ats_rope_base)) {
    throw QuantizerConfigError("a2ats_rope_base must be a positive number, got " +
                               blocks_tail::exact_double(o.a2ats_rope_base));
  }
  const std::pair<const char*, const std::string*> none_only[] = {{"a2ats_rope_scaling", &o.a2ats_rope_scaling},
                                                                  {"a2ats_query_h", &o.a2ats_query_h},
                                                                  {"a2ats_codebook", &o.a2ats_codebook}};
  for (const auto& [name, value] : none_only) {
    if (!value->empty() && *value != "None") {
      throw QuantizerConfigError(std::string(name) +
                                 " must be None (only the codebook trained at prefill is supported), got '" + *value +
                                 "'");
    }
  }
}

std::shared_ptr<lm::KVCache> make_a2ats_cache(const KVCacheConfig& config) {
  validate_a2ats_options(config);
  return std::make_shared<A2atsCache>(a2ats_params(config));
}

MethodDescriptor a2ats_method() {
  MethodDescriptor m;
  m.name = "a2ats";
  m.family = "hybrid";
  m.is_servable = true;
  m.capabilities = {.trimmable = false, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Retrieval-based: keys outside an exact a2ats_window are product-VQ codes (query-aware k-means codebook "
      "trained at prefill); each call scores them by lookup tables and attends over the top "
      "a2ats_retrieval_fraction, the window and its own rows (values kept exact)";
  m.paper =
      "A2ATS: Retrieval-Based KV Cache Reduction via Windowed Rotary Position Embedding and Query-Aware Vector "
      "Quantization (He et al., ACL 2025 Findings, arXiv 2502.12665)";
  m.deviations =
      "One memory: the values of far rows are resident in the input dtype and their exact keys are not kept (the "
      "paper offloads exact keys and values to the host and re-reads the retrieved ones), so retrieved rows are "
      "scored from their codes. Retrieval per kv head (approximate attention mass summed over its query heads and "
      "the call's queries), so a prefill chunk shares one retrieval; the call's own rows and the window are exact. "
      "update_and_fetch (the non-fused path) returns every row, far keys decoded. No windowed RoPE: the host hands "
      "over rotated keys (the original also rotated far keys, spec §6); a2ats_b and a2ats_rope_base are validated "
      "and not read. Query-aware VQ = KaQ-weighted k-means (weights (1 - beta) + beta * n * mass share, the newest "
      "a2ats_window keys as proxy queries), one codebook per layer trained once on at most 2048 rows in hand when "
      "the first row leaves the window, seeded by the config seed; a2ats_query_h, a2ats_codebook and "
      "a2ats_rope_scaling must be None. Not trimmable.";
  m.docs = "docs/methods/a2ats.md";
  m.fields = {
      option_field("a2ats_codebook_bits", &A2atsOptions::a2ats_codebook_bits,
                   "Bits per key sub-vector code (2^bits centroids per sub-vector position)", 1, 8),
      option_field("a2ats_sub_dim", &A2atsOptions::a2ats_sub_dim, "Coordinates per VQ sub-vector; must divide head_dim",
                   1, 256),
      option_field("a2ats_window", &A2atsOptions::a2ats_window,
                   "Newest rows kept exact; also the fewest far rows a call retrieves", 1, 65536),
      option_field("a2ats_b", &A2atsOptions::a2ats_b, "Windowed-RoPE offset (accepted, not read: keys arrive rotated)",
                   0, 1 << 30),
      option_field("a2ats_use_query_aware", &A2atsOptions::a2ats_use_query_aware,
                   "Weight the codebook's k-means by key-as-query attention mass"),
      option_field("a2ats_beta", &A2atsOptions::a2ats_beta,
                   "Share of the query-aware weight in [0, 1] (0 = plain k-means)"),
      option_field(
          "a2ats_retrieval_fraction", &A2atsOptions::a2ats_retrieval_fraction,
          "Fraction of the far rows each attention call retrieves (top approximate attention mass), in (0, 1]"),
      option_field("a2ats_rope_base", &A2atsOptions::a2ats_rope_base,
                   "RoPE base of the windowed RoPE (accepted, not read: keys arrive rotated)"),
      option_field("a2ats_rope_scaling", &A2atsOptions::a2ats_rope_scaling, "None only"),
      option_field("a2ats_query_h", &A2atsOptions::a2ats_query_h,
                   "None only (a calibrated query second-moment matrix is not supported)"),
      option_field("a2ats_codebook", &A2atsOptions::a2ats_codebook, "None only (the codebook is trained at prefill)"),
  };
  m.validate = validate_a2ats_options;
  m.make_serving = make_a2ats_cache;
  m.cache_type_name = kTypeName;
  // Placeholder parameters: from_state() rebuilds every one of them from meta_state().
  m.make_restorable = [] { return std::make_shared<A2atsCache>(A2atsParams{}); };
  return m;
}

}  // namespace veloxquant
