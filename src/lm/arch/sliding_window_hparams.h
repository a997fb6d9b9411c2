#pragma once
// A sliding window on every layer, from <arch>.attention.sliding_window:
//   mistral — its GGUF files are architecture `llama` (llama.cpp's converter writes
//     MistralForCausalLM that way). llama.cpp's `llama` loader ignores the key and attends over
//     the whole context; transformers' MistralForCausalLM applies the window, and so does lm
//     (tests/lm/hf_mistral_test.cpp).
//   phi3 — llama.cpp reads the key but disables the window ("Phi SWA is currently disabled");
//     transformers' Phi3ForCausalLM applies it, and so does lm (tests/lm/hf_phi3_test.cpp).
// Both mean: position q attends to keys k with q - window < k <= q.
#include <string>

#include "lm/arch/llama_weights.h"
#include "lm/gguf/gguf_file.h"

namespace lm {

// Sets a window on every layer when <arch>.attention.sliding_window is present and non-zero
// (0 = none, as transformers' sliding_window = None); leaves `hyper` alone without it.
// base::FormatError names a bad value.
void apply_uniform_sliding_window(const gguf::GgufFile& file, const std::string& arch, const ModelConfig& config,
                                  LlamaHyperParams& hyper);

}  // namespace lm
