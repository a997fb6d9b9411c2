#include "lm/cache/kv_cache_type.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/half.h"
#include "lm/weights/block_formats.h"
#include "lm/weights/dequantize.h"

namespace lm {

namespace {

void require_block_type(KVCacheType type, const char* who) {
  if (!is_block_kv_type(type)) {
    throw base::InvalidArgument(std::string(who) + ": " + std::string(kv_cache_type_name(type)) +
                                " is not a block type (q8_0, q5_0 or q4_0)");
  }
}

// The element of largest magnitude with its sign; the first one wins ties (ggml's q4_0/q5_0).
float signed_absmax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK8_0; ++b, x += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = base::f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

// q4_0 and q5_0 share the rule: the signed extreme maps to code 0, so d = extreme / -offset
// and x / d + offset lies in [0, 2 * offset]; + 0.5 then truncation rounds, and the top code
// is clipped to 2^bits - 1 (only the side opposite the extreme can reach 2 * offset). ggml
// truncates through int8_t; over that range (0.5 .. 2 * offset + 0.5, within int8_t) a
// truncation to int gives the same code.
template <int kOffset>
uint8_t code_of(float x, float id) {
  const int q = static_cast<int>(x * id + (static_cast<float>(kOffset) + 0.5f));
  return static_cast<uint8_t>(std::min(2 * kOffset - 1, q));
}

// One template for both nibble formats: q4_0 (offset 8, codes 0..15) and q5_0 (offset 16, codes
// 0..31, whose fifth bits go to qh; q4_0's codes never have one).
template <class Block, int kOffset>
void quantize_row_nibbles(const float* x, Block* y, int64_t n) {
  constexpr int half = kKVBlockElements / 2;
  for (int64_t b = 0; b < n / kKVBlockElements; ++b, x += kKVBlockElements) {
    const float d = signed_absmax(x, kKVBlockElements) / -static_cast<float>(kOffset);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = base::f32_to_f16(d);
    uint32_t qh = 0;
    for (int j = 0; j < half; ++j) {
      const uint8_t lo = code_of<kOffset>(x[j], id), hi = code_of<kOffset>(x[j + half], id);
      y[b].qs[j] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
      qh |= static_cast<uint32_t>(lo >> 4) << j | static_cast<uint32_t>(hi >> 4) << (j + half);
    }
    if constexpr (kOffset == 16) std::memcpy(y[b].qh, &qh, sizeof qh);  // little-endian, as ggml stores it
  }
}

}  // namespace

KVCacheType parse_kv_cache_type(std::string_view name) {
  if (name == "f32" || name == "float32") return KVCacheType::F32;
  if (name == "f16" || name == "float16") return KVCacheType::F16;
  if (name == "bf16" || name == "bfloat16") return KVCacheType::BF16;
  if (name == "q8_0") return KVCacheType::Q8_0;
  if (name == "q5_0") return KVCacheType::Q5_0;
  if (name == "q4_0") return KVCacheType::Q4_0;
  throw base::InvalidArgument("unknown KV cache type '" + std::string(name) +
                              "' (expected f16, bf16, f32, q8_0, q5_0 or q4_0)");
}

std::string_view kv_cache_type_name(KVCacheType type) {
  switch (type) {
    case KVCacheType::F32:
      return "f32";
    case KVCacheType::F16:
      return "f16";
    case KVCacheType::BF16:
      return "bf16";
    case KVCacheType::Q8_0:
      return "q8_0";
    case KVCacheType::Q5_0:
      return "q5_0";
    case KVCacheType::Q4_0:
      return "q4_0";
  }
  return "?";
}

bool is_block_kv_type(KVCacheType type) {
  return type == KVCacheType::Q8_0 || type == KVCacheType::Q5_0 || type == KVCacheType::Q4_0;
}

DType kv_feed_dtype(KVCacheType type) {
  switch (type) {
    case KVCacheType::F16:
      return DType::F16;
    case KVCacheType::BF16:
      return DType::BF16;
    default:
      return DType::F32;
  }
}

KVCacheType kv_cache_type_of(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return KVCacheType::F32;
    case DType::F16:
      return KVCacheType::F16;
    case DType::BF16:
      return KVCacheType::BF16;
    default:
      break;
  }
  throw base::InvalidArgument("KV dtype must be f32, f16 or bf16, got " + std::string(dtype_name(dtype)));
}

std::size_t kv_block_bytes(KVCacheType type) {
  switch (type) {
    case KVCacheType::Q8_0:
      return sizeof(BlockQ8_0);
    case KVCacheType::Q5_0:
      return sizeof(BlockQ5_0);
    case KVCacheType::Q4_0:
      return sizeof(BlockQ4_0);
    default:
      break;
  }
  require_block_type(type, "kv_block_bytes");
  return 0;
}

std::size_t kv_row_bytes(KVCacheType type, int64_t d) {
  if (!is_block_kv_type(type)) return static_cast<std::size_t>(d) * dtype_size(kv_feed_dtype(type));
  if (d <= 0 || d % kKVBlockElements != 0) {
    throw base::InvalidArgument("KV cache type " + std::string(kv_cache_type_name(type)) +
                                " needs a head dim that is a multiple of 32, got " + std::to_string(d));
  }
  return static_cast<std::size_t>(d / kKVBlockElements) * kv_block_bytes(type);
}

void quantize_kv_row(KVCacheType type, const float* src, void* dst, int64_t d) {
  kv_row_bytes(type, d);  // validates d
  switch (type) {
    case KVCacheType::Q8_0:
      return quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), d);
    case KVCacheType::Q5_0:
      return quantize_row_nibbles<BlockQ5_0, 16>(src, static_cast<BlockQ5_0*>(dst), d);
    case KVCacheType::Q4_0:
      return quantize_row_nibbles<BlockQ4_0, 8>(src, static_cast<BlockQ4_0*>(dst), d);
    default:
      break;
  }
  require_block_type(type, "quantize_kv_row");
}

void dequantize_kv_row(KVCacheType type, const void* src, float* dst, int64_t d) {
  kv_row_bytes(type, d);
  switch (type) {
    case KVCacheType::Q8_0:
      return dequantize_row_q8_0(src, dst, d);
    case KVCacheType::Q5_0:
      return dequantize_row_q5_0(src, dst, d);
    case KVCacheType::Q4_0:
      return dequantize_row_q4_0(src, dst, d);
    default:
      break;
  }
  require_block_type(type, "dequantize_kv_row");
}

}  // namespace lm
