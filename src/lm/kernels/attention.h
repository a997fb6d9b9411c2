#pragma once
// Scaled dot-product attention over what a KV cache returned.
//
// queries [B, H_q, N, D] f32; keys/values [B, H_kv, T, D] in f32, f16 or bf16, read in place
// through their strides (a cache may return views into its growing buffers — no copy, no
// f32 conversion of the whole cache). Grouped-query attention maps query head h to kv head
// h / (H_q / H_kv) without duplicating keys. The N queries are the last N of the T positions.
//
// Visibility of key j to query i (position p_i = T - N + i):
//   kNone     every key;
//   kCausal   j <= p_i, and p_i - j < window when the layer has a sliding window;
//   kExplicit mask[b or 0, 0, i, j] != 0 (U8 [B or 1, 1, N, T]; the cache already applied
//             any window).
// A query that sees no key gets a zero output row.
//
// softcap > 0 soft-caps every scaled score, s -> softcap * tanh(s / softcap), before the
// softmax (Gemma 2's attention logit soft-capping); 0 = none.
#include <cstdint>
#include <optional>

#include "lm/cache/cache.h"
#include "lm/cache/kv_cache_type.h"
#include "lm/tensor.h"

namespace base {
class ThreadPool;
}

namespace lm::kernels {

// Writes [B, H_q, N, D] f32 into `out` (allocated here when undefined or mis-shaped).
// Throws base::InvalidArgument naming the mismatch for inconsistent shapes or dtypes.
void attention(const Tensor& queries, const Tensor& keys, const Tensor& values, const AttentionMask& mask,
               std::optional<int64_t> window, float scale, Tensor& out, base::ThreadPool* pool, float softcap = 0.0f);

// Keys or values stored in one of llama.cpp's block types (lm/cache/kv_cache_type.h): `blocks` is U8
// [B, H_kv, capacity, row bytes] (rows contiguous inside), rows [0, rows) are valid and hold
// `dim` elements each.
struct BlockRows {
  const Tensor* blocks = nullptr;
  KVCacheType type = KVCacheType::Q8_0;
  int64_t rows = 0;
  int64_t dim = 0;
};

// attention() over block rows, with the same driver: each tile of rows is widened to f32 as it
// is read (kernels/kv_block_simd.h), never the whole cache, so the result equals attention()
// over the dequantized rows. Throws base::InvalidArgument for shapes that do not fit.
void attention_blocks(const Tensor& queries, const BlockRows& keys, const BlockRows& values, const AttentionMask& mask,
                      std::optional<int64_t> window, float scale, Tensor& out, base::ThreadPool* pool);

// Unthreaded, straightforward version (f32 copies of everything) for tests.
void attention_reference(const Tensor& queries, const Tensor& keys, const Tensor& values, const AttentionMask& mask,
                         std::optional<int64_t> window, float scale, Tensor& out, float softcap = 0.0f);

}  // namespace lm::kernels
