#pragma once
// Phi-3's difference from the llama block is in its tensors: llama.cpp keeps transformers'
// fused projections, blk.N.attn_qkv.weight (rows: Q, then K, then V) and blk.N.ffn_up.weight
// (rows: gate, then up; there is no ffn_gate). lm splits each into row ranges of the same
// mapped tensor (views, nothing copied), so the llama forward runs them unchanged. Its other
// traits are already the generic ones: NeoX RoPE on phi3.rope.dimension_count dimensions
// (Phi-4-mini rotates 3/4 of each head) and a sliding window (lm/arch/sliding_window_hparams.h).
#include <string>

#include "lm/arch/llama_weights.h"
#include "lm/gguf/gguf_file.h"

namespace lm {

// Fills every tensor of layer `prefix` ("blk.N.") of a phi3 file. base::FormatError when a fused
// tensor's rows do not add up to the config's Q + K + V or 2 x FFN sizes.
void read_phi3_layer(const gguf::GgufFile& file, const ModelConfig& config, const std::string& prefix,
                     LlamaLayerWeights& layer);

// base::Unsupported for what lm does not run: LongRoPE factors (rope_factors_long/short, the
// 128k-context Phi-3 and Phi-3.5/Phi-4-mini files).
void check_phi3_supported(const gguf::GgufFile& file);

}  // namespace lm
