// Highway kernels for affine_word_rows.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/affine_word_rows.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <bit>
#include <cstring>

#include "base/half.h"
#include "veloxquant/attention/affine_word_rows.h"

#if HWY_ONCE
namespace veloxquant::attention::kernels {
namespace {

uint16_t read_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint32_t read_u32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

namespace scalar {

void decode_affine_word_rows(const AffineWordRows& r, float* out) {
  const uint32_t mask = (1u << r.bits) - 1u;
  const int64_t per_word = 32 / r.bits;  // codes never straddle words; the top bits stay unused
  for (int64_t j = 0; j < r.n_rows; ++j) {
    const std::byte* row = r.first_row + j * r.row_bytes;
    for (int64_t e = 0; e < r.dim; ++e) {
      const uint32_t word = read_u32(row + (e / per_word) * 4);
      const uint32_t code = (word >> (r.bits * (e % per_word))) & mask;
      const std::byte* params = row + r.params_offset + (e / r.group) * 4;
      const float scale = base::f16_to_f32(read_u16(params));
      const float min = base::f16_to_f32(read_u16(params + 2));
      out[j * r.dim + e] = static_cast<float>(code) * scale + min;
    }
  }
}

}  // namespace scalar
}  // namespace veloxquant::attention::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Group g's (scale, min) f16 pair of a row, widened with the hardware conversion (two lanes of a
// half vector) and broadcast to df's lanes.
template <class DF>
struct GroupParams {
  hn::Vec<DF> scale, min;
};

template <class DF>
HWY_INLINE GroupParams<DF> group_params(DF df, const std::byte* params, int64_t g) {
  const hn::CappedTag<float, 2> d2;
  const hn::Rebind<hwy::float16_t, decltype(d2)> dh2;
  HWY_ALIGN float pair[hn::MaxLanes(d2)];
  hn::Store(hn::PromoteTo(d2, hn::LoadU(dh2, reinterpret_cast<const hwy::float16_t*>(params + g * 4))), d2, pair);
  return {hn::Set(df, pair[0]), hn::Set(df, pair[1])};
}

// The loop every decoder below shares: per row and channel group, the group's (scale, min), then
// each vector of the group's codes (codes_at(row, e): signed 32-bit lanes for channels e ..
// e + lanes) as code * scale + min with one fused multiply-add. The decoders differ only in how
// they widen a vector of codes, so every path gives the same floats.
template <class DF, class CodesAt>
HWY_INLINE void decode_rows_with(DF df, const AffineWordRows& r, float* out, const CodesAt& codes_at) {
  const int64_t dim = r.dim, group = r.group, lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t j = 0; j < r.n_rows; ++j) {
    const std::byte* row = r.first_row + j * r.row_bytes;
    const std::byte* params = row + r.params_offset;
    float* dst = out + j * dim;
    for (int64_t g0 = 0; g0 < dim; g0 += group) {
      const auto [scale, min] = group_params(df, params, g0 / group);
      const int64_t end = g0 + group < dim ? g0 + group : dim;
      for (int64_t e = g0; e < end; e += lanes) {
        hn::StoreU(hn::MulAdd(hn::ConvertTo(df, codes_at(row, e)), scale, min), df, dst + e);
      }
    }
  }
}

// B-bit codes (B in {2, 4}), 8 lanes: 32 / B codes per word, 8 per vector; a 2-bit word gives
// its first 8 codes, then (next vector) its last 8.
template <int B, class DF>
void decode_words(DF df, const AffineWordRows& r, float* out) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  constexpr int kPerWord = 32 / B;
  HWY_ALIGN uint32_t shift_bits[kPerWord];
  for (int k = 0; k < kPerWord; ++k) shift_bits[k] = static_cast<uint32_t>(k * B);
  const auto shifts_lo = hn::Load(du, shift_bits);
  const auto shifts_hi = hn::Load(du, shift_bits + (kPerWord > 8 ? 8 : 0));
  const auto mask = hn::Set(du, (1u << B) - 1u);
  decode_rows_with(df, r, out, [&](const std::byte* row, int64_t e) {
    uint32_t word;
    std::memcpy(&word, row + (e / kPerWord) * 4, sizeof word);
    const bool upper = kPerWord > 8 && e % kPerWord >= 8;
    return hn::BitCast(di, hn::And(hn::Shr(hn::Set(du, word), upper ? shifts_hi : shifts_lo), mask));
  });
}

