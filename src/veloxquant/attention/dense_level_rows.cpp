// Highway kernels for dense_level_rows.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/dense_level_rows.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "veloxquant/attention/dense_level_rows.h"

#if HWY_ONCE
namespace veloxquant::attention::kernels::scalar {

void decode_dense_level_rows(const DenseLevelRows& r, float* out) {
  for (int64_t j = 0; j < r.n_rows; ++j) {
    const uint8_t* packed = r.codes + j * r.code_stride;
    const uint16_t* scales = r.scales + j * r.scale_stride;
    for (int64_t i = 0; i < r.dim; ++i) {
      int code = 0;
      for (int k = 0; k < r.bits; ++k) {
        const int64_t bit = i * r.bits + k;
        code |= ((packed[bit / 8] >> (bit % 8)) & 1) << k;
      }
      const float offset = r.offset != nullptr ? r.offset[i] : 0.0f;
      out[j * r.dim + i] = base::f16_to_f32(scales[i / r.block]) * r.levels[code] + offset;
    }
  }
}

}  // namespace veloxquant::attention::kernels::scalar
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows with the code width B known at compile time; 8 f32 lanes.
template <int B, class DF>
void decode_rows_bits(DF df, const DenseLevelRows& r, float* out) {
  const hn::RebindToUnsigned<DF> du32;
  const hn::Rebind<uint16_t, DF> du16;             // 8 x u16 (128 bits)
  const hn::Repartition<uint8_t, decltype(du16)> du8;  // 16 x u8
  const hn::Repartition<uint64_t, decltype(du16)> du64;
  const hn::RebindToSigned<DF> di;

  // Lane k's code starts at bit k*B of the 8-code group: byte k*B/8, shift k*B%8. Its 16-bit
  // window is bytes (k*B/8, k*B/8 + 1); the second byte is only needed when the code straddles
  // a byte boundary, and is masked off otherwise (it may then lie past the group's B bytes).
  HWY_ALIGN uint8_t window_bytes[16];
  HWY_ALIGN uint32_t shift_bits[8];
  for (int k = 0; k < 8; ++k) {
    window_bytes[2 * k] = static_cast<uint8_t>(k * B / 8);
    window_bytes[2 * k + 1] = static_cast<uint8_t>(k * B / 8 + 1);
    shift_bits[k] = static_cast<uint32_t>(k * B % 8);
  }
  const auto windows_index = hn::Load(du8, window_bytes);
  const auto shifts = hn::Load(du32, shift_bits);
  const auto mask = hn::Set(du32, (1u << B) - 1u);
  const auto low3 = hn::Set(du32, 7u);

  // The level table in registers: up to four vectors of 8 levels (B <= 5).
  constexpr int kTables = B <= 3 ? 1 : (B == 4 ? 2 : 4);
  HWY_ALIGN float table[32] = {};
  if constexpr (B <= 5) std::memcpy(table, r.levels, sizeof(float) * (std::size_t{1} << B));
  const auto t0 = hn::Load(df, table);
  const auto t1 = hn::Load(df, table + 8 * (kTables > 1));
  const auto t2 = hn::Load(df, table + 16 * (kTables > 2));
  const auto t3 = hn::Load(df, table + 24 * (kTables > 2));

  // Fields in locals: `out` is a float* the compiler must otherwise assume aliases them.
  const uint8_t* const codes_base = r.codes;
  const uint16_t* const scales_base = r.scales;
  const int64_t dim = r.dim, block = r.block, n_rows = r.n_rows;
  const int64_t code_stride = r.code_stride, scale_stride = r.scale_stride;
  const float* const levels = r.levels;
  const float* const offsets = r.offset;
  const int64_t row_code_bytes = (dim * B + 7) / 8;
  const int64_t readable = (n_rows - 1) * code_stride + row_code_bytes;  // bytes from codes_base
  // One f16 scale to f32 with the hardware conversion (a lane of a half vector).
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh1;

  const auto decode_rows = [&](auto with_offset) {
    for (int64_t j = 0; j < n_rows; ++j) {
      const uint8_t* row = codes_base + j * code_stride;
      const uint16_t* scales = scales_base + j * scale_stride;
      float* dst = out + j * dim;
      // Whether the row's last 8-byte word ends inside the tile's code bytes.
      const bool row_in_bounds = j * code_stride + row_code_bytes - B + 8 <= readable;
      const uint8_t* group = row;  // the next 8 codes
      for (int64_t b0 = 0, blk = 0; b0 < dim; b0 += block, ++blk) {
        const float s = hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(scales + blk))));
        const auto scale = hn::Set(df, s);
        const int64_t b1 = b0 + block < dim ? b0 + block : dim;
        for (int64_t i = b0; i < b1; i += 8, group += B) {
          // 8 codes = B bytes, read as one 8-byte word; a row whose last words would read past
          // the tile's last code byte takes them from a zero-padded copy.
          uint64_t word = 0;
          if (row_in_bounds) {
            std::memcpy(&word, group, 8);
          } else {
            std::memcpy(&word, group, B);
          }
          const auto bytes = hn::BitCast(du8, hn::Set(du64, word));
          const auto win16 = hn::BitCast(du16, hn::TableLookupBytes(bytes, windows_index));
          const auto codes = hn::And(hn::Shr(hn::PromoteTo(du32, win16), shifts), mask);

          hn::Vec<DF> lev;
          if constexpr (B <= 5) {
            const auto idx = hn::IndicesFromVec(df, hn::BitCast(di, hn::And(codes, low3)));
            lev = hn::TableLookupLanes(t0, idx);
            if constexpr (B >= 4) {
              const auto bit3 = hn::RebindMask(df, hn::TestBit(codes, hn::Set(du32, 8u)));
              lev = hn::IfThenElse(bit3, hn::TableLookupLanes(t1, idx), lev);
              if constexpr (B == 5) {
                auto high = hn::TableLookupLanes(t2, idx);
                high = hn::IfThenElse(bit3, hn::TableLookupLanes(t3, idx), high);
                const auto bit4 = hn::RebindMask(df, hn::TestBit(codes, hn::Set(du32, 16u)));
                lev = hn::IfThenElse(bit4, high, lev);
              }
            }
          } else {
            lev = hn::GatherIndex(df, levels, hn::BitCast(di, codes));
          }
          if constexpr (decltype(with_offset)::value) {
            hn::StoreU(hn::MulAdd(lev, scale, hn::LoadU(df, offsets + i)), df, dst + i);
          } else {
            hn::StoreU(hn::Mul(lev, scale), df, dst + i);
          }
        }
      }
    }
  };
  if (offsets != nullptr) {
    decode_rows(std::true_type{});
  } else {
    decode_rows(std::false_type{});
  }
}

