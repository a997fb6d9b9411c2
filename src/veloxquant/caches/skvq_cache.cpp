#include "veloxquant/caches/skvq_cache.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/caches/skvq_rows.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {

constexpr const char* kTypeName = "SkvqCache";
constexpr int kMaxRows = 1 << 24;  // bound of window / n_sink: buffers grow toward them

std::byte* head_row(lm::Tensor& t, int64_t b, int64_t h, int64_t row) {
  return t.raw_data() +
         (b * t.strides()[0] + h * t.strides()[1] + row * t.strides()[2]) * static_cast<int64_t>(t.element_size());
}
const std::byte* head_row(const lm::Tensor& t, int64_t b, int64_t h, int64_t row) {
  return t.raw_data() +
         (b * t.strides()[0] + h * t.strides()[1] + row * t.strides()[2]) * static_cast<int64_t>(t.element_size());
}

// Rows [t0, t0 + m) of a [B, H, S, D] tensor with contiguous rows into rows [at, at + m) of dst
// [B, H, cap, D], converting to dst's dtype (the m rows in one conversion when they lie back to
// back, as the host's tensors do).
void copy_token_range(const lm::Tensor& src, int64_t t0, int64_t m, lm::Tensor& dst, int64_t at) {
  if (m <= 0) return;
  const int64_t batch = src.dim(0), heads = src.dim(1), d = src.dim(3);
  const bool packed = src.strides()[2] == d;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      if (packed) {
        lm::convert_elements(head_row(src, b, h, t0), src.dtype(), head_row(dst, b, h, at), dst.dtype(),
                             static_cast<std::size_t>(m * d));
        continue;
      }
      for (int64_t r = 0; r < m; ++r) {
        lm::convert_elements(head_row(src, b, h, t0 + r), src.dtype(), head_row(dst, b, h, at + r), dst.dtype(),
                             static_cast<std::size_t>(d));
      }
    }
  }
}

// Capacity after growing `current` to hold `rows`: whole 256-row steps, capped at `limit`.
int64_t grown_capacity(int64_t current, int64_t rows, int64_t limit) {
  if (rows <= current) return current;
  const int64_t step = SkvqCache::kGrowthStep;
  return std::min(limit, current + ((rows - current + step - 1) / step) * step);
}

bool is_permutation(const int32_t* p, int64_t n) {
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] < 0 || p[i] >= n || seen[static_cast<std::size_t>(p[i])]) return false;
    seen[static_cast<std::size_t>(p[i])] = true;
  }
  return true;
}

}  // namespace

void validate_skvq_options(const SkvqOptions& o) {
  if (o.skvq_bits_key < 1 || o.skvq_bits_key > 8) {
    throw QuantizerConfigError("skvq_bits_key must lie in [1, 8], got " + std::to_string(o.skvq_bits_key));
  }
  if (o.skvq_bits_value < 1 || o.skvq_bits_value > 8) {
    throw QuantizerConfigError("skvq_bits_value must lie in [1, 8], got " + std::to_string(o.skvq_bits_value));
  }
  if (o.skvq_group_size < 1 || o.skvq_group_size > 4096) {
    throw QuantizerConfigError("skvq_group_size must lie in [1, 4096], got " + std::to_string(o.skvq_group_size));
  }
  if (o.skvq_window < 0 || o.skvq_window > kMaxRows) {
    throw QuantizerConfigError("skvq_window must lie in [0, " + std::to_string(kMaxRows) + "], got " +
                               std::to_string(o.skvq_window));
  }
  if (o.skvq_n_sink < 0 || o.skvq_n_sink > kMaxRows) {
    throw QuantizerConfigError("skvq_n_sink must lie in [0, " + std::to_string(kMaxRows) + "], got " +
                               std::to_string(o.skvq_n_sink));
  }
  if (!(o.skvq_clip_alpha > 0.0 && o.skvq_clip_alpha <= 1.0)) {
    throw QuantizerConfigError("skvq_clip_alpha must lie in (0, 1], got " + std::to_string(o.skvq_clip_alpha));
  }
  if (o.skvq_max_ctx < 1) {
    throw QuantizerConfigError("skvq_max_ctx must be >= 1, got " + std::to_string(o.skvq_max_ctx));
  }
}

