#pragma once
// lm::Model — the architecture-independent face of a loaded model: its layers, its native
// cache factory and the replaceable make_cache hook (as mlx_lm models have).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lm/cache/cache.h"

namespace lm {

// What a cache factory needs to know about one decoder layer.
struct LayerInfo {
  bool is_attention = true;  // false: recurrent block, MoE gate, ... (native cache)
  int head_dim = 0;          // 0 = use the model's head_dim
  int n_heads = 0;
  int n_kv_heads = 0;
  std::optional<int64_t> sliding_window;  // rotating cache for sliding-window layers
  std::string kind = "attention";         // free text for reports
  // A non-attention layer's own state cache (lm::ConvStateCache for LFM2's "shortconv"
  // layers), which native caches of every KV type use for it; empty = a plain KV cache.
  std::function<std::shared_ptr<KVCache>()> make_state_cache;
};

struct ModelConfig {
  std::string architecture;  // "llama", "qwen2", ...
  std::string name;
  int n_layers = 0;
  int dim = 0;
  int hidden_dim = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int64_t context_length = 0;
  float rope_theta = 10000.0f;
  float norm_eps = 1e-5f;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  virtual const std::vector<LayerInfo>& layers() const = 0;

  // The architecture's own caches: full caches, rotating caches for sliding-window layers.
  virtual CacheList native_make_cache() const = 0;

  // Runs the model over `tokens` (positions taken from the caches' offsets) and writes the
  // logits of the last token (vocab_size floats) into `last_logits`; when `all_logits` is
  // non-null it receives tokens.size() * vocab_size floats, one row per token.
  virtual void forward(const std::vector<int32_t>& tokens, CacheList& caches, std::vector<float>& last_logits,
                       std::vector<float>* all_logits = nullptr) const = 0;

  // The input embeddings forward() computes from token ids before the first layer (scaling
  // included): `out` receives tokens.size() * config().dim floats, row t for tokens[t]. A
  // vision-language model splices image features among these rows and runs
  // forward_embeddings() on the result. Text models without the split throw base::Unsupported.
  virtual void embed_tokens(const std::vector<int32_t>& tokens, float* out) const;
  // forward() from given input embeddings, `n` rows of config().dim floats, instead of ids.
  virtual void forward_embeddings(const float* embeddings, int64_t n, CacheList& caches,
                                  std::vector<float>& last_logits, std::vector<float>* all_logits = nullptr) const;

  // A vision-language wrapper's text model (what its caches belong to); nullptr for a model
  // that is itself a language model. KVCacheBuilder::for_model and patch_vlm_kv_cache read it.
  virtual const Model* language_model() const { return nullptr; }
  virtual Model* language_model() { return nullptr; }

  // The replaceable hook. Empty by default; when set, make_prompt_cache calls it instead of
  // native_make_cache(). Hooks must not call make_prompt_cache (it would recurse).
  std::function<CacheList()> make_cache;
};

// The hook when set, else the native caches. generate() calls this once per generation.
CacheList make_prompt_cache(const Model& model);

}  // namespace lm
