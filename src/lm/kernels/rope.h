#pragma once
// Rotary position embedding. Two pairings exist in GGUF models:
//  - kNormal: adjacent pairs (x[2i], x[2i+1]). llama2.c and llama.cpp's LLAMA_ROPE_TYPE_NORM
//    use it; the HF->GGUF converter permutes llama's q/k weights so this pairing is right.
//  - kNeox: halves (x[i], x[i + d/2]), the HF rotate_half layout, used by qwen2/qwen3.
// Pair i rotates by angle pos * theta^(-2i / rope_dim). Dimensions past rope_dim are left
// unrotated (partial rotary).
#include <cstdint>

namespace lm::kernels {

enum class RopeStyle { kNormal, kNeox };

// x is [n_tokens, n_heads, head_dim] row-major; token t has position pos0 + t.
void rope(float* x, int64_t n_tokens, int n_heads, int head_dim, int64_t pos0, float theta, RopeStyle style,
          int rope_dim = 0);

}  // namespace lm::kernels
