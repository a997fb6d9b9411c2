// Highway kernel for affine_part_planes.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/affine_part_planes.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cstring>

#include "base/half.h"
#include "veloxquant/attention/affine_part_planes.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// One octet's 8 bytes widened to 32-bit lanes, then every field shifted out, converted and scaled
// (the top field needs no mask, the bottom no shift).
template <int B, class DF, class VU>
HWY_INLINE void octet_planes(DF df, VU wide, hn::Vec<DF> vs, float* dst) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  constexpr int kFields = 8 / B;
  const auto mask = hn::Set(du, (1u << B) - 1u);
  for (int k = 0; k < kFields; ++k) {
    auto field = k == 0 ? wide : hn::ShiftRightSame(wide, k * B);
    if (k != kFields - 1) field = hn::And(field, mask);
    // Codes are small: the signed conversion is exact.
    hn::StoreU(hn::Mul(hn::ConvertTo(df, hn::BitCast(di, field)), vs), df, dst + static_cast<int64_t>(k) * 8);
  }
}

// One part of every row of the tile (parts outer, rows inner: the part's geometry is worked out
// once per tile, not per row). Row j's (scale, min) pair goes to params + j * out_stride.
template <int B, class DF>
HWY_INLINE void part_rows(DF df, const uint8_t* header, int64_t row_stride, int64_t n_rows, int64_t bytes,
                          const uint8_t* readable_end, float* params, float* dst, int64_t out_stride) {
  // The part's f16 (scale, min) of each row widened as a pair (4 bytes read, 2 floats written).
  const hn::CappedTag<float, 2> d2;
  const hn::Rebind<hwy::float16_t, decltype(d2)> dh2;
  const uint8_t* codes = header + 4;
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint8_t, DF> d8;
  constexpr int64_t kFloats = int64_t{8} * (8 / B);  // tile floats per octet
  const int64_t whole = bytes / 8, tail = bytes % 8;
  // The partial octet's bytes past the part are zeroed (little-endian: the first bytes are the low ones).
  const uint64_t keep = tail > 0 ? ~uint64_t{0} >> (64 - 8 * tail) : 0;
  for (int64_t j = 0; j < n_rows; ++j, header += row_stride, codes += row_stride, dst += out_stride) {
    float* pair = params + j * out_stride;
    hn::StoreU(hn::PromoteTo(d2, hn::LoadU(dh2, reinterpret_cast<const hwy::float16_t*>(header))), d2, pair);
    const auto vs = hn::Set(df, pair[0]);
    for (int64_t o = 0; o < whole; ++o)
      octet_planes<B>(df, hn::PromoteTo(du, hn::LoadU(d8, codes + 8 * o)), vs, dst + o * kFloats);
    if (tail == 0) continue;
    const uint8_t* at = codes + 8 * whole;
    HWY_ALIGN uint64_t own[1] = {0};
    if (at + 8 <= readable_end) {
      std::memcpy(own, at, 8);
      own[0] &= keep;
    } else {  // at the very end of the buffer: the part's own bytes only
      for (int64_t k = 0; k < tail; ++k) own[0] |= static_cast<uint64_t>(at[k]) << (8 * k);
    }
    octet_planes<B>(df, hn::PromoteTo(du, hn::Load(d8, reinterpret_cast<const uint8_t*>(own))), vs,
                    dst + whole * kFloats);
  }
}

void DecodeImpl(const uint8_t* first_row, int64_t row_stride, int64_t n_rows, const uint8_t* readable_end,
                const AffinePart* parts, int64_t n_parts, const AffinePlaneLayout& layout, float* out,
                int64_t out_stride) {
  const hn::CappedTag<float, 8> df;
  if constexpr (hn::MaxLanes(decltype(df)()) != 8) {  // the layout's octets are 8 lanes
    scalar::decode_affine_part_planes(first_row, row_stride, n_rows, readable_end, parts, n_parts, layout, out,
                                      out_stride);
    return;
  }
  // Where each part's header sits in a row (a row's parts are back to back).
  int64_t header_at[64];
  for (int64_t p = 0, at = 0; p < n_parts; ++p) {
    header_at[p] = at;
    at += affine_part_bytes(parts[p]);
  }
  // The (scale, min) slots past the last part are zero.
  for (int64_t j = 0; j < n_rows; ++j) {
    float* params = out + j * out_stride + layout.params;
    for (int64_t e = 2 * n_parts; e < layout.width - layout.params; ++e) params[e] = 0.0f;
  }
  // Part by part: each row's (scale, min) pair, then its codes scaled.
  for (int64_t p = 0; p < n_parts; ++p) {
    const AffinePart& part = parts[p];
    const int64_t bytes = (part.count * part.bits + 7) / 8;
    const uint8_t* header = first_row + header_at[p];
    float* params = out + layout.params + 2 * p;
    float* planes = out + layout.part_offset[static_cast<std::size_t>(p)];
    switch (part.bits) {
      case 1:
        part_rows<1>(df, header, row_stride, n_rows, bytes, readable_end, params, planes, out_stride);
        break;
      case 2:
        part_rows<2>(df, header, row_stride, n_rows, bytes, readable_end, params, planes, out_stride);
        break;
      case 4:
        part_rows<4>(df, header, row_stride, n_rows, bytes, readable_end, params, planes, out_stride);
        break;
      default:
        part_rows<8>(df, header, row_stride, n_rows, bytes, readable_end, params, planes, out_stride);
        break;
    }
  }
}
#else
void DecodeImpl(const uint8_t* first_row, int64_t row_stride, int64_t n_rows, const uint8_t* readable_end,
                const AffinePart* parts, int64_t n_parts, const AffinePlaneLayout& layout, float* out,
                int64_t out_stride) {
  scalar::decode_affine_part_planes(first_row, row_stride, n_rows, readable_end, parts, n_parts, layout, out,
                                    out_stride);
}
#endif

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(DecodeImpl);

