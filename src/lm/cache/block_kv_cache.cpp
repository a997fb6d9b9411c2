#include "lm/cache/block_kv_cache.h"

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/hadamard_rotation.h"
#include "lm/kernels/attention.h"
#include "lm/cache/kv_rows.h"

namespace lm {

BlockKVCache::BlockKVCache(KVCacheType type, base::ThreadPool* pool, bool rotate)
    : type_(type), pool_(pool), rotate_(rotate) {
  if (!is_block_kv_type(type)) {
    throw base::InvalidArgument("BlockKVCache: KV type must be q8_0, q5_0 or q4_0, got " +
                                std::string(kv_cache_type_name(type)));
  }
}

void BlockKVCache::grow_for(int64_t new_tokens) {
  const int64_t kept = keys_.defined() ? offset_ : 0;
  const auto row_bytes = [&](int64_t dim) { return static_cast<int64_t>(kv_row_bytes(type_, dim)); };
  keys_ = grow_token_rows(keys_, kept, new_tokens, batch_, heads_, row_bytes(key_dim_), DType::U8, kGrowthStep);
  values_ = grow_token_rows(values_, kept, new_tokens, batch_, heads_, row_bytes(value_dim_), DType::U8, kGrowthStep);
}

void BlockKVCache::store(const Tensor& keys, const Tensor& values) {
  check_new_tokens(keys, values, "BlockKVCache");
  if (!keys_.defined()) {
    // The first call fixes the geometry; a head dim that is not a multiple of 32 is refused
    // here, before anything is stored.
    kv_row_bytes(type_, keys.dim(3));
    kv_row_bytes(type_, values.dim(3));
    batch_ = keys.dim(0);
    heads_ = keys.dim(1);
    key_dim_ = keys.dim(3);
    value_dim_ = values.dim(3);
    rotated_ = rotate_ && hadamard_rotates(key_dim_) && hadamard_rotates(value_dim_);
  } else if (keys.dim(0) != batch_ || keys.dim(1) != heads_ || keys.dim(3) != key_dim_ || values.dim(3) != value_dim_) {
    throw base::InvalidArgument("BlockKVCache: new keys " + shape_text(keys.shape()) + " / values " +
                                shape_text(values.shape()) + " do not match the cache's [B, H_kv, *, D] = [" +
                                std::to_string(batch_) + ", " + std::to_string(heads_) + ", *, " +
                                std::to_string(key_dim_) + "] / value dim " + std::to_string(value_dim_));
  }
  const int64_t new_tokens = keys.dim(2);
  if (!keys_.defined() || offset_ + new_tokens > keys_.dim(2)) grow_for(new_tokens);
  // Rows are quantized from f32, as llama.cpp quantizes its cache from the f32 K and V.
  std::vector<float> row;
  const auto quantize_rows = [&](const Tensor& src, Tensor& dst, int64_t dim) {
    const Tensor rows = src.astype(DType::F32).contiguous();
    const float* from = rows.data<float>();
    const auto& s = dst.strides();
    row.resize(static_cast<std::size_t>(dim));
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < heads_; ++h) {
        for (int64_t t = 0; t < new_tokens; ++t) {
          std::copy_n(from + ((b * heads_ + h) * new_tokens + t) * dim, dim, row.data());
          if (rotated_) hadamard_rotate(row.data(), dim);
          quantize_kv_row(type_, row.data(), dst.raw_data() + b * s[0] + h * s[1] + (offset_ + t) * s[2], dim);
        }
      }
    }
  };
  quantize_rows(keys, keys_, key_dim_);
  quantize_rows(values, values_, value_dim_);
  offset_ += new_tokens;
}

Tensor BlockKVCache::dequantized(const Tensor& blocks, int64_t dim, DType dtype) const {
  Tensor rows({batch_, heads_, offset_, dim}, DType::F32);
  const auto& s = blocks.strides();
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      for (int64_t t = 0; t < offset_; ++t) {
        float* row = rows.data<float>() + ((b * heads_ + h) * offset_ + t) * dim;
        dequantize_kv_row(type_, blocks.raw_data() + b * s[0] + h * s[1] + t * s[2], row, dim);
        if (rotated_) hadamard_rotate(row, dim);  // H is its own inverse
      }
    }
  }
  return dtype == DType::F32 ? rows : rows.astype(dtype);
}

KeysValues BlockKVCache::update_and_fetch(const Tensor& keys, const Tensor& values) {
  store(keys, values);
  return {dequantized(keys_, key_dim_, keys.dtype()), dequantized(values_, value_dim_, values.dtype())};
}

