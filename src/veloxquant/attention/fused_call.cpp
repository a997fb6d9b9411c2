#include "veloxquant/attention/fused_call.h"

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"

namespace veloxquant::attention {

void check_fused_shapes(std::string_view who, const lm::Tensor& queries, const lm::Tensor& keys, int64_t batch,
                        int64_t kv_heads, int64_t dk, int64_t dv, const lm::Tensor& out) {
  const lm::Tensor& q = queries;
  const int64_t hq = q.dim(1), n = q.dim(2);
  if (q.ndim() != 4 || q.dim(0) != batch || q.dim(3) != dk || hq % kv_heads != 0 || n != keys.dim(2)) {
    throw base::InvalidArgument(std::string(who) + ": queries " + lm::shape_text(q.shape()) + " do not fit keys " +
                                lm::shape_text(keys.shape()));
  }
  // Compared extent by extent: building an lm::Shape here would allocate on every decode step.
  const bool out_fits = out.ndim() == 4 && out.dim(0) == batch && out.dim(1) == hq && out.dim(2) == n &&
                        out.dim(3) == dv && out.dtype() == lm::DType::F32 && out.is_contiguous();
  if (!out_fits) {
    throw base::InvalidArgument(std::string(who) + ": out must be f32 " + lm::shape_text({batch, hq, n, dv}) +
                                ", got " + lm::shape_text(out.shape()));
  }
}

base::ThreadPool* request_pool(const lm::FusedAttentionRequest& request) {
  return request.pool != nullptr ? request.pool : &base::ThreadPool::global();
}

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
