#pragma once
// The causal depthwise convolution of LFM2's short-convolution blocks (transformers'
// Lfm2ShortConv: nn.Conv1d(groups = channels, padding = L - 1) truncated to the sequence, which
// is llama.cpp's ggml_ssm_conv over the state-prefixed input). No bias: LFM2 checkpoints have
// conv_bias = false and llama.cpp's GGUF layout has no bias tensors for these blocks.
//
// Every channel c is filtered on its own over time with L taps:
//   out[t][c] = sum_{j=0}^{L-1} taps[j][c] * in[t - (L-1) + j][c]
// so tap L-1 weighs the current token and tap 0 the oldest one. Inputs before the first token
// of the sequence are zero (torch's left padding); when decoding, the L-1 inputs before this
// call come from the recurrent state (lm::ConvStateCache).
#include <cstdint>

namespace lm::kernels {

// history: the L-1 inputs just before `input`, oldest first, [L-1][channels];
// input: [n][channels]; taps: tap-major [L][channels] (the GGUF/torch [channels][L] layout
// transposed once, so that the loop over channels reads both operands contiguously);
// out: [n][channels] (must not alias input or history).
void causal_conv1d(const float* history, const float* input, int64_t n, int64_t channels, const float* taps,
                   int64_t kernel_size, float* out);

}  // namespace lm::kernels
