#include "veloxquant/cross_layer/token_group_quant.h"

#include <algorithm>
#include <cmath>

namespace veloxquant::cross_layer {

int64_t token_group_count(int64_t rows, int64_t group) { return (rows + group - 1) / group; }

void fit_token_group_params(const float* x, int64_t rows, int64_t dim, int64_t group, int bits,
                            TokenGroupParams* params) {
  const float levels = static_cast<float>((1 << bits) - 1);
  for (int64_t g = 0; g < token_group_count(rows, group); ++g) {
    const int64_t begin = g * group, end = std::min(rows, begin + group);
    for (int64_t d = 0; d < dim; ++d) {
      float lo = x[begin * dim + d], hi = lo;
      for (int64_t t = begin + 1; t < end; ++t) {
        lo = std::min(lo, x[t * dim + d]);
        hi = std::max(hi, x[t * dim + d]);
      }
      params[g * dim + d] = {std::max((hi - lo) / levels, 1e-8f), lo};
    }
  }
}

void quantize_token_groups(const float* x, int64_t rows, int64_t dim, int64_t group, int bits, uint8_t* codes,
                           TokenGroupParams* params) {
  fit_token_group_params(x, rows, dim, group, bits, params);
  const float levels = static_cast<float>((1 << bits) - 1);
  for (int64_t t = 0; t < rows; ++t) {
    const TokenGroupParams* p = params + (t / group) * dim;
    for (int64_t d = 0; d < dim; ++d) {
      const float q = std::nearbyint((x[t * dim + d] - p[d].min) / p[d].scale);
      codes[t * dim + d] = static_cast<uint8_t>(std::clamp(q, 0.0f, levels));
    }
  }
}

void dequantize_token_groups(const uint8_t* codes, int64_t rows, int64_t dim, int64_t group,
                             const TokenGroupParams* params, float* out) {
  dequantize_token_group_rows(codes, 0, rows, dim, group, params, out);
}

void dequantize_token_group_rows(const uint8_t* codes, int64_t first, int64_t n, int64_t dim, int64_t group,
                                 const TokenGroupParams* params, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const TokenGroupParams* p = params + ((first + t) / group) * dim;
    for (int64_t d = 0; d < dim; ++d) out[t * dim + d] = static_cast<float>(codes[t * dim + d]) * p[d].scale + p[d].min;
  }
}

}  // namespace veloxquant::cross_layer
