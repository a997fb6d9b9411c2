#pragma once
// The tensors of a llama-family decoder, independent of the file they came from: the GGUF
// loader and the llama2.c reader both fill this, and LlamaModel computes with it. Matrices
// stay views into the memory-mapped file; the small 1-D vectors (norm weights, biases) are
// copied to f32 once, since they are read every step and may be stored as f16.
#include <memory>
#include <optional>
#include <vector>

#include "lm/kernels/rope.h"
#include "lm/model.h"
#include "lm/weights/weight_matrix.h"

namespace lm {

struct MoeLayerWeights;  // lm/arch/moe_ffn.h

// lfm2: a gated short-convolution block where other layers have attention
// (lm/arch/shortconv_block.h). Absent (kernel_size 0) on attention layers.
struct ShortConvWeights {
  WeightMatrix in_proj;     // [3*dim rows, dim cols]: the gates B and C and the input x, in that order
  WeightMatrix out_proj;    // [dim, dim]
  std::vector<float> taps;  // [kernel_size][dim], tap-major: the file's [dim][kernel_size] transposed
  int64_t kernel_size = 0;  // lfm2.shortconv.l_cache
  bool present() const { return kernel_size > 0; }
};

struct LlamaLayerWeights {
  std::vector<float> attn_norm;       // [dim]
  WeightMatrix wq, wk, wv, wo;        // wq [H_q*D rows, dim cols], wk/wv [H_kv*D, dim], wo [dim, H_q*D]
  std::vector<float> bq, bk, bv;      // qwen2: attention biases (empty for llama)
  std::vector<float> q_norm, k_norm;  // qwen3: per-head RMSNorm of q/k over D (empty for llama)
  std::vector<float> attn_post_norm;  // gemma3: RMSNorm of the attention output before the residual add
  std::vector<float> ffn_norm;        // [dim]
  std::vector<float> ffn_post_norm;   // gemma3: RMSNorm of the FFN output before the residual add
  WeightMatrix w_gate, w_up, w_down;  // gate/up [hidden, dim], down [dim, hidden]
  // qwen3moe, Mixtral: routed experts in place of w_gate/w_up/w_down (null for a dense FFN).
  std::shared_ptr<const MoeLayerWeights> moe;
  ShortConvWeights shortconv;  // lfm2 conv layers: replaces wq..wo, q_norm, k_norm
};

struct LlamaWeights {
  WeightMatrix token_embedding;  // [vocab rows, dim cols]
  std::vector<float> output_norm;
  WeightMatrix output;  // [vocab, dim]; the embedding itself when tied
  std::vector<LlamaLayerWeights> layers;
};

enum class FfnActivation { kSiLU, kGeluTanh };  // SwiGLU (llama, qwen) or GeGLU (gemma)

// Architecture details beyond lm::ModelConfig.
struct LlamaHyperParams {
  kernels::RopeStyle rope_style = kernels::RopeStyle::kNormal;
  int rope_dim = 0;                                    // 0 = head_dim
  std::vector<std::optional<int64_t>> sliding_window;  // per layer; empty = none anywhere
  // Per-layer RoPE base; empty = ModelConfig::rope_theta everywhere. Gemma 3 turns slower
  // (1e6) on its global layers than on its sliding-window ones (1e4).
  std::vector<float> rope_theta;
  float embedding_scale = 1.0f;  // gemma: token embeddings times sqrt(dim)
  float attention_scale = 0.0f;  // softmax scale; 0 = 1/sqrt(head_dim)
  FfnActivation ffn_activation = FfnActivation::kSiLU;
  // Gemma 2's soft-capping, x -> cap * tanh(x / cap); 0 = none. Attention scores (after the
  // scale, before the softmax) and the final logits.
  float attn_logit_softcap = 0.0f;
  float final_logit_softcap = 0.0f;
};

}  // namespace lm
