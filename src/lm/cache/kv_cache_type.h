#pragma once
// Element types of the host's own KV cache (--kv-dtype): the three float types, and llama.cpp's
// block-quantized cache types q8_0, q5_0 and q4_0 with llama.cpp's exact block layouts
// (lm/weights/block_formats.h), so that `-ctk q4_0 -ctv q4_0` has a like-for-like counterpart.
//
// A block type stores each row of D elements (D a multiple of 32) as D / 32 blocks of one f16
// scale d and 32 integer codes: q8_0 x = d*q (34 bytes), q5_0 x = d*(q - 16) (22 bytes), q4_0
// x = d*(q - 8) (18 bytes), i.e. 8.5, 5.5 and 4.5 bits per element.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lm/dtype.h"

namespace lm {

enum class KVCacheType : uint8_t { F32, F16, BF16, Q8_0, Q5_0, Q4_0 };

// Parses a --kv-dtype value: f32, f16, bf16 (also float32 / float16 / bfloat16), q8_0, q5_0 or
// q4_0. Throws base::InvalidArgument naming the value and the accepted names.
KVCacheType parse_kv_cache_type(std::string_view name);
std::string_view kv_cache_type_name(KVCacheType type);

bool is_block_kv_type(KVCacheType type);
// The float dtype of a float type. Block types are fed f32 rows (what llama.cpp quantizes its
// cache from), so their dtype is F32.
DType kv_feed_dtype(KVCacheType type);
// The float type for a float dtype (F32, F16, BF16); throws base::InvalidArgument otherwise.
KVCacheType kv_cache_type_of(DType dtype);

inline constexpr int64_t kKVBlockElements = 32;
// Bytes of one block of a block type (34, 22, 18).
std::size_t kv_block_bytes(KVCacheType type);
// Bytes of a row of `d` elements; throws base::InvalidArgument when `d` is not a positive
// multiple of 32 for a block type.
std::size_t kv_row_bytes(KVCacheType type, int64_t d);

// llama.cpp's reference quantizers (ggml's quantize_row_*_ref rounding, reimplemented): d
// elements (a multiple of 32) of `src` into d / 32 blocks at `dst`.
//   q8_0: d = max|x| / 127, q = round(x / d) (half away from zero);
//   q5_0, q4_0: m = the element of largest magnitude (sign kept, first one on ties),
//     d = m / -16 (q5_0) or m / -8 (q4_0), q = min(31 or 15, trunc(x / d + 16.5 or 8.5)).
// The codes are computed with the f32 scale; the block stores it rounded to f16.
void quantize_kv_row(KVCacheType type, const float* src, void* dst, int64_t d);
// The plain scalar inverse (the reference the SIMD tile loader is tested against).
void dequantize_kv_row(KVCacheType type, const void* src, float* dst, int64_t d);

}  // namespace lm
