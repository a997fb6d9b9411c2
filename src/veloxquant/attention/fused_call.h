#pragma once
// The host's fused-attention request (lm/cache/cache.h) as a driver call: queries [B, H_q, N, D] f32
// (read in place when contiguous, else copied into `scratch`), the cache's kv heads and the
// position of the call's first token, the layer's window and scale, the host's output buffer.
#include <cstdint>
#include <string>
#include <string_view>

#include "lm/cache/cache.h"
#include "lm/tensor.h"
#include "veloxquant/attention/attention_driver.h"

namespace veloxquant::attention {

// Throws base::InvalidArgument naming `who` unless the queries [B, H_q, N, dk] fit the call's
// keys (batch, H_q a multiple of kv_heads, N their token count) and out is a contiguous f32
// [B, H_q, N, dv]: the shape checks every cache's fused_attention makes before attending.
void check_fused_shapes(std::string_view who, const lm::Tensor& queries, const lm::Tensor& keys, int64_t batch,
                        int64_t kv_heads, int64_t dk, int64_t dv, const lm::Tensor& out);

// The pool a cache's fused attention runs on: the host's (request.pool) or, without one,
// base::ThreadPool::global().
base::ThreadPool* request_pool(const lm::FusedAttentionRequest& request);

AttentionCall call_from_request(const lm::FusedAttentionRequest& request, int64_t kv_heads, int64_t first_position,
                                lm::Tensor& out, lm::Tensor& scratch);

}  // namespace veloxquant::attention
