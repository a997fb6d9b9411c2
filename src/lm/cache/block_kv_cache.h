#pragma once
// lm::BlockKVCache — the host's own cache in one of llama.cpp's block types (q8_0, q5_0, q4_0;
// `--kv-dtype`): every key and value row is quantized once, when stored, into llama.cpp's exact
// block layout (lm/cache/kv_cache_type.h), and attention reads the blocks tile by tile through the
// host's attention driver (kernels::attention_blocks) — never a widened copy of the cache.
// As llama.cpp does by default since April 2026, rows are first rotated by a 64-point Hadamard
// transform when the head dim is a multiple of 64 (lm/hadamard_rotation.h; `rotate` = false
// stores plain rows, as LLAMA_ATTN_ROT_DISABLE=1 does). Growth, trim and serialisation follow
// FullKVCache.
#include "lm/cache/cache.h"
#include "lm/cache/kv_cache_type.h"

namespace base {
class ThreadPool;
}

namespace lm {

class BlockKVCache : public KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  // `type` must be a block type (base::InvalidArgument otherwise). Fused attention runs on
  // `pool` (the model's), or on base::ThreadPool::global() when null. `rotate`: apply
  // llama.cpp's Hadamard rotation when both head dims allow it (decided on the first update).
  explicit BlockKVCache(KVCacheType type, base::ThreadPool* pool = nullptr, bool rotate = true);

  // Stores the rows; returns them dequantized, in the input dtype (a copy of the whole cache:
  // the contract's path for callers that attend themselves; the host uses fused_attention).
  KeysValues update_and_fetch(const Tensor& keys, const Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0 && !keys_.defined(); }
  std::size_t nbytes() const override { return keys_.storage_bytes() + values_.storage_bytes(); }
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  // state() = the block buffers' rows [0, offset) as U8 [B, H_kv, T, row bytes];
  // meta_state() = {type name, key head dim, value head dim, "rotated" | "plain"}.
  std::vector<Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "BlockKVCache"; }
  std::shared_ptr<KVCache> clone() const override;

  // Stores the new rows, then causal attention of the queries (the last N positions) over
  // all stored rows, reading the blocks in place.
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const FusedAttentionRequest& request, Tensor& out) override;

  KVCacheType kv_type() const { return type_; }
  // [B, H_kv, capacity, row bytes] U8 block buffers; rows [0, offset) are valid.
  const Tensor& key_blocks() const { return keys_; }
  const Tensor& value_blocks() const { return values_; }
  int64_t key_dim() const { return key_dim_; }
  int64_t value_dim() const { return value_dim_; }
  // Whether the stored rows are Hadamard-rotated (known after the first update).
  bool rotated() const { return rotated_; }

 private:
  void store(const Tensor& keys, const Tensor& values);
  // Reallocates to offset + ceil(S / 256) * 256 rows, as FullKVCache does.
  void grow_for(int64_t new_tokens);
  Tensor dequantized(const Tensor& blocks, int64_t dim, DType dtype) const;

  KVCacheType type_;
  base::ThreadPool* pool_;
  bool rotate_;           // asked for
  bool rotated_ = false;  // in effect for the stored rows
  Tensor keys_, values_;
  int64_t batch_ = 0, heads_ = 0, key_dim_ = 0, value_dim_ = 0;
  int64_t offset_ = 0;
};

}  // namespace lm
