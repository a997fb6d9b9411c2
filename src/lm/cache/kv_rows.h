#pragma once
// Row copies shared by the host's KV caches: moving S token rows of a [B, H, S, D] tensor into
// rows [r, r + S) of a [B, H, capacity, D] buffer, converting dtype on the way.
#include <cstdint>
#include <string>

#include "lm/tensor.h"

namespace lm {

// f32, f16 or bf16: the dtypes a KV cache may be fed or store.
bool is_float_dtype(DType dtype);

// Copies src [B, H, S, D] into rows [dst_row, dst_row + S) of dst [B, H, capacity, D] (dst
// must have a contiguous innermost row; B, H and D must match), converting to dst's dtype.
void copy_token_rows(const Tensor& src, Tensor& dst, int64_t dst_row);

// mlx_lm's growth rule, shared by the host's caches: a [B, H, capacity, W] buffer that must take
// `new_tokens` more rows after its first `kept` is replaced by a fresh one of
// kept + ceil(new_tokens / step) * step rows (zeroed) with those kept rows copied in (rows a
// trim left behind and unused slack are dropped). `buffer` may be undefined when kept is 0.
Tensor grow_token_rows(const Tensor& buffer, int64_t kept, int64_t new_tokens, int64_t batch, int64_t heads,
                       int64_t width, DType dtype, int64_t step);

// "[2, 4, 8, 16]" for error messages.
std::string shape_text(const Shape& shape);

// Validates new keys/values: 4-d [B, H_kv, S, D], same B/H_kv/S, same float dtype (the value
// head dim may differ from the key head dim, as in mlx_lm). Throws base::InvalidArgument
// naming `who` and the shapes.
void check_new_tokens(const Tensor& keys, const Tensor& values, const char* who);

}  // namespace lm
