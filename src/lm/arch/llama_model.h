#pragma once
// lm::LlamaModel — the llama decoder (RMSNorm, RoPE, grouped-query attention, SwiGLU FFN,
// tied or separate output head), with the qwen2 (QKV bias) and qwen3 (Q/K norm) variations
// switched on by which tensors are present.
//
// forward() drives each layer's cache exactly as lm/cache/cache.h prescribes: offset(), then
// make_mask(n, window), then observe_queries() when the cache wants them, then either
// fused_attention() or update_and_fetch() + kernels::attention(). Keys/values are handed to
// caches as [1, H_kv, S, D] tensors in the model's KV dtype.
#include <memory>

#include "base/thread_pool.h"
#include "lm/arch/llama_weights.h"
#include "lm/kernels/matmul.h"
#include "lm/cache/kv_cache_type.h"
#include "lm/model.h"

namespace lm {

struct LlamaRuntimeOptions {
  KVCacheType kv_type = KVCacheType::F16;  // block types make lm::BlockKVCache native caches
  int threads = 0;                         // 0 = all cores
  // Decode matmuls of quantized weights on 16-bit-rounded activations (integer dot products,
  // lm/kernels/i16_activations.h); false keeps f32 activations everywhere (the reference).
  bool i16_activations = true;
};

class LlamaModel : public Model {
 public:
  // Validates every tensor shape against the config (base::FormatError naming the tensor).
  LlamaModel(ModelConfig config, LlamaHyperParams hyper, LlamaWeights weights, LlamaRuntimeOptions options);

  const ModelConfig& config() const override { return config_; }
  const std::vector<LayerInfo>& layers() const override { return layers_; }
  CacheList native_make_cache() const override;
  void forward(const std::vector<int32_t>& tokens, CacheList& caches, std::vector<float>& last_logits,
               std::vector<float>* all_logits = nullptr) const override;
  void embed_tokens(const std::vector<int32_t>& tokens, float* out) const override;
  void forward_embeddings(const float* embeddings, int64_t n, CacheList& caches, std::vector<float>& last_logits,
                          std::vector<float>* all_logits = nullptr) const override;

  // The dtype keys/values are handed to caches in: the float KV type, f16 when the native type
  // is a block type (block caches themselves are fed f32, which they quantize).
  DType kv_dtype() const { return is_block_kv_type(options_.kv_type) ? DType::F16 : kv_feed_dtype(options_.kv_type); }
  KVCacheType kv_type() const { return options_.kv_type; }
  const LlamaWeights& weights() const { return weights_; }
  base::ThreadPool& thread_pool() const { return *pool_; }

 private:
  void validate() const;
  kernels::Activations activations() const {
    return options_.i16_activations ? kernels::Activations::kI16 : kernels::Activations::kF32;
  }
  void check_caches(const CacheList& caches, int64_t n) const;
  // The decoder over x ([n, dim] input embeddings, overwritten), then the head.
  void run_layers(float* x, int64_t n, CacheList& caches, std::vector<float>& last_logits,
                  std::vector<float>* all_logits) const;
  void attention_block(int layer, int64_t n, const float* xb, float* attn_out, KVCache& cache) const;

  ModelConfig config_;
  LlamaHyperParams hyper_;
  LlamaWeights weights_;
  LlamaRuntimeOptions options_;
  std::vector<LayerInfo> layers_;
  // The process's global pool when the thread counts agree (the compressed caches' fused attention
  // and flushes run on it: one set of workers, not two pools' workers competing for the cores),
  // else a pool of the model's own.
  std::shared_ptr<base::ThreadPool> pool_;
};

}  // namespace lm
