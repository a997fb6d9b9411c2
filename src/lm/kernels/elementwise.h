#pragma once
// Row-wise activation kernels of the decoder blocks: RMSNorm, softmax, SiLU/SwiGLU (llama,
// qwen) and GELU/GeGLU (gemma).
#include <cstdint>

namespace lm::kernels {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i] over n elements (out may alias x).
void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps);

// In-place softmax over n elements, max-subtracted for stability. -inf entries get 0.
void softmax(float* x, int64_t n);

// x / (1 + exp(-x)).
float silu(float x);
// gate[i] = silu(gate[i]) * up[i] over n elements — the SwiGLU of the llama FFN.
void swiglu(float* gate, const float* up, int64_t n);

// GELU in its tanh form, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): what Gemma's
// hidden_activation "gelu_pytorch_tanh" and llama.cpp's ggml_gelu compute.
float gelu_tanh(float x);
// gate[i] = gelu_tanh(gate[i]) * up[i] over n elements — the GeGLU of the Gemma FFN. geglu is
// the SIMD kernel (simd_geglu.cpp: a vector tanh, within a few ulp of the scalar one);
// geglu_reference the plain loop over gelu_tanh (libm's tanhf) the tests compare it to.
void geglu(float* gate, const float* up, int64_t n);
void geglu_reference(float* gate, const float* up, int64_t n);

}  // namespace lm::kernels