void validate_skvq_options(const KVCacheConfig& config) { validate_skvq_options(config.options<SkvqOptions>()); }

SkvqCache::SkvqCache(const SkvqOptions& options) : options_(options) { validate_skvq_options(options); }

int64_t SkvqCache::quantized_rows_for(int64_t offset, int64_t n_sink, int64_t window) {
  const int64_t beyond = offset - n_sink - window;
  return beyond <= 0 ? 0 : beyond / kFlushRows * kFlushRows;
}

std::size_t SkvqCache::nbytes() const {
  return sink_k_.storage_bytes() + sink_v_.storage_bytes() + window_k_.storage_bytes() + window_v_.storage_bytes() +
         key_codes_.storage_bytes() + value_codes_.storage_bytes() + key_order_.storage_bytes() +
         value_order_.storage_bytes();
}

const int32_t* SkvqCache::key_order(int64_t b, int64_t h) const { return row_ptr<int32_t>(key_order_, b, h, 0); }
const int32_t* SkvqCache::value_order(int64_t b, int64_t h) const { return row_ptr<int32_t>(value_order_, b, h, 0); }

void SkvqCache::allocate(int64_t batch, int64_t heads, int64_t dk, int64_t dv, lm::DType dtype) {
  batch_ = batch;
  heads_ = heads;
  dk_ = dk;
  dv_ = dv;
  dtype_ = dtype;
  key_layout_ = skvq::code_layout(static_cast<int>(dk), options_.skvq_bits_key, options_.skvq_group_size);
  value_layout_ = skvq::code_layout(static_cast<int>(dv), options_.skvq_bits_value, options_.skvq_group_size);
  sink_k_ = lm::Tensor({batch, heads, 0, dk}, dtype);
  sink_v_ = lm::Tensor({batch, heads, 0, dv}, dtype);
  window_k_ = lm::Tensor({batch, heads, 0, dk}, dtype);
  window_v_ = lm::Tensor({batch, heads, 0, dv}, dtype);
  key_codes_ = lm::Tensor({batch, heads, 0, key_layout_.width()}, lm::DType::U32);
  value_codes_ = lm::Tensor({batch, heads, 0, value_layout_.width()}, lm::DType::U32);
  key_order_ = lm::Tensor({batch, heads, 1, dk}, lm::DType::I32);
  value_order_ = lm::Tensor({batch, heads, 1, dv}, lm::DType::I32);
  reset_orders();
  capacity_ = 0;
}

void SkvqCache::reset_orders() {
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      std::iota(row_ptr<int32_t>(key_order_, b, h, 0), row_ptr<int32_t>(key_order_, b, h, 0) + dk_, 0);
      std::iota(row_ptr<int32_t>(value_order_, b, h, 0), row_ptr<int32_t>(value_order_, b, h, 0) + dv_, 0);
    }
  }
  ordered_ = false;
}

void SkvqCache::ensure_code_rows(int64_t rows) {
  if (rows <= capacity_) return;
  const int64_t grown = grown_capacity(capacity_, rows, INT64_MAX);
  key_codes_ = cache_rows::copy_rows(key_codes_, quantized_, grown);
  value_codes_ = cache_rows::copy_rows(value_codes_, quantized_, grown);
  capacity_ = grown;
}

void SkvqCache::ensure_window_rows(int64_t rows) {
  const int64_t cap = window_k_.dim(2);
  const int64_t grown = grown_capacity(cap, rows, options_.skvq_window + kFlushRows);
  if (grown == cap) return;
  window_k_ = cache_rows::copy_rows(window_k_, window_rows(), grown);
  window_v_ = cache_rows::copy_rows(window_v_, window_rows(), grown);
}

