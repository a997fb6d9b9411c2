#pragma once
// SIMD loading of KV rows stored in llama.cpp's block types (lm/cache/kv_cache_type.h) into f32:
// the attention kernel reads its tile of rows through this, so a quantized cache is never
// widened as a whole. Matches lm::dequantize_kv_row bit for bit (each element is one integer
// code times the block's f16 scale, a single rounding either way).
#include <cstddef>
#include <cstdint>

#include "lm/cache/kv_cache_type.h"

namespace lm::kernels::simd {

// Row r of the tile starts at src + r * row_stride bytes and holds d elements (d a multiple
// of 32); they land at dst + r * d. `type` must be a block type.
void dequantize_kv_rows(KVCacheType type, const std::byte* src, int64_t row_stride, int64_t n_rows, int64_t d,
                        float* dst);

}  // namespace lm::kernels::simd
