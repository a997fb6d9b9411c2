#pragma once
// The cache contract — mirrors mlx_lm's KVCache (DESIGN.md, "The cache contract").
//
// The attention of each layer, per forward step, does in this order:
//   1. read offset()   — the RoPE position of the first new token;
//   2. make_mask(n)    — none / causal / explicit boolean mask;
//   3. either update_and_fetch(k, v) then attention over what it returned, or, when the
//      cache offers it, fused_attention(q, k, v, ...) which stores k/v and attends over the
//      cache's own (possibly compressed) storage.
// Keys and values arrive as [B, H_kv, S, D] in the host's KV dtype (f16 by default).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lm/tensor.h"

namespace base {
class ThreadPool;
}  // namespace base

namespace lm {

struct KeysValues {
  Tensor keys;    // [B, H_kv, T, D], same dtype as the input
  Tensor values;  // [B, H_kv, T, D], same dtype as the input
};

// What make_mask returns: nothing (single query, no window), causal over contiguous
// positions, or an explicit boolean mask [B, 1, N, T] (U8: 1 = visible) once eviction has
// made the kept positions non-contiguous.
struct AttentionMask {
  enum class Kind { kNone, kCausal, kExplicit };
  Kind kind = Kind::kNone;
  Tensor explicit_mask;  // defined only for kExplicit
  static AttentionMask none() { return {}; }
  static AttentionMask causal() { return {Kind::kCausal, {}}; }
};

// The mlx_lm default: None for one query, "causal" otherwise.
AttentionMask default_attention_mask(int64_t n_queries, std::optional<int64_t> window);

// Inputs of a fused attention call. Queries are already RoPE-rotated, f32, [B, H_q, N, D];
// keys/values are the new tokens in the KV dtype, [B, H_kv, N, D]. H_q is a multiple of H_kv
// (grouped-query attention: query head h reads kv head h / (H_q / H_kv)).
struct FusedAttentionRequest {
  const Tensor* queries = nullptr;
  const Tensor* keys = nullptr;
  const Tensor* values = nullptr;
  float scale = 1.0f;             // usually 1/sqrt(D)
  std::optional<int64_t> window;  // sliding window of the layer, if any
  // The host's pool (its matmuls run on it): a cache that splits its attention across threads
  // runs on this one, so the two never compete for the cores. nullptr: base::ThreadPool::global().
  base::ThreadPool* pool = nullptr;
};

class KVCache {
 public:
  virtual ~KVCache() = default;

  // Stores the S new tokens; returns what attention must see this step ([B, H_kv, T, D],
  // same dtype as the input). Returned tensors may be views into the cache's buffers and stay
  // valid until the next mutating call.
  virtual KeysValues update_and_fetch(const Tensor& keys, const Tensor& values) = 0;

  // RoPE position of the next token = true count of tokens ever fed.
  virtual int64_t offset() const = 0;
  virtual bool empty() const = 0;
  // Bytes actually allocated by this cache (packed codes, scales, norms, windows, growth
  // slack included) — never bit-width accounting.
  virtual std::size_t nbytes() const = 0;

  virtual bool is_trimmable() const { return false; }
  // Removes the last min(n, offset) tokens; returns how many were removed. After trimming the
  // cache behaves exactly as if it had been fed only the kept tokens.
  virtual int64_t trim(int64_t n) { return 0; }

  virtual AttentionMask make_mask(int64_t n_queries, std::optional<int64_t> window) const {
    return default_attention_mask(n_queries, window);
  }

  // Serialisation (prompt-cache files). state(): the stored tensors; meta_state(): strings
  // that let from_state rebuild derived objects. A restored cache accepts further updates.
  virtual std::vector<Tensor> state() const = 0;
  virtual std::vector<std::string> meta_state() const = 0;
  virtual void from_state(const std::vector<Tensor>& state, const std::vector<std::string>& meta) = 0;
  // A stable name for the cache's class (written into prompt-cache files).
  virtual std::string type_name() const = 0;

  // Deep copy, independent of this cache.
  virtual std::shared_ptr<KVCache> clone() const = 0;

  // Optional fused attention over the cache's own storage. When supported the host calls it
  // instead of update_and_fetch + attention. Writes [B, H_q, N, D] f32 into `out` (allocated
  // by the host) after storing the new keys/values.
  virtual bool supports_fused_attention() const { return false; }
  virtual void fused_attention(const FusedAttentionRequest& request, Tensor& out);

  // Optional observation hook: a cache that wants the layer's real queries (eviction
  // methods that score by attention) says so; the host then passes the RoPE-rotated queries
  // [B, H_q, N, D] (f32) before update_and_fetch.
  virtual bool wants_queries() const { return false; }
  virtual void observe_queries(const Tensor& queries) {}
};

using CacheList = std::vector<std::shared_ptr<KVCache>>;

}  // namespace lm