void DecodeDenseLevelRowsImpl(const DenseLevelRows& r, float* out) {
  const hn::CappedTag<float, 8> df;
  // The byte shuffle spreads one 8-code group over 8 lanes; narrower targets, dims that are not
  // whole groups and blocks that split a group take the scalar loop.
  if constexpr (hn::MaxLanes(decltype(df)()) == 8) {
    if (hn::Lanes(df) == 8 && r.dim % 8 == 0 && r.block % 8 == 0 && r.n_rows > 0) {
      switch (r.bits) {
        case 1: return decode_rows_bits<1>(df, r, out);
        case 2: return decode_rows_bits<2>(df, r, out);
        case 3: return decode_rows_bits<3>(df, r, out);
        case 4: return decode_rows_bits<4>(df, r, out);
        case 5: return decode_rows_bits<5>(df, r, out);
        case 6: return decode_rows_bits<6>(df, r, out);
        case 7: return decode_rows_bits<7>(df, r, out);
        case 8: return decode_rows_bits<8>(df, r, out);
        default: break;
      }
    }
  }
  scalar::decode_dense_level_rows(r, out);
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(DecodeDenseLevelRowsImpl);

void decode_dense_level_rows(const DenseLevelRows& rows, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeDenseLevelRowsImpl)(rows, out);
}

}  // namespace veloxquant::attention::kernels
#endif
