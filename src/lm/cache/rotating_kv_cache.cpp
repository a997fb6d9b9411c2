#include "lm/cache/rotating_kv_cache.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "lm/cache/kv_rows.h"

// Semantics follow mlx_lm's RotatingKVCache (the behaviour its users rely on):
//  * one-token updates write in place into a ring of max_size rows; the first `keep` rows
//    are never overwritten (attention sinks), the write index wraps to `keep`. Before the
//    ring is full the buffer grows in steps of min(256, max_size - offset) rows;
//  * multi-token updates (prefill chunks) first put the buffer back into temporal order,
//    drop the oldest non-kept rows so that max_size - 1 remain, and append the S new rows:
//    the buffer holds max_size - 1 + S rows so every new query sees at least max_size - 1
//    earlier tokens. The next one-token update cuts it back to max_size;
//  * the returned keys/values are the whole buffer (in ring order once wrapped) — the mask
//    from make_mask() describes which rows each query may see;
//  * trimming is only possible while nothing has been overwritten (offset < max_size).
// Buffers here are always exactly the size mlx_lm's arrays would have, so nbytes() (their
// allocation) matches what mlx_lm would hold.

namespace lm {

namespace {

// Concatenates [B, H, S_i, D] pieces along the token axis into a fresh tensor of `dtype`.
Tensor concat_tokens(const std::vector<Tensor>& parts, DType dtype) {
  const Tensor& first = parts.front();
  int64_t total = 0;
  for (const Tensor& p : parts) total += p.dim(2);
  Tensor out({first.dim(0), first.dim(1), total, first.dim(3)}, dtype);
  int64_t row = 0;
  for (const Tensor& p : parts) {
    copy_token_rows(p, out, row);
    row += p.dim(2);
  }
  return out;
}

Tensor zero_rows_like(const Tensor& like, int64_t rows, DType dtype) {
  return Tensor({like.dim(0), like.dim(1), rows, like.dim(3)}, dtype);
}

}  // namespace

RotatingKVCache::RotatingKVCache(int64_t max_size, int64_t keep, DType kv_dtype)
    : max_size_(max_size), keep_(keep), kv_dtype_(kv_dtype) {
  if (max_size < 1) {
    throw base::InvalidArgument("RotatingKVCache: max_size must be >= 1, got " + std::to_string(max_size));
  }
  if (keep < 0 || keep >= max_size) {
    throw base::InvalidArgument("RotatingKVCache: keep must be in [0, max_size) = [0, " + std::to_string(max_size) +
                                "), got " + std::to_string(keep));
  }
  if (!is_float_dtype(kv_dtype)) {
    throw base::InvalidArgument("RotatingKVCache: KV dtype must be f32, f16 or bf16, got " +
                                std::string(dtype_name(kv_dtype)));
  }
}

bool RotatingKVCache::empty() const { return !keys_.defined(); }

std::size_t RotatingKVCache::nbytes() const { return keys_.storage_bytes() + values_.storage_bytes(); }

bool RotatingKVCache::is_trimmable() const { return offset_ < max_size_; }

Tensor RotatingKVCache::drop_oldest(int64_t trim_size, const Tensor& v, const Tensor* append) const {
  std::vector<Tensor> parts;
  if (trim_size > 0) {
    parts.push_back(v.slice(2, 0, keep_));
    parts.push_back(v.slice(2, trim_size + keep_, v.dim(2)));
  } else {
    parts.push_back(v);
  }
  if (append != nullptr) parts.push_back(*append);
  return concat_tokens(parts, kv_dtype_);
}

Tensor RotatingKVCache::temporal_order(const Tensor& v) const {
  const int64_t rows = v.dim(2);
  if (write_index_ == rows) return v;
  if (write_index_ < offset_) {
    // Wrapped: the oldest non-kept row sits at the write index.
    return concat_tokens({v.slice(2, 0, keep_), v.slice(2, write_index_, rows), v.slice(2, keep_, write_index_)},
                         kv_dtype_);
  }
  return v.slice(2, 0, write_index_);
}

KeysValues RotatingKVCache::update_concat(const Tensor& keys, const Tensor& values) {
  if (!keys_.defined()) {
    keys_ = concat_tokens({keys}, kv_dtype_);
    values_ = concat_tokens({values}, kv_dtype_);
  } else {
    Tensor ordered_keys = temporal_order(keys_);
    Tensor ordered_values = temporal_order(values_);
    write_index_ = ordered_keys.dim(2);
    const int64_t trim_size = write_index_ - max_size_ + 1;
    keys_ = drop_oldest(trim_size, ordered_keys, &keys);
    values_ = drop_oldest(trim_size, ordered_values, &values);
  }
  offset_ += keys.dim(2);
  write_index_ = keys_.dim(2);
  return fetch(keys_.dim(2), keys.dtype());
}

KeysValues RotatingKVCache::update_in_place(const Tensor& keys, const Tensor& values) {
  const int64_t prev = offset_;
  const int64_t new_tokens = keys.dim(2);
  if (!keys_.defined() || (prev >= keys_.dim(2) && keys_.dim(2) < max_size_)) {
    const int64_t grow = std::max<int64_t>(1, std::min<int64_t>(kGrowthStep, max_size_ - prev));
    if (keys_.defined()) {
      keys_ = concat_tokens({keys_, zero_rows_like(keys_, grow, kv_dtype_)}, kv_dtype_);
      values_ = concat_tokens({values_, zero_rows_like(values_, grow, kv_dtype_)}, kv_dtype_);
    } else {
      keys_ = zero_rows_like(keys, grow, kv_dtype_);
      values_ = zero_rows_like(values, grow, kv_dtype_);
    }
    write_index_ = prev;
  }
  // A preceding multi-token update may have left up to max_size - 1 + S rows: cut back.
  const int64_t trim_size = keys_.dim(2) - max_size_;
  if (trim_size > 0) {
    keys_ = drop_oldest(trim_size, keys_, nullptr);
    values_ = drop_oldest(trim_size, values_, nullptr);
    write_index_ = max_size_;
  }
  if (write_index_ == max_size_) write_index_ = keep_;  // wrap, sparing the kept rows
  copy_token_rows(keys, keys_, write_index_);
  copy_token_rows(values, values_, write_index_);
  offset_ += new_tokens;
  write_index_ += new_tokens;
  return fetch(offset_ < max_size_ ? offset_ : keys_.dim(2), keys.dtype());
}

KeysValues RotatingKVCache::fetch(int64_t rows, DType dtype) const {
  Tensor k = keys_.slice(2, 0, rows);
  Tensor v = values_.slice(2, 0, rows);
  if (dtype != kv_dtype_) return {k.astype(dtype), v.astype(dtype)};
  return {std::move(k), std::move(v)};
}

KeysValues RotatingKVCache::update_and_fetch(const Tensor& keys, const Tensor& values) {
  check_new_tokens(keys, values, "RotatingKVCache::update_and_fetch");
  if (keys_.defined() && (keys.dim(0) != keys_.dim(0) || keys.dim(1) != keys_.dim(1) || keys.dim(3) != keys_.dim(3) ||
                          values.dim(3) != values_.dim(3))) {
    throw base::InvalidArgument("RotatingKVCache::update_and_fetch: new keys " + shape_text(keys.shape()) +
                                " / values " + shape_text(values.shape()) +
                                " do not match the cache's [B, H_kv, *, D] = " + shape_text(keys_.shape()) + " / " +
                                shape_text(values_.shape()));
  }
  if (keys.dim(2) == 0)
    return keys_.defined() ? fetch(std::min(offset_, keys_.dim(2)), keys.dtype()) : KeysValues{keys, values};
  if (keys.dim(2) == 1) return update_in_place(keys, values);
  return update_concat(keys, values);
}

int64_t RotatingKVCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("RotatingKVCache::trim: n must be >= 0, got " + std::to_string(n));
  // Once the ring has wrapped, the overwritten tokens are gone: nothing can be rolled back.
  if (!is_trimmable()) return 0;
  const int64_t removed = std::min(n, offset_);
  offset_ -= removed;
  write_index_ -= removed;
  return removed;
}

