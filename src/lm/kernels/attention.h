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
#include <cstdint>
#include <optional>

#include "lm/cache.h"
#include "lm/tensor.h"

namespace base {
class ThreadPool;
}

namespace lm::kernels {

// Writes [B, H_q, N, D] f32 into `out` (allocated here when undefined or mis-shaped).
// Throws base::InvalidArgument naming the mismatch for inconsistent shapes or dtypes.
void attention(const Tensor& queries, const Tensor& keys, const Tensor& values, const AttentionMask& mask,
               std::optional<int64_t> window, float scale, Tensor& out, base::ThreadPool* pool);

// Unthreaded, straightforward version (f32 copies of everything) for tests.
void attention_reference(const Tensor& queries, const Tensor& keys, const Tensor& values,
                         const AttentionMask& mask, std::optional<int64_t> window, float scale, Tensor& out);

}  // namespace lm::kernels