void SkvqCache::ensure_sink_rows(int64_t rows) {
  const int64_t cap = sink_k_.dim(2);
  const int64_t grown = grown_capacity(cap, rows, options_.skvq_n_sink);
  if (grown == cap) return;
  sink_k_ = cache_rows::copy_rows(sink_k_, sink_rows(), grown);
  sink_v_ = cache_rows::copy_rows(sink_v_, sink_rows(), grown);
}

lm::KeysValues SkvqCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

void SkvqCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "SkvqCache::update_and_fetch");
  if (!window_k_.defined()) {
    allocate(keys.dim(0), keys.dim(1), keys.dim(3), values.dim(3), keys.dtype());
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "SkvqCache::update_and_fetch");
  }
  lm::Tensor k_copy, v_copy;  // only for tensors whose rows are strided
  const lm::Tensor& k = cache_rows::with_contiguous_rows(keys, k_copy);
  const lm::Tensor& v = cache_rows::with_contiguous_rows(values, v_copy);
  const int64_t s = k.dim(2), n_sink = options_.skvq_n_sink, full = options_.skvq_window + kFlushRows;
  int64_t t = std::clamp<int64_t>(n_sink - offset_, 0, s);  // the first n_sink tokens are sinks
  if (t > 0) {
    ensure_sink_rows(offset_ + t);
    copy_token_range(k, 0, t, sink_k_, offset_);
    copy_token_range(v, 0, t, sink_v_, offset_);
    offset_ += t;
  }
  while (t < s) {  // the rest enters the window; a full window flushes its oldest block
    const int64_t at = window_rows(), m = std::min(s - t, full - at);
    ensure_window_rows(at + m);
    copy_token_range(k, t, m, window_k_, at);
    copy_token_range(v, t, m, window_v_, at);
    offset_ += m;
    t += m;
    if (window_rows() == full) flush();
  }
}

void SkvqCache::flush() {
  ensure_code_rows(quantized_ + kFlushRows);
  const bool reorder = options_.skvq_reorder;
  const bool fix_orders = reorder && !ordered_;
  const int64_t kept = window_rows() - kFlushRows, bhs = batch_ * heads_;
  // The block's rows of every head in f32, so that the rows can be coded across the pool (each
  // into its own code row; the result does not depend on the split). The buffers are this
  // thread's, reached from the pool body through plain pointers.
  thread_local std::vector<float> block_k, block_v;
  block_k.resize(static_cast<std::size_t>(bhs * kFlushRows * dk_));
  block_v.resize(static_cast<std::size_t>(bhs * kFlushRows * dv_));
  float* const rk = block_k.data();
  float* const rv = block_v.data();
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      float* k = rk + bh * kFlushRows * dk_;
      float* v = rv + bh * kFlushRows * dv_;
      cache_rows::load_f32(head_row(window_k_, b, h, 0), dtype_, static_cast<std::size_t>(kFlushRows * dk_), k);
      cache_rows::load_f32(head_row(window_v_, b, h, 0), dtype_, static_cast<std::size_t>(kFlushRows * dv_), v);
      if (fix_orders) {  // the first flushed block fixes the head's orders for good
        skvq::range_order(k, kFlushRows, dk_, row_ptr<int32_t>(key_order_, b, h, 0));
        skvq::range_order(v, kFlushRows, dv_, row_ptr<int32_t>(value_order_, b, h, 0));
      }
    }
  }
  // Row r of head bh is item bh * kFlushRows + r: a key row and a value row coded per item
  // (the clip search: ~11 x Dk candidate codes each, the hot part of a prefill).
  base::ThreadPool::global().parallel_for(
      bhs * kFlushRows,
      [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
          const int64_t bh = item / kFlushRows, r = item % kFlushRows, b = bh / heads_, h = bh % heads_;
          const int32_t* korder = reorder ? row_ptr<int32_t>(key_order_, b, h, 0) : nullptr;
          const int32_t* vorder = reorder ? row_ptr<int32_t>(value_order_, b, h, 0) : nullptr;
          skvq::encode_row(rk + item * dk_, korder, key_layout_, options_.skvq_clip_search, options_.skvq_clip_alpha,
                           row_ptr<uint32_t>(key_codes_, b, h, quantized_ + r));
          skvq::encode_row(rv + item * dv_, vorder, value_layout_, options_.skvq_clip_search, options_.skvq_clip_alpha,
                           row_ptr<uint32_t>(value_codes_, b, h, quantized_ + r));
        }
      },
      8);
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {  // the window's remaining rows move to its front
      std::memmove(head_row(window_k_, b, h, 0), head_row(window_k_, b, h, kFlushRows),
                   static_cast<std::size_t>(kept * dk_) * window_k_.element_size());
      std::memmove(head_row(window_v_, b, h, 0), head_row(window_v_, b, h, kFlushRows),
                   static_cast<std::size_t>(kept * dv_) * window_v_.element_size());
    }
  }
  if (fix_orders) ordered_ = true;
  quantized_ += kFlushRows;
}

