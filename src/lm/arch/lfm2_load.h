#pragma once
// LFM2 (Liquid AI; transformers' Lfm2ForCausalLM, llama.cpp's arch "lfm2") from a GGUF file:
// a llama-style decoder whose layers are either GQA attention with per-head Q/K RMSNorm or a
// gated short convolution (lm/arch/shortconv_block.h), each followed by a SwiGLU FFN. It runs
// on lm::LlamaModel, which takes a layer's shortconv weights in place of attention.
//
// What the file says, as llama.cpp's converter writes it and its loader reads it:
//   lfm2.attention.head_count_kv   per-layer array; 0 marks a conv layer
//   lfm2.shortconv.l_cache         the conv kernel size L (the state keeps L-1 inputs)
//   blk.N.shortconv.{conv,in_proj,out_proj}.weight on conv layers (conv: ne = {L, dim})
//   blk.N.attn_{q,k,v,output,q_norm,k_norm}.weight on attention layers
//   blk.N.attn_norm (transformers' operator_norm), blk.N.ffn_{norm,gate,up,down}
//   token_embd_norm.weight         the final norm (transformers' embedding_norm, applied last)
// RoPE is the NeoX (rotate-half) pairing; the head is tied unless output.weight is present.
#include <memory>

#include "lm/arch/llama_model.h"
#include "lm/gguf/gguf_file.h"
#include "lm/load.h"

namespace lm {

// base::FormatError (missing or inconsistent metadata or tensors, naming them) or
// base::Unsupported (features outside this description: RoPE scaling, MoE, attention layers
// with different KV head counts, conv biases).
std::shared_ptr<LlamaModel> load_lfm2_model(const gguf::GgufFile& file, const LoadOptions& options);

}  // namespace lm
