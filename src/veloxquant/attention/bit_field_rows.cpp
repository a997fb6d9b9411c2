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

#include <algorithm>
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
  // Without a native FMA (SSE4, SSSE3, the emulated targets) MulAdd is a multiply and an add,
  // two roundings: every field takes the scalar FMA there, so all targets equal the reference.
  const int64_t whole = HWY_NATIVE_FMA ? n - n % lanes : 0;
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
// Rows of at most 64 bytes: the row is one masked 64-byte load (no read past it); per 64-field
// chunk a byte permute puts, in each 64-bit lane, the 8 row bytes from the first byte of the
// lane's first field (its 8 fields span at most 7 + 64 bits), a multishift takes each field's 8
// bits from its offset there (rotating within the lane: bits past the lane's 64 would wrap, so
// a layout with such a field also permutes from field 4's first byte and takes fields 4..7 of
// each lane from that), a mask leaves the codes as bytes; 16 codes at a time are widened,
// converted and put through the same FMA as DecodeRow.
// The 64 codes (as bytes) of fields [at, at + 64) of a row held in `bytes`: the permute and
// multishift above (and the second pass for fields crossing their lane's 64 bits), masked.
HWY_INLINE __m512i chunk_codes(const BitFieldLayout& layout, std::size_t at, __m512i bytes) {
  const __mmask64 hi_fields = 0xF0F0F0F0F0F0F0F0ull;
  __m512i codes =
      _mm512_multishift_epi64_epi8(_mm512_loadu_si512(layout.field_bit.data() + at),
                                   _mm512_permutexvar_epi8(_mm512_loadu_si512(layout.qword_bytes.data() + at), bytes));
  if (layout.two_pass) {
    const __m512i hi = _mm512_multishift_epi64_epi8(
        _mm512_loadu_si512(layout.field_bit_hi.data() + at),
        _mm512_permutexvar_epi8(_mm512_loadu_si512(layout.qword_bytes_hi.data() + at), bytes));
    codes = _mm512_mask_blend_epi8(hi_fields, codes, hi);
  }
  return _mm512_and_si512(codes, _mm512_loadu_si512(layout.field_mask.data() + at));
}

void decode_rows_vbmi(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                      const float* step, const float* lo, float* out) {
  const int64_t n = layout.fields();
  const __mmask64 row_mask = layout.row_bytes >= 64 ? ~__mmask64{0} : (__mmask64{1} << layout.row_bytes) - 1;
  for (int64_t j = 0; j < n_rows; ++j) {
    const __m512i bytes = _mm512_maskz_loadu_epi8(row_mask, first + j * stride);
    float* o = out + j * n;
    for (int64_t c = 0; c < n; c += 64) {
      const auto at = static_cast<std::size_t>(c);
      const __m512i codes = chunk_codes(layout, at, bytes);
      const int64_t m = std::min<int64_t>(64, n - c);
      for (int64_t i = 0; i < m; i += 16) {
        const __mmask16 k = m - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (m - i)) - 1u);
        __m128i part;
        switch (i) {
          case 0:
            part = _mm512_castsi512_si128(codes);
            break;
          case 16:
            part = _mm512_extracti32x4_epi32(codes, 1);
            break;
          case 32:
            part = _mm512_extracti32x4_epi32(codes, 2);
            break;
          default:
            part = _mm512_extracti32x4_epi32(codes, 3);
            break;
        }
        const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(part)),
                                         _mm512_maskz_loadu_ps(k, step + c + i), _mm512_maskz_loadu_ps(k, lo + c + i));
        _mm512_mask_storeu_ps(o + c + i, k, v);
      }
    }
  }
}

// The same codes as decode_rows_vbmi, kept as 16-bit integers: each 64-field chunk's bytes
// widened in two halves of 32 and stored up to code_stride (the tables' zero masks past the
// last field give the zeros there).
void decode_codes_vbmi(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout, int16_t* out,
                       int64_t code_stride) {
  const __mmask64 row_mask = layout.row_bytes >= 64 ? ~__mmask64{0} : (__mmask64{1} << layout.row_bytes) - 1;
  const int64_t table = static_cast<int64_t>(layout.field_mask.size());
  for (int64_t j = 0; j < n_rows; ++j) {
    const __m512i bytes = _mm512_maskz_loadu_epi8(row_mask, first + j * stride);
    int16_t* o = out + j * code_stride;
    for (int64_t c = 0; c < code_stride; c += 64) {
      __m512i codes = _mm512_setzero_si512();
      if (c < table) {
        const auto at = static_cast<std::size_t>(c);
        codes = chunk_codes(layout, at, bytes);
      }
      _mm512_storeu_si512(o + c, _mm512_cvtepu8_epi16(_mm512_castsi512_si256(codes)));
      if (c + 32 < code_stride)
        _mm512_storeu_si512(o + c + 32, _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(codes, 1)));
    }
  }
}
#endif

