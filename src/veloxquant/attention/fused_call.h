#pragma once
// The host's fused-attention request (lm/cache.h) as a driver call: queries [B, H_q, N, D] f32
// (read in place when contiguous, else copied into `scratch`), the cache's kv heads and the
// position of the call's first token, the layer's window and scale, the host's output buffer.
#include <cstdint>

#include "lm/cache.h"
#include "lm/tensor.h"
#include "veloxquant/attention/attention_driver.h"

namespace veloxquant::attention {

AttentionCall call_from_request(const lm::FusedAttentionRequest& request, int64_t kv_heads, int64_t first_position,
                                lm::Tensor& out, lm::Tensor& scratch);

}  // namespace veloxquant::attention