void SkvqCache::decode_key(int64_t b, int64_t h, int64_t q, float* out) const {
  skvq::decode_row(row_ptr<uint32_t>(key_codes_, b, h, q), options_.skvq_reorder ? key_order(b, h) : nullptr,
                   key_layout_, out);
}

void SkvqCache::decode_value(int64_t b, int64_t h, int64_t q, float* out) const {
  skvq::decode_row(row_ptr<uint32_t>(value_codes_, b, h, q), options_.skvq_reorder ? value_order(b, h) : nullptr,
                   value_layout_, out);
}

lm::KeysValues SkvqCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  std::vector<float> rk(static_cast<std::size_t>(dk_)), rv(static_cast<std::size_t>(dv_));
  const int64_t sinks = sink_rows(), win = window_rows(), first_window = frontier();
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      lm::convert_elements(head_row(sink_k_, b, h, 0), dtype_, head_row(k, b, h, 0), dtype,
                           static_cast<std::size_t>(sinks * dk_));
      lm::convert_elements(head_row(sink_v_, b, h, 0), dtype_, head_row(v, b, h, 0), dtype,
                           static_cast<std::size_t>(sinks * dv_));
      for (int64_t q = 0; q < quantized_; ++q) {
        decode_key(b, h, q, rk.data());
        decode_value(b, h, q, rv.data());
        cache_rows::store_f32(rk.data(), rk.size(), head_row(k, b, h, options_.skvq_n_sink + q), dtype);
        cache_rows::store_f32(rv.data(), rv.size(), head_row(v, b, h, options_.skvq_n_sink + q), dtype);
      }
      if (win > 0) {
        lm::convert_elements(head_row(window_k_, b, h, 0), dtype_, head_row(k, b, h, first_window), dtype,
                             static_cast<std::size_t>(win * dk_));
        lm::convert_elements(head_row(window_v_, b, h, 0), dtype_, head_row(v, b, h, first_window), dtype,
                             static_cast<std::size_t>(win * dv_));
      }
    }
  }
  return {std::move(k), std::move(v)};
}

void SkvqCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("SkvqCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("SkvqCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  const attention::DtypeRowSource sinks(sink_k_, sink_v_, sink_rows(), 0);
  const bool reorder = options_.skvq_reorder;
  const SkvqRows quantized(key_codes_, value_codes_, reorder ? &key_order_ : nullptr, reorder ? &value_order_ : nullptr,
                           key_layout_, value_layout_, quantized_, options_.skvq_n_sink);
  const attention::DtypeRowSource window(window_k_, window_v_, window_rows(), frontier());
  const attention::RowSource* segments[3];
  int n = 0;
  if (sink_rows() > 0) segments[n++] = &sinks;
  if (quantized_ > 0) segments[n++] = &quantized;
  if (window_rows() > 0) segments[n++] = &window;
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, n, attention::request_pool(request));
}

