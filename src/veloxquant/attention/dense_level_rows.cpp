// Highway kernels for dense_level_rows.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/dense_level_rows.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstring>
#include <type_traits>

#include "base/half.h"
#include "veloxquant/attention/dense_level_rows.h"
#include "veloxquant/attention/dense_code_lookup-inl.h"

#if HWY_ONCE
namespace veloxquant::attention::kernels::scalar {

void decode_dense_level_rows(const DenseLevelRows& r, float* out) {
  for (int64_t j = 0; j < r.n_rows; ++j) {
    const uint8_t* packed = r.codes + j * r.code_stride;
    const uint16_t* scales = r.scales + j * r.scale_stride;
    for (int64_t i = 0; i < r.dim; ++i) {
      const int code = dense_code(packed, i, r.bits);
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

// The 8 codes of a group (B bytes) as one 8-byte word: read whole where the row's last word
// ends inside the tile's code bytes, else only its B bytes (the rest zero).
template <int B>
HWY_INLINE uint64_t code_word(const uint8_t* group, bool in_bounds) {
  uint64_t word = 0;
  if (in_bounds) {
    std::memcpy(&word, group, 8);
  } else {
    std::memcpy(&word, group, B);
  }
  return word;
}

// dst[i..] = levels * scale (+ offsets[i..] with kOffset; offsets is null without).
template <bool kOffset, class DF, class V>
HWY_INLINE void store_scaled(DF df, V levels, V scale, const float* offsets, int64_t i, float* dst) {
  if constexpr (kOffset) {
    hn::StoreU(hn::MulAdd(levels, scale, hn::LoadU(df, offsets + i)), df, dst + i);
  } else {
    hn::StoreU(hn::Mul(levels, scale), df, dst + i);
  }
}

// Rows with the code width B known at compile time; 8 f32 lanes.
template <int B, class DF>
void decode_rows_bits(DF df, const DenseLevelRows& r, float* out) {
  const hn::RebindToUnsigned<DF> du32;
  const hn::Rebind<uint16_t, DF> du16;                 // 8 x u16 (128 bits)
  const hn::Repartition<uint8_t, decltype(du16)> du8;  // 16 x u8
  const hn::Repartition<uint64_t, decltype(du16)> du64;
  const hn::RebindToSigned<DF> di;

  // Lane k's code starts at bit k*B of the 8-code group: byte k*B/8, shift k*B%8. Its 16-bit
  // window is bytes (k*B/8, k*B/8 + 1); the second byte is only needed when the code straddles
  // a byte boundary, and is masked off otherwise (it may then lie past the group's B bytes).
  HWY_ALIGN uint8_t window_bytes[16];
  HWY_ALIGN uint32_t shift_bits[8];
  for (int k = 0; k < 8; ++k) {
    window_bytes[2 * static_cast<int64_t>(k)] = static_cast<uint8_t>(k * B / 8);
    window_bytes[2 * k + 1] = static_cast<uint8_t>(k * B / 8 + 1);
    shift_bits[k] = static_cast<uint32_t>(k * B % 8);
  }
  const auto windows_index = hn::Load(du8, window_bytes);
  const auto shifts = hn::Load(du32, shift_bits);
  const auto mask = hn::Set(du32, (1u << B) - 1u);

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
        const float s =
            hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(scales + blk))));
        const auto scale = hn::Set(df, s);
        const int64_t b1 = b0 + block < dim ? b0 + block : dim;
        for (int64_t i = b0; i < b1; i += 8, group += B) {
          // 8 codes = B bytes, read as one 8-byte word; a row whose last words would read past
          // the tile's last code byte takes them from a zero-padded copy.
          const auto bytes = hn::BitCast(du8, hn::Set(du64, code_word<B>(group, row_in_bounds)));
          const auto win16 = hn::BitCast(du16, hn::TableLookupBytes(bytes, windows_index));
          const auto codes = hn::And(hn::Shr(hn::PromoteTo(du32, win16), shifts), mask);

          const auto lev = hn::GatherIndex(df, levels, hn::BitCast(di, codes));
          store_scaled<decltype(with_offset)::value>(df, lev, scale, offsets, i, dst);
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

#if HWY_TARGET != HWY_SCALAR
// Whether all 2^bits levels are exact f16 values; if so, writes them as f16 bits.
inline bool levels_are_f16(const float* levels, int bits, uint16_t* out) {
  for (int c = 0; c < (1 << bits); ++c) {
    out[c] = base::f32_to_f16(levels[c]);
    if (base::f16_to_f32(out[c]) != levels[c]) return false;
  }
  return true;
}

// Rows with the code width B <= 6 known at compile time and levels that are exact f16 values
// (turboquant_block's are: block_lloyd_quant.cpp rounds them), 16 codes per pass: the codes'
// f16 levels looked up in registers (dense_code_lookup-inl.h), widened by the hardware
// f16->f32 conversion, times the block scale (plus the mean). 20 instructions per 16 codes at
// B <= 4, 25 at B = 5, against 29 per 8 codes for the f32-table path above (Zen 1's cross-lane
// permutes and 32-bit variable shifts make that one slow).
template <int B, class DF>
void decode_rows_f16_table(DF df, const DenseLevelRows& r, const uint16_t* levels_f16, float* out) {
  const hn::Repartition<uint16_t, DF> du16;  // 16 x u16 (256 bits)
  const hn::Half<decltype(du16)> du16h;      // 8 x u16
  const hn::Rebind<hwy::float16_t, DF> dh;   // 8 x f16
  const DenseCodeLookup<B, decltype(du16)> levels_of(levels_f16);
  constexpr int64_t kPassBytes = DenseCodeLookup<B, decltype(du16)>::kPassBytes;

  const uint8_t* const codes_base = r.codes;
  const uint16_t* const scales_base = r.scales;
  const int64_t dim = r.dim, block = r.block, n_rows = r.n_rows;
  const int64_t code_stride = r.code_stride, scale_stride = r.scale_stride;
  const float* const offsets = r.offset;
  const int64_t row_code_bytes = (dim * B + 7) / 8;
  // Rows whose last pass would load past the tile's code bytes are decoded from a zero-padded copy.
  const int64_t row_load_end = (dim / 16 - 1) * kPassBytes + 16;
  const int64_t first_padded = first_padded_row(n_rows, code_stride, row_code_bytes, row_load_end);
  HWY_ALIGN uint8_t padded[kMaxCodeRowBytes + 16];
  // An f16 scale broadcast to 8 f32 lanes: a u16 broadcast and the hardware conversion.
  const auto scale_of = [&](const uint16_t* scales, int64_t blk) {
    return hn::PromoteTo(df, hn::BitCast(dh, hn::Set(du16h, scales[blk])));
  };

  const auto decode = [&](auto with_offset) {
    for (int64_t j = 0; j < n_rows; ++j) {
      const uint8_t* pass = codes_base + j * code_stride;
      if (j >= first_padded) {
        std::memcpy(padded, pass, static_cast<std::size_t>(row_code_bytes));
        std::memset(padded + row_code_bytes, 0, 16);
        pass = padded;
      }
      const uint16_t* scales = scales_base + j * scale_stride;
      float* dst = out + j * dim;
      int64_t blk = 0, block_end = block;
      auto scale = scale_of(scales, 0);
      for (int64_t i = 0; i < dim; i += 16, pass += kPassBytes) {
        if (i == block_end) {
          scale = scale_of(scales, ++blk);
          block_end += block;
        }
        const auto f16 = levels_of(pass);
        const auto lo = hn::PromoteTo(df, hn::BitCast(dh, hn::LowerHalf(du16h, f16)));
        const auto hi = hn::PromoteTo(df, hn::BitCast(dh, hn::UpperHalf(du16h, f16)));
        if constexpr (decltype(with_offset)::value) {
          hn::StoreU(hn::MulAdd(lo, scale, hn::LoadU(df, offsets + i)), df, dst + i);
          hn::StoreU(hn::MulAdd(hi, scale, hn::LoadU(df, offsets + i + 8)), df, dst + i + 8);
        } else {
          hn::StoreU(hn::Mul(lo, scale), df, dst + i);
          hn::StoreU(hn::Mul(hi, scale), df, dst + i + 8);
        }
      }
    }
  };
  if (offsets != nullptr) {
    decode(std::true_type{});
  } else {
    decode(std::false_type{});
  }
}

// 8-bit codes on even levels (2c - 255) / 256 (turboquant_block from 7 bits on): each level is
// computed from its code, exactly (c * 2/256 - 255/256 in one FMA on a small integer), times the
// block scale (plus the mean) — what the scalar loop computes from the table, 8 codes in five
// instructions instead of a gather.
template <class DF>
void decode_rows_even_bytes(DF df, const DenseLevelRows& r, float* out) {
  const hn::Repartition<uint16_t, DF> du16;
  const hn::Half<decltype(du16)> du16h;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t dim = r.dim, block = r.block;
  for (int64_t j = 0; j < r.n_rows; ++j) {
    const uint8_t* codes = r.codes + j * r.code_stride;
    const uint16_t* scales = r.scales + j * r.scale_stride;
    float* dst = out + j * dim;
    for (int64_t b0 = 0, blk = 0; b0 < dim; b0 += block, ++blk) {
      const auto scale = hn::PromoteTo(df, hn::BitCast(dh, hn::Set(du16h, scales[blk])));
      for (int64_t i = b0; i < b0 + block; i += 8) {
        const auto level = even_byte_levels_f32(df, codes + i);
        if (r.offset != nullptr) {
          hn::StoreU(hn::MulAdd(level, scale, hn::LoadU(df, r.offset + i)), df, dst + i);
        } else {
          hn::StoreU(hn::Mul(level, scale), df, dst + i);
        }
      }
    }
  }
}

// Whether the 256 levels are the even ones (2c - 255) / 256.
inline bool levels_are_even_bytes(const float* levels) {
  for (int c = 0; c < 256; ++c) {
    if (levels[c] * 256.0f != static_cast<float>(2 * c - 255)) return false;
  }
  return true;
}

#endif  // HWY_TARGET != HWY_SCALAR

void DecodeDenseLevelRowsImpl(const DenseLevelRows& r, float* out) {
  [[maybe_unused]] const hn::CappedTag<float, 8> df;  // unused on the scalar target
  // Narrower targets, dims that are not whole groups and blocks that split a group take the
  // scalar loop.
#if HWY_TARGET != HWY_SCALAR
  if constexpr (hn::MaxLanes(decltype(df)()) == 8) {
    // Passes of 16 codes inside one scale block, levels held as f16 without rounding.
    HWY_ALIGN uint16_t checked_f16[64];
    const uint16_t* levels_f16 = r.levels_f16;
    if (hn::Lanes(df) == 8 && r.bits <= 6 && r.dim % 16 == 0 && r.block % 16 == 0 && r.n_rows > 0 &&
        (r.dim * r.bits + 7) / 8 <= kMaxCodeRowBytes &&
        (levels_f16 != nullptr || (levels_f16 = checked_f16, levels_are_f16(r.levels, r.bits, checked_f16)))) {
      switch (r.bits) {
        case 1:
          return decode_rows_f16_table<1>(df, r, levels_f16, out);
        case 2:
          return decode_rows_f16_table<2>(df, r, levels_f16, out);
        case 3:
          return decode_rows_f16_table<3>(df, r, levels_f16, out);
        case 4:
          return decode_rows_f16_table<4>(df, r, levels_f16, out);
        case 5:
          return decode_rows_f16_table<5>(df, r, levels_f16, out);
        case 6:
          return decode_rows_f16_table<6>(df, r, levels_f16, out);
        default:
          break;
      }
    }
    // 8 bits on even levels: computed from the code.
    if (hn::Lanes(df) == 8 && r.bits == 8 && r.dim % r.block == 0 && r.block % 8 == 0 && r.n_rows > 0 &&
        (r.even_levels || levels_are_even_bytes(r.levels))) {
      return decode_rows_even_bytes(df, r, out);
    }
    // Other levels and 7-8 bits: 8 codes per group, f32 levels gathered.
    if (hn::Lanes(df) == 8 && r.dim % 8 == 0 && r.block % 8 == 0 && r.n_rows > 0) {
      switch (r.bits) {
        case 1:
          return decode_rows_bits<1>(df, r, out);
        case 2:
          return decode_rows_bits<2>(df, r, out);
        case 3:
          return decode_rows_bits<3>(df, r, out);
        case 4:
          return decode_rows_bits<4>(df, r, out);
        case 5:
          return decode_rows_bits<5>(df, r, out);
        case 6:
          return decode_rows_bits<6>(df, r, out);
        case 7:
          return decode_rows_bits<7>(df, r, out);
        case 8:
          return decode_rows_bits<8>(df, r, out);
        default:
          break;
      }
    }
  }
#endif
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
