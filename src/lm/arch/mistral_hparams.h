#pragma once
// Mistral's difference from the llama block: sliding-window attention on every layer. Its GGUF
// files are architecture `llama` (llama.cpp's converter writes MistralForCausalLM that way); the
// window, when the file carries one, is llama.attention.sliding_window. llama.cpp's `llama`
// loader ignores that key and attends over the whole context; lm applies the window, as
// transformers' MistralForCausalLM does (tests/lm/hf_mistral_test.cpp).
#include "lm/arch/llama_weights.h"
#include "lm/gguf/gguf_file.h"

namespace lm {

// Sets a window of llama.attention.sliding_window tokens on every layer when the key is present
// and non-zero (0 = none, as transformers' sliding_window = None); leaves `hyper` alone without
// it. base::FormatError names a bad value.
void apply_llama_sliding_window(const gguf::GgufFile& file, const ModelConfig& config, LlamaHyperParams& hyper);

}  // namespace lm