int64_t SkvqCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("SkvqCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = std::min(n, offset_);
  const int64_t new_offset = offset_ - removed;
  const int64_t new_quantized = quantized_rows_for(new_offset, options_.skvq_n_sink, options_.skvq_window);
  if (new_quantized < quantized_) {
    // Quantized rows [new_quantized, quantized_) that survive go back to the window, decoded, in
    // front of the old window's surviving rows.
    const int64_t new_frontier = options_.skvq_n_sink + new_quantized;
    const int64_t reopened = std::max<int64_t>(0, std::min(frontier(), new_offset) - new_frontier);
    const int64_t old_kept = std::max<int64_t>(0, new_offset - frontier());
    ensure_window_rows(reopened + old_kept);
    std::vector<float> tk(static_cast<std::size_t>((reopened + old_kept) * dk_));
    std::vector<float> tv(static_cast<std::size_t>((reopened + old_kept) * dv_));
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < heads_; ++h) {
        for (int64_t r = 0; r < reopened; ++r) {
          decode_key(b, h, new_quantized + r, tk.data() + r * dk_);
          decode_value(b, h, new_quantized + r, tv.data() + r * dv_);
        }
        cache_rows::load_f32(head_row(window_k_, b, h, 0), dtype_, static_cast<std::size_t>(old_kept * dk_),
                             tk.data() + reopened * dk_);
        cache_rows::load_f32(head_row(window_v_, b, h, 0), dtype_, static_cast<std::size_t>(old_kept * dv_),
                             tv.data() + reopened * dv_);
        cache_rows::store_f32(tk.data(), tk.size(), head_row(window_k_, b, h, 0), dtype_);
        cache_rows::store_f32(tv.data(), tv.size(), head_row(window_v_, b, h, 0), dtype_);
      }
    }
    quantized_ = new_quantized;
    // No code left: the next flush fixes the orders again from its own rows, as a fresh cache's.
    if (quantized_ == 0) reset_orders();
  }
  offset_ = new_offset;
  return removed;
}

std::vector<lm::Tensor> SkvqCache::state() const {
  if (!window_k_.defined()) return {};
  return {sink_k_.slice(2, 0, sink_rows()),
          sink_v_.slice(2, 0, sink_rows()),
          key_codes_.slice(2, 0, quantized_),
          value_codes_.slice(2, 0, quantized_),
          window_k_.slice(2, 0, window_rows()),
          window_v_.slice(2, 0, window_rows()),
          key_order_,
          value_order_};
}

std::vector<std::string> SkvqCache::meta_state() const {
  const SkvqOptions& o = options_;
  return {std::to_string(o.skvq_bits_key),    std::to_string(o.skvq_bits_value),
          std::to_string(o.skvq_group_size),  std::to_string(o.skvq_window),
          std::to_string(o.skvq_n_sink),      o.skvq_reorder ? "1" : "0",
          o.skvq_clip_search ? "1" : "0",     blocks_tail::exact_double(o.skvq_clip_alpha),
          std::to_string(o.skvq_max_ctx),     std::to_string(offset_),
          std::to_string(quantized_),         ordered_ ? "1" : "0",
          std::string(lm::dtype_name(dtype_))};
}

void SkvqCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "SkvqCache::from_state";
  if (meta.size() != 13) {
    throw base::FormatError(
        std::string(who) + ": expected 13 meta entries (bits key, bits value, group, window, " +
        "n_sink, reorder, clip search, clip alpha, max ctx, offset, quantized, ordered, dtype), got " +
        std::to_string(meta.size()));
  }
  const auto flag = [&](std::size_t i, const char* what) {
    if (meta[i] != "0" && meta[i] != "1")
      throw base::FormatError(std::string(who) + ": bad " + what + " '" + meta[i] + "'");
    return meta[i] == "1";
  };
  SkvqOptions o;
  o.skvq_bits_key = static_cast<int>(cache_rows::parse_meta_int(meta[0], who, "bits key"));
  o.skvq_bits_value = static_cast<int>(cache_rows::parse_meta_int(meta[1], who, "bits value"));
  o.skvq_group_size = static_cast<int>(cache_rows::parse_meta_int(meta[2], who, "group"));
  o.skvq_window = static_cast<int>(cache_rows::parse_meta_int(meta[3], who, "window"));
  o.skvq_n_sink = static_cast<int>(cache_rows::parse_meta_int(meta[4], who, "n_sink"));
  o.skvq_reorder = flag(5, "reorder");
  o.skvq_clip_search = flag(6, "clip search");
  o.skvq_clip_alpha = blocks_tail::parse_meta_double(meta[7], who, "clip alpha");
  o.skvq_max_ctx = static_cast<int>(cache_rows::parse_meta_int(meta[8], who, "max ctx"));
  SkvqCache fresh(o);
  const int64_t offset = cache_rows::parse_meta_int(meta[9], who, "offset");
  const int64_t quantized = cache_rows::parse_meta_int(meta[10], who, "quantized");
  const bool ordered = flag(11, "ordered");
  const lm::DType dtype = lm::parse_float_dtype(meta[12]);
  if (offset < 0 || quantized != quantized_rows_for(offset, o.skvq_n_sink, o.skvq_window) ||
      (ordered && !o.skvq_reorder) || (ordered != (o.skvq_reorder && quantized > 0))) {
    throw base::FormatError(std::string(who) + ": offset " + meta[9] + ", quantized rows " + meta[10] +
                            " and ordered " + meta[11] + " do not agree");
  }
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[9]);
    *this = fresh;
    return;
  }
  if (state.size() != 8)
    throw base::FormatError(std::string(who) + ": expected 8 tensors, got " + std::to_string(state.size()));
  for (const lm::Tensor& s : state) {
    if (s.ndim() != 4)
      throw base::FormatError(std::string(who) + ": tensor " + lm::shape_text(s.shape()) + " is not 4-d");
  }
  const lm::Tensor& korder = state[6];
  const lm::Tensor& vorder = state[7];
  fresh.allocate(korder.dim(0), korder.dim(1), korder.dim(3), vorder.dim(3), dtype);
  fresh.offset_ = offset;
  fresh.quantized_ = quantized;
  const int64_t rows[] = {fresh.sink_rows(),   fresh.sink_rows(),   quantized, quantized,
                          fresh.window_rows(), fresh.window_rows(), 1,         1};
  const int64_t widths[] = {
      fresh.dk_, fresh.dv_, fresh.key_layout_.width(), fresh.value_layout_.width(), fresh.dk_, fresh.dv_,
      fresh.dk_, fresh.dv_};
  for (std::size_t i = 0; i < 8; ++i) {
    const lm::Tensor& s = state[i];
    const bool codes = i == 2 || i == 3, order = i >= 6;
    const bool dtype_ok = codes   ? s.dtype() == lm::DType::U32
                          : order ? s.dtype() == lm::DType::I32
                                  : lm::is_float_dtype(s.dtype());
    if (s.dim(0) != fresh.batch_ || s.dim(1) != fresh.heads_ || s.dim(2) != rows[i] || s.dim(3) != widths[i] ||
        !dtype_ok) {
      throw base::FormatError(std::string(who) + ": tensor " + std::to_string(i) + " " + lm::shape_text(s.shape()) +
                              " does not match " + std::to_string(rows[i]) + " rows of width " +
                              std::to_string(widths[i]));
    }
  }
  fresh.key_order_ = state[6].clone();
  fresh.value_order_ = state[7].clone();
  for (int64_t b = 0; b < fresh.batch_; ++b) {
    for (int64_t h = 0; h < fresh.heads_; ++h) {
      if (!is_permutation(fresh.key_order(b, h), fresh.dk_) || !is_permutation(fresh.value_order(b, h), fresh.dv_)) {
        throw base::FormatError(std::string(who) + ": a channel order is not a permutation");
      }
    }
  }
  fresh.ordered_ = ordered;
  fresh.capacity_ = grown_capacity(0, quantized, INT64_MAX);
  fresh.key_codes_ = cache_rows::copy_rows(state[2], quantized, fresh.capacity_);
  fresh.value_codes_ = cache_rows::copy_rows(state[3], quantized, fresh.capacity_);
  const int64_t sink_cap = grown_capacity(0, fresh.sink_rows(), o.skvq_n_sink);
  fresh.sink_k_ = cache_rows::copy_rows(state[0].astype(dtype), fresh.sink_rows(), sink_cap);
  fresh.sink_v_ = cache_rows::copy_rows(state[1].astype(dtype), fresh.sink_rows(), sink_cap);
  const int64_t window_cap = grown_capacity(0, fresh.window_rows(), o.skvq_window + kFlushRows);
  fresh.window_k_ = cache_rows::copy_rows(state[4].astype(dtype), fresh.window_rows(), window_cap);
  fresh.window_v_ = cache_rows::copy_rows(state[5].astype(dtype), fresh.window_rows(), window_cap);
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> SkvqCache::clone() const {
  auto copy = std::make_shared<SkvqCache>(*this);
  for (lm::Tensor* t : {&copy->sink_k_, &copy->sink_v_, &copy->window_k_, &copy->window_v_, &copy->key_codes_,
                        &copy->value_codes_, &copy->key_order_, &copy->value_order_}) {
    if (t->defined()) *t = t->clone();
  }
  return copy;
}