// 8-bit codes: four per word, LSB first, so on a little-endian machine code e is byte e of the row
// and a vector's codes (8 or 16) are consecutive bytes, widened to 32-bit lanes (the recent tier
// of age_tiered, 8-bit kivi-style eviction rows).
template <class DF>
void decode_bytes(DF df, const AffineWordRows& r, float* out) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint8_t, DF> d8;
  decode_rows_with(df, r, out, [&](const std::byte* row, int64_t e) {
    return hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const uint8_t*>(row) + e));
  });
}

// The same rows at 16 lanes (AVX-512): one vector holds 16 codes, i.e. one 2-bit word or two
// 4-bit words, so a 64-channel row is 4 vectors instead of 8.
template <int B, class DF>
void decode_words16(DF df, const AffineWordRows& r, float* out) {
  static_assert(B == 2 || B == 4);
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Repartition<uint64_t, DF> du64;
  constexpr int kPerWord = 32 / B;
  // 2-bit: one word broadcast, lane k shifted by 2k. 4-bit: two words, lanes 0-7 from the first
  // and 8-15 from the second (a u64 broadcast, then lane k takes u32 half k / 8), each shifted by
  // 4 (k % 8).
  HWY_ALIGN uint32_t shift_bits[16];
  HWY_ALIGN uint32_t half_index[16];
  for (int k = 0; k < 16; ++k) {
    shift_bits[k] = static_cast<uint32_t>((k % kPerWord) * B);
    half_index[k] = static_cast<uint32_t>(k / kPerWord);
  }
  const auto shifts = hn::Load(du, shift_bits);
  const auto halves = hn::SetTableIndices(du, reinterpret_cast<const int32_t*>(half_index));
  const auto mask = hn::Set(du, (1u << B) - 1u);
  decode_rows_with(df, r, out, [&](const std::byte* row, int64_t e) {
    const std::byte* word_ptr = row + (e / kPerWord) * 4;
    hn::Vec<decltype(du)> words;
    if constexpr (B == 2) {
      uint32_t word;
      std::memcpy(&word, word_ptr, sizeof word);
      words = hn::Set(du, word);
    } else {
      uint64_t pair_of_words;
      std::memcpy(&pair_of_words, word_ptr, sizeof pair_of_words);
      words = hn::TableLookupLanes(hn::BitCast(du, hn::Set(du64, pair_of_words)), halves);
    }
    return hn::BitCast(di, hn::And(hn::Shr(words, shifts), mask));
  });
}

void DecodeAffineWordRowsImpl(const AffineWordRows& r, float* out) {
  if (r.n_rows <= 0) return;
  const hn::ScalableTag<float> dfull;
  if constexpr (hn::MaxLanes(decltype(dfull)()) >= 16) {
    if (hn::Lanes(dfull) == 16 && r.dim % 16 == 0 && r.group % 16 == 0 && std::endian::native == std::endian::little) {
      const hn::CappedTag<float, 16> d16;
      if (r.bits == 4) return decode_words16<4>(d16, r, out);
      if (r.bits == 2) return decode_words16<2>(d16, r, out);
      if (r.bits == 8) return decode_bytes(d16, r, out);
    }
  }
  const hn::CappedTag<float, 8> df;
  if constexpr (hn::MaxLanes(decltype(df)()) == 8) {
    if (hn::Lanes(df) == 8 && r.dim % 8 == 0 && r.group % 8 == 0) {
      if (r.bits == 4) return decode_words<4>(df, r, out);
      if (r.bits == 8 && std::endian::native == std::endian::little) return decode_bytes(df, r, out);
      // 2-bit groups must start on a word (16 codes) for the lower/upper alternation.
      if (r.bits == 2 && r.group % 16 == 0) return decode_words<2>(df, r, out);
    }
  }
  scalar::decode_affine_word_rows(r, out);
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(DecodeAffineWordRowsImpl);

void decode_affine_word_rows(const AffineWordRows& rows, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeAffineWordRowsImpl)(rows, out);
}

}  // namespace veloxquant::attention::kernels
#endif