void BlockKVCache::fused_attention(const FusedAttentionRequest& request, Tensor& out) {
  if (request.queries == nullptr || request.keys == nullptr || request.values == nullptr) {
    throw base::InvalidArgument("BlockKVCache::fused_attention: queries, keys and values are required");
  }
  if (key_dim_ != 0 && value_dim_ != key_dim_) {
    throw base::InvalidArgument("BlockKVCache::fused_attention: value head dim " + std::to_string(value_dim_) +
                                " differs from the key head dim " + std::to_string(key_dim_));
  }
  store(*request.keys, *request.values);
  const int64_t n = request.queries->dim(2);
  const kernels::BlockRows keys{&keys_, type_, offset_, key_dim_};
  const kernels::BlockRows values{&values_, type_, offset_, value_dim_};
  // Rotated rows: attend with H q (scores unchanged), and the output, a sum of rotated value
  // rows, is turned back with H.
  Tensor rotated_queries;
  if (rotated_) {
    rotated_queries = request.queries->clone();
    float* q = rotated_queries.data<float>();
    for (int64_t r = 0; r < rotated_queries.numel() / key_dim_; ++r) hadamard_rotate(q + r * key_dim_, key_dim_);
  }
  kernels::attention_blocks(rotated_ ? rotated_queries : *request.queries, keys, values,
                            default_attention_mask(n, request.window), request.window, request.scale, out,
                            pool_ ? pool_ : &base::ThreadPool::global());
  if (rotated_) {
    float* o = out.data<float>();
    for (int64_t r = 0; r < out.numel() / value_dim_; ++r) hadamard_rotate(o + r * value_dim_, value_dim_);
  }
}

int64_t BlockKVCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("BlockKVCache::trim: n must be >= 0, got " + std::to_string(n));
  const int64_t removed = n < offset_ ? n : offset_;
  offset_ -= removed;
  return removed;
}

std::vector<Tensor> BlockKVCache::state() const {
  if (!keys_.defined()) return {};
  return {keys_.slice(2, 0, offset_), values_.slice(2, 0, offset_)};
}

std::vector<std::string> BlockKVCache::meta_state() const {
  return {std::string(kv_cache_type_name(type_)), std::to_string(key_dim_), std::to_string(value_dim_),
          rotated_ ? "rotated" : "plain"};
}

void BlockKVCache::from_state(const std::vector<Tensor>& state, const std::vector<std::string>& meta) {
  if (meta.size() != 4 || (meta[3] != "rotated" && meta[3] != "plain")) {
    throw base::FormatError(
        "BlockKVCache::from_state: expected 4 meta entries (type, key dim, value dim, "
        "rotated|plain), got " +
        std::to_string(meta.size()));
  }
  const bool rotated = meta[3] == "rotated";
  KVCacheType type;
  int64_t key_dim = 0, value_dim = 0;
  try {
    type = parse_kv_cache_type(meta[0]);
    key_dim = std::stoll(meta[1]);
    value_dim = std::stoll(meta[2]);
  } catch (const std::exception& e) {
    throw base::FormatError(std::string("BlockKVCache::from_state: bad meta: ") + e.what());
  }
  if (!is_block_kv_type(type)) {
    throw base::FormatError("BlockKVCache::from_state: " + meta[0] + " is not a block type");
  }
  if (state.empty()) {
    type_ = type;
    keys_ = {};
    values_ = {};
    batch_ = heads_ = key_dim_ = value_dim_ = offset_ = 0;
    rotate_ = rotated;
    rotated_ = false;
    return;
  }
  if (state.size() != 2) {
    throw base::FormatError("BlockKVCache::from_state: expected 2 tensors (key and value blocks), got " +
                            std::to_string(state.size()));
  }
  const Tensor& k = state[0];
  const Tensor& v = state[1];
  const auto fits = [&](const Tensor& t, int64_t dim) {
    return t.ndim() == 4 && t.dtype() == DType::U8 && dim > 0 && dim % kKVBlockElements == 0 &&
           t.dim(3) == static_cast<int64_t>(kv_row_bytes(type, dim));
  };
  if (!fits(k, key_dim) || !fits(v, value_dim) || k.dim(0) != v.dim(0) || k.dim(1) != v.dim(1) ||
      k.dim(2) != v.dim(2)) {
    throw base::FormatError("BlockKVCache::from_state: blocks " + shape_text(k.shape()) + " / " +
                            shape_text(v.shape()) + " do not fit " + meta[0] + " rows of " + meta[1] + " / " + meta[2]);
  }
  if (rotated && (!hadamard_rotates(key_dim) || !hadamard_rotates(value_dim))) {
    throw base::FormatError("BlockKVCache::from_state: rows of " + meta[1] + " / " + meta[2] +
                            " cannot have been Hadamard-rotated");
  }
  type_ = type;
  rotate_ = rotated_ = rotated;
  batch_ = k.dim(0);
  heads_ = k.dim(1);
  key_dim_ = key_dim;
  value_dim_ = value_dim;
  keys_ = k.clone();
  values_ = v.clone();
  offset_ = k.dim(2);
}

std::shared_ptr<KVCache> BlockKVCache::clone() const {
  auto copy = std::make_shared<BlockKVCache>(type_, pool_, rotate_);
  copy->rotated_ = rotated_;
  copy->keys_ = keys_.clone();
  copy->values_ = values_.clone();
  copy->batch_ = batch_;
  copy->heads_ = heads_;
  copy->key_dim_ = key_dim_;
  copy->value_dim_ = value_dim_;
  copy->offset_ = offset_;
  return copy;
}

}  // namespace lm
