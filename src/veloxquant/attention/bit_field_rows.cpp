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
#include "veloxquant/attention/latent_pair_tiles.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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

// One 64-field chunk's tables, held in registers across the rows of a tile.
struct ChunkTables {
  __m512i bit, qword, mask, bit_hi, qword_hi;
};

HWY_INLINE ChunkTables chunk_tables(const BitFieldLayout& layout, std::size_t at) {
  ChunkTables t;
  t.bit = _mm512_loadu_si512(layout.field_bit.data() + at);
  t.qword = _mm512_loadu_si512(layout.qword_bytes.data() + at);
  t.mask = _mm512_loadu_si512(layout.field_mask.data() + at);
  t.bit_hi = layout.two_pass ? _mm512_loadu_si512(layout.field_bit_hi.data() + at) : _mm512_setzero_si512();
  t.qword_hi = layout.two_pass ? _mm512_loadu_si512(layout.qword_bytes_hi.data() + at) : _mm512_setzero_si512();
  return t;
}

// chunk_codes with the tables in registers (the same operations).
HWY_INLINE __m512i chunk_codes(const ChunkTables& t, bool two_pass, __m512i bytes) {
  const __mmask64 hi_fields = 0xF0F0F0F0F0F0F0F0ull;
  __m512i codes = _mm512_multishift_epi64_epi8(t.bit, _mm512_permutexvar_epi8(t.qword, bytes));
  if (two_pass) {
    const __m512i hi = _mm512_multishift_epi64_epi8(t.bit_hi, _mm512_permutexvar_epi8(t.qword_hi, bytes));
    codes = _mm512_mask_blend_epi8(hi_fields, codes, hi);
  }
  return _mm512_and_si512(codes, t.mask);
}

// Codes 16 * part .. 16 * part + 15 of a chunk's 64 byte codes as 32-bit lanes: one byte
// permute with zeroing (each dword's low byte its code) instead of an extract and a widen.
HWY_INLINE __m512i widen_part(__m512i codes, int part) {
  const __mmask64 low_bytes = 0x1111111111111111ull;
  const __m512i idx = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                       _mm512_set1_epi32(16 * part));
  return _mm512_maskz_permutexvar_epi8(low_bytes, idx, codes);
}

// The rows of one 64-field chunk with PARTS vectors of 16 fields (a compile-time count, so the
// steps, lows and widen indices stay in registers across the rows).
template <int PARTS, class Place>
HWY_INLINE void decode_chunk_rows(const uint8_t* first, int64_t stride, int64_t n_rows, __mmask64 row_mask,
                                  const ChunkTables& tables, bool two_pass, const float* step, const float* lo,
                                  int64_t c, int64_t m, const Place& place) {
  __m512 steps[PARTS], lows[PARTS];
#pragma GCC unroll 4
  for (int i = 0; i < PARTS; ++i) {
    const int64_t left = m - 16 * i;
    const __mmask16 k = left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
    steps[i] = _mm512_maskz_loadu_ps(k, step + c + 16 * i);
    lows[i] = _mm512_maskz_loadu_ps(k, lo + c + 16 * i);
  }
  for (int64_t j = 0; j < n_rows; ++j) {
    const __m512i codes = chunk_codes(tables, two_pass, _mm512_maskz_loadu_epi8(row_mask, first + j * stride));
#pragma GCC unroll 4
    for (int i = 0; i < PARTS; ++i) {
      const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(widen_part(codes, i)), steps[i], lows[i]);
      place(v, c + 16 * i, std::min<int64_t>(16, m - 16 * i), j);
    }
  }
}

// Rows of at most 64 bytes, chunk by chunk of 64 fields (its tables, steps and lows loaded once
// for all rows): per row one masked load, the chunk's codes, and per 16 fields a widen, a
// convert and the FMA of DecodeRow. place(v, field, valid, row) stores the 16 values of fields
// [field, field + 16) (the first `valid` real, the rest zero from zeroed steps and lows).
template <class Place>
HWY_INLINE void decode_vbmi(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                            const float* step, const float* lo, const Place& place) {
  const int64_t n = layout.fields();
  const __mmask64 row_mask = layout.row_bytes >= 64 ? ~__mmask64{0} : (__mmask64{1} << layout.row_bytes) - 1;
  for (int64_t c = 0; c < n; c += 64) {
    const ChunkTables tables = chunk_tables(layout, static_cast<std::size_t>(c));
    const int64_t m = std::min<int64_t>(64, n - c);
    switch ((m + 15) / 16) {
      case 1:
        decode_chunk_rows<1>(first, stride, n_rows, row_mask, tables, layout.two_pass, step, lo, c, m, place);
        break;
      case 2:
        decode_chunk_rows<2>(first, stride, n_rows, row_mask, tables, layout.two_pass, step, lo, c, m, place);
        break;
      case 3:
        decode_chunk_rows<3>(first, stride, n_rows, row_mask, tables, layout.two_pass, step, lo, c, m, place);
        break;
      default:
        decode_chunk_rows<4>(first, stride, n_rows, row_mask, tables, layout.two_pass, step, lo, c, m, place);
        break;
    }
  }
}

void decode_rows_vbmi(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                      const float* step, const float* lo, float* out) {
  const int64_t n = layout.fields();
  decode_vbmi(first, stride, n_rows, layout, step, lo, [&](__m512 v, int64_t field, int64_t valid, int64_t j) {
    const __mmask16 k = valid >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << valid) - 1u);
    _mm512_mask_storeu_ps(out + j * n + field, k, v);
  });
}

