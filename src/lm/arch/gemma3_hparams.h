#pragma once
// Gemma 3's differences from the llama block, read from a GGUF file's gemma3.* metadata where
// the file has them and otherwise set the way llama.cpp sets them for this architecture (its
// GGUF files carry neither the sliding-window pattern nor the sliding layers' RoPE base).
#include "lm/arch/llama_weights.h"
#include "lm/gguf/gguf_file.h"

namespace lm {

// Fills `hyper` for a gemma3 model described by `config` (already read from the file):
// GeGLU FFN, NeoX RoPE, embeddings times sqrt(dim), five sliding-window layers out of every
// six (window = gemma3.attention.sliding_window) with RoPE base 10^4 on them and
// config.rope_theta on the global ones. base::FormatError names a bad value.
void apply_gemma3_hparams(const gguf::GgufFile& file, const ModelConfig& config, LlamaHyperParams& hyper);

// What Gemma 2 and Gemma 3 share (lm/arch/gemma2_hparams.h uses it too): GeGLU FFN, NeoX RoPE,
// embeddings times sqrt(dim), and the softmax scale query_pre_attn_scalar^-1/2. GGUF files do
// not carry query_pre_attn_scalar; it equals head_dim for every size but the 27B one
// (`big_model_layers` layers), where it is dim / heads, as llama.cpp assumes.
void apply_gemma_block(const ModelConfig& config, int big_model_layers, LlamaHyperParams& hyper);

}  // namespace lm