std::shared_ptr<lm::KVCache> make_skvq_cache(const KVCacheConfig& config) {
  validate_skvq_options(config);
  return std::make_shared<SkvqCache>(config.options<SkvqOptions>());
}

MethodDescriptor skvq_method() {
  MethodDescriptor m;
  m.name = "skvq";
  m.family = "hybrid";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Keys and values per token at skvq_bits_key / skvq_bits_value in groups of reordered channels, each "
      "group's range clipped by a searched factor; the first skvq_n_sink tokens and the last skvq_window kept "
      "in full precision";
  m.paper =
      "SKVQ: Sliding-window Key and Value Cache Quantization for Large Language Models — Duanmu et al., COLM "
      "2024 (arXiv 2405.06219)";
  m.deviations =
      "Channel orders (by range) and clip factors come from the data being quantized, not from an offline "
      "calibration set: each head's key and value orders are fixed by the first flushed block of 32 tokens; "
      "each group's clip factor is searched among 11 values skvq_clip_alpha * (1 - 0.05 k) for the least "
      "squared error (the paper calibrates one per group offline). Rows leave the window in blocks of 32, "
      "so it holds window to window + 31 tokens. Real packed storage (the original: accounting only); "
      "skvq_max_ctx is accepted and checked but not a limit (buffers grow in 256-row steps). Trim reopens "
      "quantized rows decoded.";
  m.docs = "docs/methods/skvq.md";
  m.fields = {
      option_field("skvq_bits_key", &SkvqOptions::skvq_bits_key, "Bits of a key code", 1, 8),
      option_field("skvq_bits_value", &SkvqOptions::skvq_bits_value, "Bits of a value code", 1, 8),
      option_field("skvq_group_size", &SkvqOptions::skvq_group_size,
                   "Channels per quantization group (after reordering), one f16 (scale, min) each", 1, 4096),
      option_field("skvq_window", &SkvqOptions::skvq_window, "Most recent tokens kept in full precision", 0, kMaxRows),
      option_field("skvq_n_sink", &SkvqOptions::skvq_n_sink, "First tokens kept in full precision (attention sinks)", 0,
                   kMaxRows),
      option_field("skvq_reorder", &SkvqOptions::skvq_reorder,
                   "Sort each head's channels by range (frozen from the first flushed block) before grouping"),
      option_field("skvq_clip_search", &SkvqOptions::skvq_clip_search,
                   "Search each group's clip factor (else every group uses skvq_clip_alpha)"),
      option_field("skvq_clip_alpha", &SkvqOptions::skvq_clip_alpha,
                   "Clip factor in (0, 1]: the largest one searched, or the one used without the search"),
      option_field("skvq_max_ctx", &SkvqOptions::skvq_max_ctx, "Accepted for the original's configs; not a limit", 1),
  };
  m.validate = [](const KVCacheConfig& c) { validate_skvq_options(c); };
  m.make_serving = make_skvq_cache;
  m.cache_type_name = kTypeName;
  // Placeholder options: from_state() rebuilds every one of them from meta_state().
  m.make_restorable = [] { return std::make_shared<SkvqCache>(SkvqOptions{}); };
  return m;
}

}  // namespace veloxquant
