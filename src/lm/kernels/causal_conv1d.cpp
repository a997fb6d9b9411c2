#include "lm/kernels/causal_conv1d.h"

namespace lm::kernels {

// Channels are independent and contiguous in every operand, so the innermost loop is a plain
// multiply-add over channels that the compiler vectorises; a token's window is read from the
// history for its first L-1-t taps and from the input for the rest.
void causal_conv1d(const float* history, const float* input, int64_t n, int64_t channels, const float* taps,
                   int64_t kernel_size, float* out) {
  const int64_t past = kernel_size - 1;
  for (int64_t t = 0; t < n; ++t) {
    float* __restrict o = out + t * channels;
    for (int64_t c = 0; c < channels; ++c) o[c] = 0.0f;
    for (int64_t j = 0; j < kernel_size; ++j) {
      const int64_t src = t - past + j;  // position of this tap's input, relative to input[0]
      const float* __restrict x = src < 0 ? history + (past + src) * channels : input + src * channels;
      const float* __restrict w = taps + j * channels;
      for (int64_t c = 0; c < channels; ++c) o[c] += w[c] * x[c];
    }
  }
}

}  // namespace lm::kernels
