// Highway kernel for affine_part_rows.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/affine_part_rows.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cstring>

#include "base/half.h"
#include "veloxquant/attention/affine_part_rows.h"

#ifndef VQ_AFFINE_PART_ROWS_ONCE
#define VQ_AFFINE_PART_ROWS_ONCE
namespace veloxquant::attention::kernels::detail {
// Code i of a dense LSB-first stream of `bits`-bit codes.
inline uint32_t dense_code(const uint8_t* packed, int64_t i, int bits) {
  uint32_t code = 0;
  for (int k = 0; k < bits; ++k) {
    const int64_t bit = i * bits + k;
    code |= static_cast<uint32_t>((packed[bit / 8] >> (bit % 8)) & 1u) << k;
  }
  return code;
}
}  // namespace veloxquant::attention::kernels::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One part's codes: a vector of L codes at a time (L <= 8 lanes, so L * bits <= 32 for bits <= 4
// and the L codes lie in one 32-bit window from the byte holding the first one); 8-bit codes are
// widened from bytes.
// One part's (scale, min) from its row header, widened in a register (exact, as base::f16_to_f32).
HWY_INLINE void PartParams(const uint8_t* header, float* scale, float* lo) {
  const hn::CappedTag<float, 4> d4;
  if (hn::Lanes(d4) >= 2) {
    const hn::Rebind<hwy::float16_t, decltype(d4)> dh;
    HWY_ALIGN hwy::float16_t half[4] = {};
    HWY_ALIGN float params[4];
    std::memcpy(half, header, 4);
    hn::Store(hn::PromoteTo(d4, hn::Load(dh, half)), d4, params);
    *scale = params[0];
    *lo = params[1];
  } else {
    uint16_t bits[2];
    std::memcpy(bits, header, 4);
    *scale = base::f16_to_f32(bits[0]);
    *lo = base::f16_to_f32(bits[1]);
  }
}

// Parts outer, rows inner: a part sits at the same offset of every row, so its shift and mask
// vectors are set up once per tile. A vector of L codes (L <= 8 lanes, so L * bits <= 32 for
// bits <= 4) lies in one 32-bit window from the byte holding its first code; 8-bit codes are
// widened from bytes. The last, partial vector of a part reads no byte past it and is stored
// masked.
void DecodeAffinePartRowsImpl(const uint8_t* first_row, int64_t row_stride, int64_t n_rows, const AffinePart* parts,
                              int64_t n_parts, float* out, int64_t out_stride) {
  const hn::CappedTag<float, 8> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t offset = 0;
  for (int64_t p = 0; p < n_parts; ++p) {
    const int64_t count = parts[p].count, bytes = (count * parts[p].bits + 7) / 8;
    const int bits = parts[p].bits;
    const uint8_t* header = first_row + offset;
    float* dst = out + parts[p].first;
    offset += affine_part_bytes(parts[p]);
    if (bits == 1 || bits == 2 || bits == 4) {
      const auto shifts = hn::Mul(hn::Iota(du, 0), hn::Set(du, static_cast<uint32_t>(bits)));
      const auto mask = hn::Set(du, (1u << bits) - 1u);
      for (int64_t j = 0; j < n_rows; ++j, header += row_stride, dst += out_stride) {
        float scale, lo;
        PartParams(header, &scale, &lo);
        const auto vs = hn::Set(df, scale), vl = hn::Set(df, lo);
        const uint8_t* packed = header + 4;
        for (int64_t i = 0; i < count; i += lanes) {
          const int64_t bit = i * bits, byte = bit / 8;
          uint32_t window = 0;
          if (byte + 4 <= bytes) {
            std::memcpy(&window, packed + byte, 4);
          } else {
            for (int64_t k = 0; k < bytes - byte; ++k) window |= static_cast<uint32_t>(packed[byte + k]) << (8 * k);
          }
          window >>= (bit % 8);
          // Codes are small: a signed conversion is exact and cheaper than an unsigned one.
          const auto c = hn::BitCast(di, hn::And(hn::Shr(hn::Set(du, window), shifts), mask));
          const auto v = hn::Add(hn::Mul(hn::ConvertTo(df, c), vs), vl);
          if (i + lanes <= count) {
            hn::StoreU(v, df, dst + i);
          } else {
            hn::BlendedStore(v, hn::FirstN(df, static_cast<std::size_t>(count - i)), df, dst + i);
          }
        }
      }
    } else if (bits == 8) {
      const hn::Rebind<uint8_t, decltype(di)> d8;
      for (int64_t j = 0; j < n_rows; ++j, header += row_stride, dst += out_stride) {
        float scale, lo;
        PartParams(header, &scale, &lo);
        const auto vs = hn::Set(df, scale), vl = hn::Set(df, lo);
        const uint8_t* packed = header + 4;
        int64_t i = 0;
        for (; i + lanes <= count; i += lanes) {
          const auto c = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, packed + i)));
          hn::StoreU(hn::Add(hn::Mul(c, vs), vl), df, dst + i);
        }
        if (i < count) {
          uint8_t buffer[8] = {};
          std::memcpy(buffer, packed + i, static_cast<std::size_t>(count - i));
          const auto c = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, buffer)));
          hn::BlendedStore(hn::Add(hn::Mul(c, vs), vl), hn::FirstN(df, static_cast<std::size_t>(count - i)), df,
                           dst + i);
        }
      }
    } else {  // 3, 5, 6, 7 bits: one code at a time
      for (int64_t j = 0; j < n_rows; ++j, header += row_stride, dst += out_stride) {
        float scale, lo;
        PartParams(header, &scale, &lo);
        for (int64_t i = 0; i < count; ++i)
          dst[i] = static_cast<float>(detail::dense_code(header + 4, i, bits)) * scale + lo;
      }
    }
  }
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(DecodeAffinePartRowsImpl);

void decode_affine_part_rows(const uint8_t* first_row, int64_t row_stride, int64_t n_rows, const AffinePart* parts,
                             int64_t n_parts, float* out, int64_t out_stride) {
  HWY_DYNAMIC_DISPATCH(DecodeAffinePartRowsImpl)(first_row, row_stride, n_rows, parts, n_parts, out, out_stride);
}

namespace scalar {
void decode_affine_part_rows(const uint8_t* first_row, int64_t row_stride, int64_t n_rows, const AffinePart* parts,
                             int64_t n_parts, float* out, int64_t out_stride) {
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* row = first_row + j * row_stride;
    for (int64_t p = 0; p < n_parts; ++p) {
      uint16_t half[2];
      std::memcpy(half, row, 4);
      const float scale = base::f16_to_f32(half[0]), lo = base::f16_to_f32(half[1]);
      float* dst = out + j * out_stride + parts[p].first;
      for (int64_t i = 0; i < parts[p].count; ++i) {
        dst[i] = static_cast<float>(detail::dense_code(row + 4, i, parts[p].bits)) * scale + lo;
      }
      row += affine_part_bytes(parts[p]);
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