// Masks mirror mlx_lm: for several queries, a causal mask over the (temporally ordered)
// rows, explicit once the window cuts into it; for one query, an explicit mask only when the
// layer's window is shorter than the ring, rolled to the ring's write position.
AttentionMask RotatingKVCache::make_mask(int64_t n_queries, std::optional<int64_t> window) const {
  const int64_t batch = keys_.defined() ? keys_.dim(0) : 1;
  if (n_queries > 1) {
    const int64_t w = window.value_or(max_size_);
    const int64_t past = std::min(max_size_ - 1, offset_);
    if (past + n_queries <= w) return AttentionMask::causal();
    const int64_t rows = past + n_queries;
    Tensor mask({batch, 1, n_queries, rows}, DType::U8);
    auto* m = mask.data<uint8_t>();
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t i = 0; i < n_queries; ++i) {
        const int64_t query = past + i;
        for (int64_t r = 0; r < rows; ++r) {
          m[(b * n_queries + i) * rows + r] = (r <= query && query < r + w) ? 1 : 0;
        }
      }
    }
    return {AttentionMask::Kind::kExplicit, mask};
  }
  if (!window) return AttentionMask::none();
  const int64_t w = *window;
  if (offset_ < w || max_size_ <= w) return AttentionMask::none();
  int64_t idx = write_index_;
  if (idx >= max_size_) idx = 0;
  const int64_t rows = offset_ < max_size_ ? offset_ + 1 : max_size_;
  Tensor mask({batch, 1, 1, rows}, DType::U8);
  auto* m = mask.data<uint8_t>();
  // Temporal mask: the newest `w` of `rows` entries; then rolled right by idx + 1 so the
  // newest lands on the ring slot the coming token is written to.
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t temporal = ((r - (idx + 1)) % rows + rows) % rows;
      m[b * rows + r] = temporal >= rows - w ? 1 : 0;
    }
  }
  return {AttentionMask::Kind::kExplicit, mask};
}

