// Highway's foreach_target re-includes this file once per SIMD target; HWY_EXPORT and
// HWY_DYNAMIC_DISPATCH pick the best compiled target on first call.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "lm/kernels/kv_block_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cstring>

#include "base/error.h"
#include "base/half.h"
#include "lm/kernels/kv_block_simd.h"
#include "lm/weights/block_formats.h"

HWY_BEFORE_NAMESPACE();
namespace lm::kernels::simd {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 lanes: half a block (16 codes) is then a whole number of vectors on every target.
using DF = hn::CappedTag<float, 16>;
using DI = hn::Rebind<int32_t, DF>;
using DU = hn::Rebind<uint32_t, DF>;

// y = d * (code - offset), code given as i32 lanes: the scalar reference's expression.
HWY_INLINE void store_scaled(DF df, hn::Vec<DI> code, int32_t offset, float d, float* dst) {
  const DI di;
  hn::StoreU(hn::Mul(hn::Set(df, d), hn::ConvertTo(df, hn::Sub(code, hn::Set(di, offset)))), df, dst);
}

void DequantizeQ8_0(const BlockQ8_0* block, float* y) {
  const DF df;
  const DI di;
  const hn::Rebind<int8_t, DF> d8;
  const int N = static_cast<int>(hn::Lanes(df));
  const float d = base::f16_to_f32(block->d);
  for (int i = 0; i < kQK8_0; i += N) store_scaled(df, hn::PromoteTo(di, hn::LoadU(d8, block->qs + i)), 0, d, y + i);
}

// Low nibbles are elements 0..15, high nibbles 16..31 (q4_0 and q5_0 alike); q5_0 adds bit j
// of qh as the fifth bit of element j.
template <bool kFifthBit>
void DequantizeNibbles(const uint16_t scale, const uint8_t* qs, uint32_t qh, int32_t offset, float* y) {
  const DF df;
  const DI di;
  const DU du;
  const hn::Rebind<uint8_t, DF> d8;
  const int N = static_cast<int>(hn::Lanes(df));
  const float d = base::f16_to_f32(scale);
  for (int i = 0; i < 16; i += N) {
    const auto bytes = hn::PromoteTo(di, hn::LoadU(d8, qs + i));
    auto lo = hn::And(bytes, hn::Set(di, 0x0f));
    auto hi = hn::ShiftRight<4>(bytes);
    if constexpr (kFifthBit) {
      const auto bits = hn::Set(du, qh);
      const auto one = hn::Set(du, 1u);
      const auto lane = hn::Iota(du, static_cast<uint32_t>(i));
      lo = hn::Or(lo, hn::BitCast(di, hn::ShiftLeft<4>(hn::And(hn::Shr(bits, lane), one))));
      hi = hn::Or(hi, hn::BitCast(di, hn::ShiftLeft<4>(hn::And(hn::Shr(bits, hn::Add(lane, hn::Set(du, 16u))), one))));
    }
    store_scaled(df, lo, offset, d, y + i);
    store_scaled(df, hi, offset, d, y + 16 + i);
  }
}

void DequantizeKVRows(KVCacheType type, const std::byte* src, int64_t row_stride, int64_t n_rows, int64_t d,
                      float* dst) {
  const int64_t blocks = d / kKVBlockElements;
  for (int64_t r = 0; r < n_rows; ++r, src += row_stride) {
    float* y = dst + r * d;
    for (int64_t b = 0; b < blocks; ++b, y += kKVBlockElements) {
      switch (type) {
        case KVCacheType::Q8_0:
          DequantizeQ8_0(reinterpret_cast<const BlockQ8_0*>(src) + b, y);
          break;
        case KVCacheType::Q5_0: {
          const BlockQ5_0& block = reinterpret_cast<const BlockQ5_0*>(src)[b];
          uint32_t qh;
          std::memcpy(&qh, block.qh, sizeof qh);
          DequantizeNibbles<true>(block.d, block.qs, qh, 16, y);
          break;
        }
        case KVCacheType::Q4_0: {
          const BlockQ4_0& block = reinterpret_cast<const BlockQ4_0*>(src)[b];
          DequantizeNibbles<false>(block.d, block.qs, 0, 8, y);
          break;
        }
        default:
          return;  // validated by the dispatcher
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace lm::kernels::simd
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lm::kernels::simd {

HWY_EXPORT(DequantizeKVRows);

void dequantize_kv_rows(KVCacheType type, const std::byte* src, int64_t row_stride, int64_t n_rows, int64_t d,
                        float* dst) {
  kv_row_bytes(type, d);  // throws for a head dim that is not a multiple of 32
  if (!is_block_kv_type(type)) {
    throw base::InvalidArgument("dequantize_kv_rows: " + std::string(kv_cache_type_name(type)) +
                                " is not a block type");
  }
  HWY_DYNAMIC_DISPATCH(DequantizeKVRows)(type, src, row_stride, n_rows, d, dst);
}

}  // namespace lm::kernels::simd
#endif