AffinePlaneLayout affine_plane_layout(const AffinePart* parts, int64_t n_parts) {
  AffinePlaneLayout layout;
  // The SIMD kernel widens its headers 4 parts per vector from a 64-entry buffer.
  if (n_parts < 1 || n_parts > 64) return layout;
  int64_t components = 0, at = 0;
  for (int64_t p = 0; p < n_parts; ++p) {
    const int b = parts[p].bits;
    if (b != 1 && b != 2 && b != 4 && b != 8) return layout;
    if (parts[p].first != components || parts[p].count < 1) return layout;
    components += parts[p].count;
    layout.part_offset.push_back(at);
    const int64_t bytes = (parts[p].count * b + 7) / 8, octets = (bytes + 7) / 8;
    at += octets * 8 * (8 / b);
  }
  layout.params = at;
  layout.width = at + (2 * n_parts + 7) / 8 * 8;
  layout.position.resize(static_cast<std::size_t>(components));
  layout.part_of.resize(static_cast<std::size_t>(components));
  for (int64_t p = 0; p < n_parts; ++p) {
    const int64_t fields = 8 / parts[p].bits;
    for (int64_t i = 0; i < parts[p].count; ++i) {
      // Code i of the part: byte i / F (octet byte / 8, lane byte % 8), field i % F.
      const int64_t byte = i / fields, k = i % fields;
      const int64_t pos = layout.part_offset[static_cast<std::size_t>(p)] + (byte / 8 * fields + k) * 8 + byte % 8;
      layout.position[static_cast<std::size_t>(parts[p].first + i)] = static_cast<int32_t>(pos);
      layout.part_of[static_cast<std::size_t>(parts[p].first + i)] = static_cast<int32_t>(p);
    }
  }
  layout.usable = true;
  return layout;
}

void decode_affine_part_planes(const uint8_t* first_row, int64_t row_stride, int64_t n_rows,
                               const uint8_t* readable_end, const AffinePart* parts, int64_t n_parts,
                               const AffinePlaneLayout& layout, float* out, int64_t out_stride) {
  HWY_DYNAMIC_DISPATCH(DecodeImpl)
  (first_row, row_stride, n_rows, readable_end, parts, n_parts, layout, out, out_stride);
}

namespace scalar {
namespace {
// One part's codes of a row, in 8-byte octets: field k of byte o * 8 + l at plane position
// (o * fields + k) * 8 + l, times the part's scale (zero past its last byte).
void part_planes(const uint8_t* codes, const AffinePart& part, float scale, float* planes) {
  const int64_t fields = 8 / part.bits, bytes = (part.count * part.bits + 7) / 8;
  const int64_t octets = (bytes + 7) / 8, mask = (1 << part.bits) - 1;
  for (int64_t o = 0; o < octets; ++o) {
    for (int64_t k = 0; k < fields; ++k) {
      for (int64_t l = 0; l < 8; ++l) {
        const int64_t byte = o * 8 + l;
        const int code = byte < bytes ? (codes[byte] >> (k * part.bits)) & mask : 0;
        planes[(o * fields + k) * 8 + l] = static_cast<float>(code) * scale;
      }
    }
  }
}
}  // namespace

void decode_affine_part_planes(const uint8_t* first_row, int64_t row_stride, int64_t n_rows, const uint8_t*,
                               const AffinePart* parts, int64_t n_parts, const AffinePlaneLayout& layout, float* out,
                               int64_t out_stride) {
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* row = first_row + j * row_stride;
    float* dst = out + j * out_stride;
    std::fill(dst + layout.params, dst + layout.width, 0.0f);
    int64_t at = 0;
    for (int64_t p = 0; p < n_parts; ++p) {
      const AffinePart& part = parts[p];
      uint16_t half[2];
      std::memcpy(half, row + at, 4);
      const float scale = base::f16_to_f32(half[0]);
      dst[layout.params + 2 * p] = scale;
      dst[layout.params + 2 * p + 1] = base::f16_to_f32(half[1]);
      part_planes(row + at + 4, part, scale, dst + layout.part_offset[static_cast<std::size_t>(p)]);
      at += affine_part_bytes(part);
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
