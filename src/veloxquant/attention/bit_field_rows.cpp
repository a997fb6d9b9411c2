// Highway kernel for bit_field_rows.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/bit_field_rows.cpp"
// Also compile the AVX3_DL target (VBMI's byte permute), which HWY_DYNAMIC_DISPATCH picks on CPUs
// that have it; others keep the gather kernel.
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/bit_field_rows.h"

#include <cmath>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One row; `row` may be read up to 3 bytes past layout.row_bytes.
HWY_INLINE void DecodeRow(const uint8_t* row, const BitFieldLayout& layout, const float* step, const float* lo,
                          float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df)), n = layout.fields();
  const int64_t whole = n - n % lanes;
  const auto* words = reinterpret_cast<const int32_t*>(row);
  for (int64_t i = 0; i < whole; i += lanes) {
    const auto w = hn::GatherOffset(di, words, hn::LoadU(di, layout.first_byte.data() + i));
    const auto code =
        hn::And(hn::Shr(w, hn::LoadU(di, layout.shift.data() + i)), hn::LoadU(di, layout.mask.data() + i));
    hn::StoreU(hn::MulAdd(hn::ConvertTo(df, code), hn::LoadU(df, step + i), hn::LoadU(df, lo + i)), df, out + i);
  }
  for (int64_t i = whole; i < n; ++i) {
    const auto at = static_cast<std::size_t>(i);
    const uint32_t word =
        static_cast<uint32_t>(row[layout.first_byte[at]]) | static_cast<uint32_t>(row[layout.first_byte[at] + 1]) << 8;
    const uint32_t code = (word >> layout.shift[at]) & static_cast<uint32_t>(layout.mask[at]);
    out[i] = std::fma(static_cast<float>(code), step[i], lo[i]);
  }
}

#if HWY_TARGET == HWY_AVX3_DL
// Rows of at most 64 bytes: the row is one masked 64-byte load (no read past it), and each
// 16-field chunk takes its two bytes per field out of that register by one byte permute
// (layout.byte_index) instead of a 16-element gather from memory; then the same shift, mask
// and FMA per field as DecodeRow.
void decode_rows_vbmi(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                      const float* step, const float* lo, float* out) {
  const int64_t n = layout.fields();
  const __mmask64 row_mask = layout.row_bytes >= 64 ? ~__mmask64{0} : (__mmask64{1} << layout.row_bytes) - 1;
  const auto* index = reinterpret_cast<const int32_t*>(layout.byte_index.data());
  for (int64_t j = 0; j < n_rows; ++j) {
    const __m512i bytes = _mm512_maskz_loadu_epi8(row_mask, first + j * stride);
    float* o = out + j * n;
    for (int64_t i = 0; i < n; i += 16) {
      const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1u);
      const __m512i words = _mm512_permutexvar_epi8(_mm512_maskz_loadu_epi32(m, index + i), bytes);
      const __m512i code = _mm512_and_si512(_mm512_srlv_epi32(words, _mm512_maskz_loadu_epi32(m, layout.shift.data() + i)),
                                            _mm512_maskz_loadu_epi32(m, layout.mask.data() + i));
      const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(code), _mm512_maskz_loadu_ps(m, step + i),
                                       _mm512_maskz_loadu_ps(m, lo + i));
      _mm512_mask_storeu_ps(o + i, m, v);
    }
  }
}
#endif

void DecodeBitFieldRowsImpl(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                            const float* step, const float* lo, float* out) {
  if (n_rows <= 0) return;
#if HWY_TARGET == HWY_AVX3_DL
  if (layout.row_bytes <= 64) {
    decode_rows_vbmi(first, stride, n_rows, layout, step, lo, out);
    return;
  }
#endif
  const int64_t n = layout.fields();
  for (int64_t j = 0; j + 1 < n_rows; ++j) DecodeRow(first + j * stride, layout, step, lo, out + j * n);
  // The last row may end the buffer: decoded from a copy with room for the gather's overread.
  thread_local std::vector<uint8_t> padded;
  padded.assign(static_cast<std::size_t>(layout.row_bytes + 8), 0);
  std::memcpy(padded.data(), first + (n_rows - 1) * stride, static_cast<std::size_t>(layout.row_bytes));
  DecodeRow(padded.data(), layout, step, lo, out + (n_rows - 1) * n);
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(DecodeBitFieldRowsImpl);

BitFieldLayout BitFieldLayout::from_widths(const int32_t* widths, int64_t n) {
  BitFieldLayout layout;
  int64_t bit = 0;
  for (int64_t i = 0; i < n; ++i) {
    layout.first_byte.push_back(static_cast<int32_t>(bit >> 3));
    layout.shift.push_back(static_cast<int32_t>(bit & 7));
    layout.mask.push_back(static_cast<int32_t>((1u << widths[i]) - 1u));
    // The field's two bytes at the bottom of its 32-bit lane (mod 64: an index past a 64-byte
    // row only feeds bits the mask drops, as the field ends inside the row).
    const auto first_byte = static_cast<uint8_t>(bit >> 3);
    for (uint8_t b : {first_byte, static_cast<uint8_t>(first_byte + 1), uint8_t{0}, uint8_t{0}})
      layout.byte_index.push_back(static_cast<uint8_t>(b & 63));
    bit += widths[i];
  }
  layout.row_bytes = (bit + 7) / 8;
  return layout;
}

void decode_bit_field_rows(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                           const float* step, const float* lo, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeBitFieldRowsImpl)(first, stride, n_rows, layout, step, lo, out);
}

namespace scalar {
void decode_bit_field_rows(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                           const float* step, const float* lo, float* out) {
  const int64_t n = layout.fields();
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* row = first + j * stride;
    int64_t bit = 0;
    for (int64_t i = 0; i < n; ++i) {
      // Bit by bit from the widths the masks encode: independent of the first-byte/shift tables.
      const int width = __builtin_popcount(static_cast<uint32_t>(layout.mask[static_cast<std::size_t>(i)]));
      uint32_t code = 0;
      for (int k = 0; k < width; ++k, ++bit) code |= static_cast<uint32_t>((row[bit >> 3] >> (bit & 7)) & 1) << k;
      out[j * n + i] = std::fma(static_cast<float>(code), step[i], lo[i]);
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