std::vector<Tensor> RotatingKVCache::state() const {
  if (!keys_.defined()) return {};
  const int64_t rows = std::min(offset_, keys_.dim(2));
  return {keys_.slice(2, 0, rows), values_.slice(2, 0, rows)};
}

// keep, max_size, offset, write index (mlx_lm's four) and the storage dtype.
std::vector<std::string> RotatingKVCache::meta_state() const {
  return {std::to_string(keep_), std::to_string(max_size_), std::to_string(offset_), std::to_string(write_index_),
          std::string(dtype_name(kv_dtype_))};
}

void RotatingKVCache::from_state(const std::vector<Tensor>& state, const std::vector<std::string>& meta) {
  if (meta.size() != 4 && meta.size() != 5) {
    throw base::FormatError(
        "RotatingKVCache::from_state: expected 4 or 5 meta entries (keep, max_size, offset, "
        "index[, dtype]), got " +
        std::to_string(meta.size()));
  }
  int64_t fields[4];
  for (int i = 0; i < 4; ++i) {
    std::size_t used = 0;
    try {
      fields[i] = std::stoll(meta[i], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != meta[i].size()) {
      throw base::FormatError("RotatingKVCache::from_state: meta entry " + std::to_string(i) + " '" + meta[i] +
                              "' is not an integer");
    }
  }
  const int64_t keep = fields[0], max_size = fields[1], offset = fields[2], index = fields[3];
  if (max_size < 1 || keep < 0 || keep >= max_size || offset < 0 || index < 0) {
    throw base::FormatError("RotatingKVCache::from_state: inconsistent meta keep=" + meta[0] + " max_size=" + meta[1] +
                            " offset=" + meta[2] + " index=" + meta[3]);
  }
  DType dtype = kv_dtype_;
  if (meta.size() == 5) {
    try {
      dtype = parse_float_dtype(meta[4]);
    } catch (const base::InvalidArgument& e) {
      throw base::FormatError(std::string("RotatingKVCache::from_state: ") + e.what());
    }
  }
  Tensor k, v;
  if (!state.empty()) {
    if (state.size() != 2) {
      throw base::FormatError("RotatingKVCache::from_state: expected 2 tensors (keys, values), got " +
                              std::to_string(state.size()));
    }
    check_new_tokens(state[0], state[1], "RotatingKVCache::from_state");
    if (index > state[0].dim(2)) {
      throw base::FormatError("RotatingKVCache::from_state: index " + meta[3] + " beyond the " +
                              std::to_string(state[0].dim(2)) + " stored rows");
    }
    k = concat_tokens({state[0]}, dtype);
    v = concat_tokens({state[1]}, dtype);
  } else if (offset != 0) {
    throw base::FormatError("RotatingKVCache::from_state: offset " + meta[2] + " but no tensors");
  }
  keep_ = keep;
  max_size_ = max_size;
  offset_ = offset;
  write_index_ = index;
  kv_dtype_ = dtype;
  keys_ = std::move(k);
  values_ = std::move(v);
}

std::shared_ptr<KVCache> RotatingKVCache::clone() const {
  auto copy = std::make_shared<RotatingKVCache>(max_size_, keep_, kv_dtype_);
  copy->keys_ = keys_.clone();
  copy->values_ = values_.clone();
  copy->offset_ = offset_;
  copy->write_index_ = write_index_;
  return copy;
}

}  // namespace lm
