#pragma once
// Reads a mixture-of-experts layer from a GGUF file with llama.cpp's names and metadata keys
// (llama-arch.cpp, convert_hf_to_gguf.py's Qwen2Moe/Qwen3Moe converters):
//   blk.N.ffn_gate_inp.weight    router, [dim, n_experts] (ne order)
//   blk.N.ffn_gate_exps.weight   [dim, expert_ffn, n_experts]: n_experts gate matrices
//   blk.N.ffn_up_exps.weight     [dim, expert_ffn, n_experts]
//   blk.N.ffn_down_exps.weight   [expert_ffn, dim, n_experts]
//   ARCH.expert_count, ARCH.expert_used_count, ARCH.expert_feed_forward_length,
//   ARCH.expert_weights_norm (bool; absent = true: llama.cpp's qwen3moe graph always
//   renormalises, as the released Qwen3 MoE checkpoints' norm_topk_prob does).
#include <memory>
#include <string>

#include "lm/arch/moe_ffn.h"
#include "lm/gguf/gguf_file.h"

namespace lm {

// The architectures whose routed experts this host computes: qwen3moe, and llama files with
// experts (Mixtral); MoE files of other architectures stay refused by the loader.
bool moe_architecture_supported(const std::string& arch);

// The MoE weights of the layer whose tensors start with `block_prefix` ("blk.3."). Throws
// base::FormatError naming the file and the key or tensor that is missing or inconsistent,
// base::Unsupported for gating the host does not implement (a non-softmax gating function,
// an expert weight scale other than 1, shared experts) and for the pre-2024 layout of one
// tensor per expert.
std::shared_ptr<const MoeLayerWeights> load_moe_layer(const gguf::GgufFile& file, const std::string& arch,
                                                      const std::string& block_prefix);

}  // namespace lm