void DecodeBitFieldCodesImpl(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                             int16_t* codes, int64_t code_stride) {
#if HWY_TARGET == HWY_AVX3_DL
  if (layout.row_bytes <= 64) {
    decode_codes_vbmi(first, stride, n_rows, layout, codes, code_stride);
    return;
  }
#endif
  // Elsewhere field by field from the two bytes at its first byte (a field ends inside its row).
  const int64_t n = layout.fields();
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* row = first + j * stride;
    int16_t* o = codes + j * code_stride;
    for (int64_t i = 0; i < n; ++i) {
      const auto at = static_cast<std::size_t>(i);
      const int64_t b = layout.first_byte[at];
      uint32_t word = row[b];
      if (layout.shift[at] + __builtin_popcount(static_cast<uint32_t>(layout.mask[at])) > 8) {
        word |= static_cast<uint32_t>(row[b + 1]) << 8;
      }
      o[i] = static_cast<int16_t>((word >> layout.shift[at]) & static_cast<uint32_t>(layout.mask[at]));
    }
    for (int64_t i = n; i < code_stride; ++i) o[i] = 0;
  }
}

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
HWY_EXPORT(DecodeBitFieldCodesImpl);

BitFieldLayout BitFieldLayout::from_widths(const int32_t* widths, int64_t n) {
  BitFieldLayout layout;
  int64_t bit = 0;
  for (int64_t i = 0; i < n; ++i) {
    layout.first_byte.push_back(static_cast<int32_t>(bit >> 3));
    layout.shift.push_back(static_cast<int32_t>(bit & 7));
    layout.mask.push_back(static_cast<int32_t>((1u << widths[i]) - 1u));
    bit += widths[i];
  }
  layout.row_bytes = (bit + 7) / 8;
  // The byte-code tables (see the header), for rows the VBMI kernel takes.
  const std::size_t padded = static_cast<std::size_t>((n + 63) / 64 * 64);
  for (auto* t :
       {&layout.qword_bytes, &layout.field_bit, &layout.field_mask, &layout.qword_bytes_hi, &layout.field_bit_hi}) {
    t->assign(padded, 0);
  }
  const auto start_bit = [&](int64_t i) {
    return int64_t{layout.first_byte[static_cast<std::size_t>(i)]} * 8 + layout.shift[static_cast<std::size_t>(i)];
  };
  for (int64_t lane = 0; lane * 8 < n; ++lane) {
    const int64_t f0 = lane * 8, f4 = std::min(f0 + 4, n - 1);
    const int64_t base = layout.first_byte[static_cast<std::size_t>(f0)];
    const int64_t base_hi = layout.first_byte[static_cast<std::size_t>(f4)];
    for (int64_t k = 0; k < 8; ++k) {
      const auto at = static_cast<std::size_t>(f0 + k);
      layout.qword_bytes[at] = static_cast<uint8_t>((base + k) & 63);
      layout.qword_bytes_hi[at] = static_cast<uint8_t>((base_hi + k) & 63);
      if (f0 + k >= n) continue;
      const int64_t offset = start_bit(f0 + k) - base * 8, offset_hi = start_bit(f0 + k) - base_hi * 8;
      const int width = widths[f0 + k];
      layout.field_mask[at] = static_cast<uint8_t>((1u << width) - 1u);
      layout.field_bit[at] = static_cast<uint8_t>(offset & 63);
      layout.field_bit_hi[at] = static_cast<uint8_t>(offset_hi & 63);
      // Fields 0..3 of a lane end by bit 7 + 32 of it; a later one may pass bit 64.
      if (k >= 4 && offset + width > 64) layout.two_pass = true;
    }
  }
  return layout;
}

void decode_bit_field_rows(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                           const float* step, const float* lo, float* out) {
  HWY_DYNAMIC_DISPATCH(DecodeBitFieldRowsImpl)(first, stride, n_rows, layout, step, lo, out);
}

void decode_bit_field_codes(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                            int16_t* codes, int64_t code_stride) {
  HWY_DYNAMIC_DISPATCH(DecodeBitFieldCodesImpl)(first, stride, n_rows, layout, codes, code_stride);
}

namespace scalar {
void decode_bit_field_codes(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                            int16_t* codes, int64_t code_stride) {
  const int64_t n = layout.fields();
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* row = first + j * stride;
    int64_t bit = 0;
    for (int64_t i = 0; i < code_stride; ++i) {
      int32_t code = 0;
      if (i < n) {
        const int width = __builtin_popcount(static_cast<uint32_t>(layout.mask[static_cast<std::size_t>(i)]));
        for (int k = 0; k < width; ++k, ++bit) code |= ((row[bit >> 3] >> (bit & 7)) & 1) << k;
      }
      codes[j * code_stride + i] = static_cast<int16_t>(code);
    }
  }
}

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
