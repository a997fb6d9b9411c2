#include "lm/cache/full_kv_cache.h"

#include <cstring>
#include <string>

#include "base/error.h"
#include "lm/cache/kv_rows.h"

namespace lm {

FullKVCache::FullKVCache(DType kv_dtype) : kv_dtype_(kv_dtype) {
  if (!is_float_dtype(kv_dtype)) {
    throw base::InvalidArgument("FullKVCache: KV dtype must be f32, f16 or bf16, got " +
                                std::string(dtype_name(kv_dtype)));
  }
}

// Growth follows mlx_lm's KVCache exactly: when the S new tokens do not fit, allocate
// ceil(S / 256) * 256 fresh rows; an existing buffer is first cut to `offset` (dropping rows a
// trim left behind and unused slack) and the fresh rows appended. The new capacity is thus
// offset + ceil(S / 256) * 256, and nbytes() is that capacity times the row bytes.
void FullKVCache::grow_for(const Tensor& keys, const Tensor& values) {
  const int64_t kept = keys_.defined() ? offset_ : 0, new_tokens = keys.dim(2);
  keys_ = grow_token_rows(keys_, kept, new_tokens, keys.dim(0), keys.dim(1), keys.dim(3), kv_dtype_, kGrowthStep);
  values_ =
      grow_token_rows(values_, kept, new_tokens, values.dim(0), values.dim(1), values.dim(3), kv_dtype_, kGrowthStep);
}

KeysValues FullKVCache::update_and_fetch(const Tensor& keys, const Tensor& values) {
  check_new_tokens(keys, values, "FullKVCache::update_and_fetch");
  if (keys_.defined() && (keys.dim(0) != keys_.dim(0) || keys.dim(1) != keys_.dim(1) || keys.dim(3) != keys_.dim(3) ||
                          values.dim(3) != values_.dim(3))) {
    throw base::InvalidArgument("FullKVCache::update_and_fetch: new keys " + shape_text(keys.shape()) + " / values " +
                                shape_text(values.shape()) + " do not match the cache's [B, H_kv, *, D] = " +
                                shape_text(keys_.shape()) + " / " + shape_text(values_.shape()));
  }
  const int64_t prev = offset_;
  const int64_t new_tokens = keys.dim(2);
  if (!keys_.defined() || prev + new_tokens > keys_.dim(2)) grow_for(keys, values);
  copy_token_rows(keys, keys_, prev);
  copy_token_rows(values, values_, prev);
  offset_ = prev + new_tokens;
  return fetch(keys.dtype());
}

KeysValues FullKVCache::fetch(DType dtype) const {
  Tensor k = keys_.slice(2, 0, offset_);
  Tensor v = values_.slice(2, 0, offset_);
  // The contract returns the input dtype; when the storage dtype differs this is a converted
  // copy (the host's own attention reads key_buffer() directly and never pays for it).
  if (dtype != kv_dtype_) return {k.astype(dtype), v.astype(dtype)};
  return {std::move(k), std::move(v)};
}

std::size_t FullKVCache::nbytes() const { return keys_.storage_bytes() + values_.storage_bytes(); }

int64_t FullKVCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("FullKVCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = n < offset_ ? n : offset_;
  offset_ -= removed;
  return removed;
}

// state() = {keys[..., :offset, :], values[..., :offset, :]} as views in the storage dtype,
// valid until the next mutating call (prompt-cache files write them right away).
std::vector<Tensor> FullKVCache::state() const {
  if (!keys_.defined()) return {};
  return {keys_.slice(2, 0, offset_), values_.slice(2, 0, offset_)};
}

std::vector<std::string> FullKVCache::meta_state() const { return {std::string(dtype_name(kv_dtype_))}; }

void FullKVCache::from_state(const std::vector<Tensor>& state, const std::vector<std::string>& meta) {
  DType dtype = kv_dtype_;
  if (!meta.empty()) {
    if (meta.size() != 1) {
      throw base::FormatError("FullKVCache::from_state: expected 1 meta entry (kv dtype), got " +
                              std::to_string(meta.size()));
    }
    try {
      dtype = parse_float_dtype(meta[0]);
    } catch (const base::InvalidArgument& e) {
      throw base::FormatError(std::string("FullKVCache::from_state: ") + e.what());
    }
  }
  if (state.empty()) {
    kv_dtype_ = dtype;
    keys_ = {};
    values_ = {};
    offset_ = 0;
    return;
  }
  if (state.size() != 2) {
    throw base::FormatError("FullKVCache::from_state: expected 2 tensors (keys, values), got " +
                            std::to_string(state.size()));
  }
  const Tensor& k = state[0];
  const Tensor& v = state[1];
  check_new_tokens(k, v, "FullKVCache::from_state");
  kv_dtype_ = dtype;
  // Deep copy into the storage dtype: the restored cache owns its buffers, so later updates
  // (after a trim they write in place) never touch the caller's tensors.
  keys_ = Tensor(k.shape(), kv_dtype_);
  values_ = Tensor(v.shape(), kv_dtype_);
  copy_token_rows(k, keys_, 0);
  copy_token_rows(v, values_, 0);
  offset_ = k.dim(2);
}

std::shared_ptr<KVCache> FullKVCache::clone() const {
  auto copy = std::make_shared<FullKVCache>(kv_dtype_);
  copy->keys_ = keys_.clone();
  copy->values_ = values_.clone();
  copy->offset_ = offset_;
  return copy;
}

}  // namespace lm
