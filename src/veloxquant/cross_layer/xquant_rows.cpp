#include "veloxquant/cross_layer/xquant_rows.h"

#include <algorithm>

#include "lm/tensor.h"
#include "veloxquant/cross_layer/xquant_cache.h"

namespace veloxquant {

XQuantRows::XQuantRows(const XQuantCache& cache)
    : attention::DecodedRunRows(cache.dk_, cache.dv_, cache.offset_, cache.frontier_, cache.tail_k_, cache.tail_v_),
      cache_(cache) {}

int64_t XQuantRows::decode_run(int64_t b, int64_t h, int64_t a, int64_t end, bool keys, attention::TileScratch& scratch,
                               const float** rows) const {
  const int64_t d = keys ? cache_.dk_ : cache_.dv_;
  // Blocks are in token order and tile the quantized rows: the first one that ends past `a`.
  const auto& blocks = cache_.blocks_;
  const auto block = std::upper_bound(blocks.begin(), blocks.end(), a, [](int64_t row, const XQuantCache::Block& blk) {
    return row < blk.token_start + blk.rows;
  });
  const int64_t run_end = std::min(end, block->token_start + block->rows);
  const std::size_t n = static_cast<std::size_t>((run_end - a) * d);
  float* decoded = scratch.f32(n);
  float* residual = scratch.f32_second(n);
  // Codes, then the decoded rows in the cache's dtype: room for both uses.
  uint8_t* bytes = scratch.u8(n * sizeof(float));
  // (Split-K may start a run anywhere: decode_rows takes each row's own token group.)
  cache_.decode_rows(*block, b, h, keys, a - block->token_start, run_end - a, decoded, bytes, residual);
  if (cache_.dtype_ != lm::DType::F32) {
    // The values update_and_fetch returns: decoded rows rounded to the cache's dtype (the model's
    // KV dtype, f16 by default), so both paths attend over the same values and differ only in
    // summation order.
    auto* raw = reinterpret_cast<std::byte*>(decoded);
    lm::convert_elements(raw, lm::DType::F32, reinterpret_cast<std::byte*>(bytes), cache_.dtype_, n);
    lm::convert_elements(reinterpret_cast<const std::byte*>(bytes), cache_.dtype_, raw, lm::DType::F32, n);
  }
  *rows = decoded;
  return run_end;
}

}  // namespace veloxquant
