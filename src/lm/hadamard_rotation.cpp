#include "lm/hadamard_rotation.h"

namespace lm {

bool hadamard_rotates(int64_t dim) { return dim > 0 && dim % kHadamardOrder == 0; }

void hadamard_rotate(float* x, int64_t dim) {
  constexpr float kScale = 0.125f;  // 1 / sqrt(64)
  for (int64_t base = 0; base + kHadamardOrder <= dim; base += kHadamardOrder) {
    float* v = x + base;
    // Sylvester order: after the log2(64) butterfly stages v = H64 v with H[i][j] =
    // (-1)^popcount(i & j).
    for (int64_t half = 1; half < kHadamardOrder; half *= 2) {
      for (int64_t i = 0; i < kHadamardOrder; i += 2 * half) {
        for (int64_t j = i; j < i + half; ++j) {
          const float a = v[j], b = v[j + half];
          v[j] = a + b;
          v[j + half] = a - b;
        }
      }
    }
    for (int64_t e = 0; e < kHadamardOrder; ++e) v[e] *= kScale;
  }
}

}  // namespace lm
