// Highway kernels for svdq_latent_decode.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/caches/svdq_latent_decode.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "veloxquant/caches/svdq_latent_decode.h"

#if HWY_ONCE
namespace veloxquant {
namespace scalar {

// One group's n dense b-bit codes (LSB first); a code straddles two bytes only when b does not
// divide 8, and the second byte is read only then, so a row's last code never reads past it.
void decode_group(const uint8_t* codes, int64_t n, int bits, const float* scale, const float* min, float* out) {
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t bit = i * bits;
    const int shift = static_cast<int>(bit & 7);
    uint32_t word = codes[bit >> 3];
    if (shift + bits > 8) word |= static_cast<uint32_t>(codes[(bit >> 3) + 1]) << 8;
    out[i] = std::fma(static_cast<float>((word >> shift) & mask), scale[i], min[i]);
  }
}

void decode_latent_rows(const SvdqLayout& layout, const uint8_t* first_row, int64_t row_bytes, int64_t n_rows,
                        const float* scale, const float* min, float* out) {
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* row = first_row + j * row_bytes;
    for (const SvdqGroup& g : layout.groups) {
      decode_group(row + g.byte_offset, g.channels, g.bits, scale + g.first, min + g.first,
                   out + j * layout.coded + g.first);
    }
  }
}

}  // namespace scalar
}  // namespace veloxquant
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The rows with 8-lane vectors: each 8-channel group of 1, 2, 4 or 8 bits is one vector of
// codes (lane k holds bits [k b, (k + 1) b) of the group's b bytes, little-endian); other
// groups take the scalar path.
template <class DF>
void decode_rows_8_lanes(DF df, const SvdqLayout& layout, const uint8_t* first_row, int64_t row_bytes, int64_t n_rows,
                         const float* scale, const float* min, float* out) {
  const hn::RebindToUnsigned<DF> du;
  const hn::Rebind<uint8_t, DF> d8;
  const auto lane = hn::Iota(du, 0);
  const auto shift1 = lane, shift2 = hn::Add(lane, lane), shift4 = hn::ShiftLeft<2>(lane);
  const auto mask1 = hn::Set(du, 1u), mask2 = hn::Set(du, 3u), mask4 = hn::Set(du, 15u);
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* row = first_row + j * row_bytes;
    float* dst = out + j * layout.coded;
    for (const SvdqGroup& g : layout.groups) {
      const uint8_t* codes = row + g.byte_offset;
      hn::Vec<decltype(du)> c;
      if (g.channels != 8) {
        scalar::decode_group(codes, g.channels, g.bits, scale + g.first, min + g.first, dst + g.first);
        continue;
      }
      switch (g.bits) {
        case 8:
          c = hn::PromoteTo(du, hn::LoadU(d8, codes));
          break;
        case 4: {
          uint32_t word;
          std::memcpy(&word, codes, 4);
          c = hn::And(hn::Shr(hn::Set(du, word), shift4), mask4);
          break;
        }
        case 2: {
          uint16_t word;
          std::memcpy(&word, codes, 2);
          c = hn::And(hn::Shr(hn::Set(du, uint32_t{word}), shift2), mask2);
          break;
        }
        case 1:
          c = hn::And(hn::Shr(hn::Set(du, uint32_t{codes[0]}), shift1), mask1);
          break;
        default:
          scalar::decode_group(codes, g.channels, g.bits, scale + g.first, min + g.first, dst + g.first);
          continue;
      }
      const auto value = hn::MulAdd(hn::ConvertTo(df, hn::BitCast(hn::RebindToSigned<DF>(), c)),
                                    hn::LoadU(df, scale + g.first), hn::LoadU(df, min + g.first));
      hn::StoreU(value, df, dst + g.first);
    }
  }
}

void DecodeLatentRowsImpl(const SvdqLayout& layout, const uint8_t* first_row, int64_t row_bytes, int64_t n_rows,
                          const float* scale, const float* min, float* out) {
  const hn::CappedTag<float, 8> df;
  if constexpr (hn::MaxLanes(decltype(df)()) == 8) {
    if (hn::Lanes(df) == 8 && std::endian::native == std::endian::little) {
      decode_rows_8_lanes(df, layout, first_row, row_bytes, n_rows, scale, min, out);
      return;
    }
  }
  scalar::decode_latent_rows(layout, first_row, row_bytes, n_rows, scale, min, out);
}

}  // namespace veloxquant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant {
HWY_EXPORT(DecodeLatentRowsImpl);

void decode_latent_rows(const SvdqLayout& layout, const uint8_t* first_row, int64_t row_bytes, int64_t n_rows,
                        const float* scale, const float* min, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeLatentRowsImpl)(layout, first_row, row_bytes, n_rows, scale, min, out);
}

}  // namespace veloxquant
#endif