// The pair tile of attention/latent_pair_tiles.h: each 8-field half of v to its chunk of the
// row's pair, or (the chunk past the last whole one) its first fields % 8 values to the tail.
void decode_pair_tile_vbmi(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                           const float* step, const float* lo, float* tile) {
  const int64_t n = layout.fields(), chunks = n / 8, t_count = n % 8;
  float* tail = tile + (n_rows / 2) * chunks * 16;
  decode_vbmi(first, stride, n_rows, layout, step, lo, [&](__m512 v, int64_t field, int64_t, int64_t j) {
    float* pair = tile + (j >> 1) * chunks * 16 + (j & 1) * 8 + field * 2;  // field / 8 chunks of 16
    if (field + 16 <= 8 * chunks) {                                         // both halves whole chunks: the common case
      _mm256_storeu_ps(pair, _mm512_castps512_ps256(v));
      _mm256_storeu_ps(pair + 16, _mm512_extractf32x8_ps(v, 1));
      return;
    }
    alignas(64) float part[16];
    _mm512_store_ps(part, v);
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t c = field / 8 + h;
      if (c < chunks) {
        _mm256_storeu_ps(pair + h * 16, _mm256_load_ps(part + 8 * h));
      } else if (c == chunks) {  // the first fields % 8 values: the tail, 8 rows a column
        float* dst = tail + (j / 8) * t_count * 8 + j % 8;
        for (int64_t t = 0; t < t_count; ++t) dst[t * 8] = part[8 * h + t];
      }
    }
  });
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

// The same codes as decode_codes_vbmi, kept as bytes: each 64-field chunk stored as it comes
// out of chunk_codes (zero past the last field).
void decode_bytes_vbmi(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout, uint8_t* out,
                       int64_t code_stride) {
  const __mmask64 row_mask = layout.row_bytes >= 64 ? ~__mmask64{0} : (__mmask64{1} << layout.row_bytes) - 1;
  const int64_t table = static_cast<int64_t>(layout.field_mask.size());
  for (int64_t j = 0; j < n_rows; ++j) {
    const __m512i bytes = _mm512_maskz_loadu_epi8(row_mask, first + j * stride);
    uint8_t* o = out + j * code_stride;
    for (int64_t c = 0; c < code_stride; c += 64) {
      const __m512i codes =
          c < table ? chunk_codes(layout, static_cast<std::size_t>(c), bytes) : _mm512_setzero_si512();
      _mm512_storeu_si512(o + c, codes);
    }
  }
}
#endif

// Field i of a row, from the two bytes at its first byte (a field ends inside its row): the
// portable route of both code decoders below.
HWY_INLINE uint32_t field_at(const uint8_t* row, const BitFieldLayout& layout, int64_t i) {
  const auto at = static_cast<std::size_t>(i);
  const int64_t b = layout.first_byte[at];
  uint32_t word = row[b];
  if (layout.shift[at] + __builtin_popcount(static_cast<uint32_t>(layout.mask[at])) > 8) {
    word |= static_cast<uint32_t>(row[b + 1]) << 8;
  }
  return (word >> layout.shift[at]) & static_cast<uint32_t>(layout.mask[at]);
}

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
      o[i] = static_cast<int16_t>(field_at(row, layout, i));
    }
    for (int64_t i = n; i < code_stride; ++i) o[i] = 0;
  }
}

void DecodeBitFieldBytesImpl(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                             uint8_t* codes, int64_t code_stride) {
#if HWY_TARGET == HWY_AVX3_DL
  if (layout.row_bytes <= 64) {
    decode_bytes_vbmi(first, stride, n_rows, layout, codes, code_stride);
    return;
  }
#endif
  const int64_t n = layout.fields();
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* row = first + j * stride;
    uint8_t* o = codes + j * code_stride;
    for (int64_t i = 0; i < n; ++i) {
      o[i] = static_cast<uint8_t>(field_at(row, layout, i));
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

void DecodeBitFieldPairTileImpl(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                                const float* step, const float* lo, float* tile) {
  if (n_rows <= 0) return;
#if HWY_TARGET == HWY_AVX3_DL
  if (layout.row_bytes <= 64) {
    decode_pair_tile_vbmi(first, stride, n_rows, layout, step, lo, tile);
    return;
  }
#endif
  // Elsewhere the rows decoded plainly, then laid out in pairs (grow-only per thread).
  thread_local std::vector<float> rows;
  rows.resize(static_cast<std::size_t>(n_rows * layout.fields()));
  DecodeBitFieldRowsImpl(first, stride, n_rows, layout, step, lo, rows.data());
  pair_tile_from_rows(rows.data(), layout.fields(), n_rows, layout.fields(), tile);
}

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(DecodeBitFieldRowsImpl);
HWY_EXPORT(DecodeBitFieldCodesImpl);
HWY_EXPORT(DecodeBitFieldBytesImpl);
HWY_EXPORT(DecodeBitFieldPairTileImpl);

void decode_bit_field_pair_tile(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                                const float* step, const float* lo, float* tile) {
  HWY_DYNAMIC_DISPATCH(DecodeBitFieldPairTileImpl)(first, stride, n_rows, layout, step, lo, tile);
}

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

void decode_bit_field_bytes(const uint8_t* first, int64_t stride, int64_t n_rows, const BitFieldLayout& layout,
                            uint8_t* codes, int64_t code_stride) {
  HWY_DYNAMIC_DISPATCH(DecodeBitFieldBytesImpl)(first, stride, n_rows, layout, codes, code_stride);
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
