#pragma once
// Element types of host tensors (activations and KV). Weight formats (GGUF block types) live
// in gguf_types.h; these are the three float types a KV cache may be fed.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lm {

enum class DType : uint8_t { F32, F16, BF16, U8, I32, U32 };

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
// Parses "f32", "f16", "bf16" (what --kv-dtype accepts); throws base::InvalidArgument.
DType parse_float_dtype(std::string_view name);

}  // namespace lm
