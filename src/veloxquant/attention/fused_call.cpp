#include "veloxquant/attention/fused_call.h"

namespace veloxquant::attention {

AttentionCall call_from_request(const lm::FusedAttentionRequest& request, int64_t kv_heads, int64_t first_position,
                                lm::Tensor& out, lm::Tensor& scratch) {
  const lm::Tensor& q = *request.queries;
  if (!q.is_contiguous()) scratch = q.contiguous();
  AttentionCall call;
  call.queries = (scratch.defined() ? scratch : q).data<float>();
  call.batch = q.dim(0);
  call.q_heads = q.dim(1);
  call.kv_heads = kv_heads;
  call.n_queries = q.dim(2);
  call.first_position = first_position;
  call.window = request.window;
  call.scale = request.scale;
  call.out = out.data<float>();
  return call;
}

}  // namespace veloxquant::attention
