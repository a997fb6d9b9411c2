// Highway kernel for affine_part_rows.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/affine_part_rows.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cstring>

#include "base/half.h"
#include "veloxquant/attention/affine_part_rows.h"
#include "veloxquant/attention/dense_level_rows.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

// The rows of one part (its header at `header` in row 0, codes right after), into dst + j *
// out_stride. Each width's loop below is the part's whole decode.
struct PartRows {
  const uint8_t* header;
  int64_t row_stride;
  int64_t n_rows;
  int64_t count;
  int bits;
  float* dst;
  int64_t out_stride;
};

// The 32 bits from byte `byte` of a part's `bytes` code bytes, zero past the last one.
HWY_INLINE uint32_t code_window(const uint8_t* packed, int64_t byte, int64_t bytes) {
  uint32_t window = 0;
  if (byte + 4 <= bytes) {
    std::memcpy(&window, packed + byte, 4);
  } else {
    for (int64_t k = 0; k < bytes - byte; ++k) window |= static_cast<uint32_t>(packed[byte + k]) << (8 * k);
  }
  return window;
}

// 1, 2 or 4 bits: a vector of L codes at a time (L <= 8 lanes, so L * bits <= 32 and the L codes
// lie in one 32-bit window from the byte holding the first one); the shift and mask vectors are
// set up once per part.
HWY_INLINE void decode_narrow_part(const PartRows& p) {
  const hn::CappedTag<float, 8> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t bytes = (p.count * p.bits + 7) / 8;
  const auto shifts = hn::Mul(hn::Iota(du, 0), hn::Set(du, static_cast<uint32_t>(p.bits)));
  const auto mask = hn::Set(du, (1u << p.bits) - 1u);
  const uint8_t* header = p.header;
  float* dst = p.dst;
  for (int64_t j = 0; j < p.n_rows; ++j, header += p.row_stride, dst += p.out_stride) {
    float scale, lo;
    PartParams(header, &scale, &lo);
    const auto vs = hn::Set(df, scale), vl = hn::Set(df, lo);
    const uint8_t* packed = header + 4;
    for (int64_t i = 0; i < p.count; i += lanes) {
      const int64_t bit = i * p.bits;
      const uint32_t window = code_window(packed, bit / 8, bytes) >> (bit % 8);
      // Codes are small: a signed conversion is exact and cheaper than an unsigned one.
      const auto c = hn::BitCast(di, hn::And(hn::Shr(hn::Set(du, window), shifts), mask));
      const auto v = hn::Add(hn::Mul(hn::ConvertTo(df, c), vs), vl);
      if (i + lanes <= p.count) {
        hn::StoreU(v, df, dst + i);
      } else {
        hn::BlendedStore(v, hn::FirstN(df, static_cast<std::size_t>(p.count - i)), df, dst + i);
      }
    }
  }
}

// 8 bits: codes widened from bytes; the last, partial vector from a zeroed copy (no byte read
// past the part) and stored masked.
HWY_INLINE void decode_byte_part(const PartRows& p) {
  const hn::CappedTag<float, 8> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const uint8_t* header = p.header;
  float* dst = p.dst;
  for (int64_t j = 0; j < p.n_rows; ++j, header += p.row_stride, dst += p.out_stride) {
    float scale, lo;
    PartParams(header, &scale, &lo);
    const auto vs = hn::Set(df, scale), vl = hn::Set(df, lo);
    const uint8_t* packed = header + 4;
    int64_t i = 0;
    for (; i + lanes <= p.count; i += lanes) {
      const auto c = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, packed + i)));
      hn::StoreU(hn::Add(hn::Mul(c, vs), vl), df, dst + i);
    }
    if (i < p.count) {
      uint8_t buffer[8] = {};
      std::memcpy(buffer, packed + i, static_cast<std::size_t>(p.count - i));
      const auto c = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, buffer)));
      hn::BlendedStore(hn::Add(hn::Mul(c, vs), vl), hn::FirstN(df, static_cast<std::size_t>(p.count - i)), df, dst + i);
    }
  }
}

// 3, 5, 6, 7 bits: one code at a time.
HWY_INLINE void decode_odd_part(const PartRows& p) {
  const uint8_t* header = p.header;
  float* dst = p.dst;
  for (int64_t j = 0; j < p.n_rows; ++j, header += p.row_stride, dst += p.out_stride) {
    float scale, lo;
    PartParams(header, &scale, &lo);
    for (int64_t i = 0; i < p.count; ++i) dst[i] = static_cast<float>(dense_code(header + 4, i, p.bits)) * scale + lo;
  }
}

// Parts outer, rows inner: a part sits at the same offset of every row, so its per-width setup
// is done once per tile.
void DecodeAffinePartRowsImpl(const uint8_t* first_row, int64_t row_stride, int64_t n_rows, const AffinePart* parts,
                              int64_t n_parts, float* out, int64_t out_stride) {
  int64_t offset = 0;
  for (int64_t p = 0; p < n_parts; ++p) {
    const PartRows rows{first_row + offset, row_stride,           n_rows,    parts[p].count,
                        parts[p].bits,      out + parts[p].first, out_stride};
    offset += affine_part_bytes(parts[p]);
    if (rows.bits == 1 || rows.bits == 2 || rows.bits == 4) {
      decode_narrow_part(rows);
    } else if (rows.bits == 8) {
      decode_byte_part(rows);
    } else {
      decode_odd_part(rows);
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
        dst[i] = static_cast<float>(dense_code(row + 4, i, parts[p].bits)) * scale + lo;
      }
      row += affine_part_bytes(parts[p]);
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
