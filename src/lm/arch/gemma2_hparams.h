#pragma once
// Gemma 2's differences from the llama block, read from a GGUF file's gemma2.* metadata where
// the file has them and otherwise set as llama.cpp sets them for this architecture: what it
// shares with Gemma 3 (lm/arch/gemma3_hparams.h's apply_gemma_block: GeGLU, NeoX RoPE,
// embeddings x sqrt(dim), query_pre_attn_scalar), sandwich norms (optional tensors the loader
// already reads), and its own:
//   - local/global alternation: even layers attend over a sliding window
//     (gemma2.attention.sliding_window, 4096 when absent), odd layers over everything;
//   - attention logit soft-capping (gemma2.attn_logit_softcapping, 50 when absent) and final
//     logit soft-capping (gemma2.final_logit_softcapping, 30 when absent): x -> cap tanh(x / cap).
// One RoPE base for every layer (gemma2.rope.freq_base).
#include "lm/arch/llama_weights.h"
#include "lm/gguf/gguf_file.h"

namespace lm {

// base::FormatError names a bad value.
void apply_gemma2_hparams(const gguf::GgufFile& file, const ModelConfig& config, LlamaHyperParams& hyper);

}  // namespace lm
