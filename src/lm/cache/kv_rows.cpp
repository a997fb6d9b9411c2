#include "lm/cache/kv_rows.h"

#include "base/error.h"

namespace lm {

bool is_float_dtype(DType dtype) { return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16; }

std::string shape_text(const Shape& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

void check_new_tokens(const Tensor& keys, const Tensor& values, const char* who) {
  if (!keys.defined() || !values.defined() || keys.ndim() != 4 || values.ndim() != 4) {
    throw base::InvalidArgument(std::string(who) + ": keys and values must be 4-d [B, H_kv, S, D], got keys " +
                                shape_text(keys.shape()) + " and values " + shape_text(values.shape()));
  }
  if (keys.dim(0) != values.dim(0) || keys.dim(1) != values.dim(1) || keys.dim(2) != values.dim(2)) {
    throw base::InvalidArgument(std::string(who) + ": keys " + shape_text(keys.shape()) + " and values " +
                                shape_text(values.shape()) + " disagree on B, H_kv or S");
  }
  if (keys.dtype() != values.dtype()) {
    throw base::InvalidArgument(std::string(who) + ": keys are " + std::string(dtype_name(keys.dtype())) +
                                " but values are " + std::string(dtype_name(values.dtype())));
  }
  if (!is_float_dtype(keys.dtype())) {
    throw base::InvalidArgument(std::string(who) + ": keys/values must be f32, f16 or bf16, got " +
                                std::string(dtype_name(keys.dtype())));
  }
}

Tensor grow_token_rows(const Tensor& buffer, int64_t kept, int64_t new_tokens, int64_t batch, int64_t heads,
                       int64_t width, DType dtype, int64_t step) {
  const int64_t capacity = kept + (new_tokens + step - 1) / step * step;
  Tensor next({batch, heads, capacity, width}, dtype);
  if (kept > 0) copy_token_rows(buffer.slice(2, 0, kept), next, 0);
  return next;
}

void copy_token_rows(const Tensor& src, Tensor& dst, int64_t dst_row) {
  // A contiguous source (every decode step's new rows) is read in place: contiguous() returns a
  // copy of the tensor, whose shape and strides are two heap allocations per call.
  Tensor copied;
  if (src.defined() && !src.is_contiguous()) copied = src.contiguous();
  const Tensor& s = copied.defined() ? copied : src;
  const int64_t batch = s.dim(0), heads = s.dim(1), rows = s.dim(2), width = s.dim(3);
  if (dst.ndim() != 4 || dst.dim(0) != batch || dst.dim(1) != heads || dst.dim(3) != width || dst_row < 0 ||
      dst_row + rows > dst.dim(2) || dst.strides()[3] != 1 || dst.strides()[2] != width) {
    throw base::InvalidArgument("copy_token_rows: cannot place " + shape_text(s.shape()) + " at row " +
                                std::to_string(dst_row) + " of " + shape_text(dst.shape()));
  }
  if (rows == 0) return;
  const std::size_t src_esize = s.element_size();
  const std::size_t dst_esize = dst.element_size();
  const auto& ds = dst.strides();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const std::byte* from = s.raw_data() + ((b * heads + h) * rows * width) * static_cast<int64_t>(src_esize);
      std::byte* to = dst.raw_data() + (b * ds[0] + h * ds[1] + dst_row * ds[2]) * static_cast<int64_t>(dst_esize);
      // The rows of one head are adjacent in both tensors (innermost two axes contiguous), so
      // one conversion call per head covers all S rows.
      convert_elements(from, s.dtype(), to, dst.dtype(), static_cast<std::size_t>(rows * width));
    }
  }
}

}  // namespace lm
