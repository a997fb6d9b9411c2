// Per-target helper (Highway -inl header: included once per SIMD target from inside a
// foreach_target translation unit): 16 dense b-bit codes (b <= 6) looked up in a table of
// 2^b 16-bit entries held in registers, the result one vector of 16 u16 lanes in code order.
//
// Two users read the same code streams (turboquant_block's rows, quant/block_lloyd_quant.h):
// the tile decoder (dense_level_rows.cpp) with a table of f16 level bits, which it widens to
// f32, and the integer key scorer (block_level_key_scores.cpp) with the levels rounded to
// int16, which it multiplies with the query in pairs. One lookup for both, so both see the same
// codes.
//
// Codes are dense and LSB-first (code i at bits [i*b, (i+1)*b)), so 16 codes span exactly 2b
// bytes (a "pass"). Per pass:
//   extract  the pass's bytes are broadcast to both 128-bit halves; one byte shuffle puts code
//            k's 16-bit window in lane k; a multiply by 2^(16-b-s_k) moves its bits to the top,
//            and shifts by 16-b and 8-b bring the code to the low byte (c) and to the high byte
//            (c << 8, with bits below it in the low byte that nobody reads);
//   look up  one byte shuffle of c into a table of the entries' low bytes and one of c << 8
//            into a table of their high bytes (16 entries per table; a byte blend per code bit
//            above 4 picks the table), then a fixed blend joins low and high bytes.
// 13 instructions per 16 codes at b <= 4, 18 at b = 5.
#if defined(VELOXQUANT_ATTENTION_DENSE_CODE_LOOKUP_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef VELOXQUANT_ATTENTION_DENSE_CODE_LOOKUP_INL_H_
#undef VELOXQUANT_ATTENTION_DENSE_CODE_LOOKUP_INL_H_
#else
#define VELOXQUANT_ATTENTION_DENSE_CODE_LOOKUP_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// The extract step every reader below shares. D16: a tag of 16 u16 lanes (256 bits). Lane k
// (k < 16) holds code k: bit offset k*B, window bytes k*B/8 and the next, shift s_k. The byte
// shuffle works within each 128-bit half; both halves hold the same broadcast 16 bytes, so the
// upper half's window indices are relative to the pass start as well.
template <int B, class D16>
class CodeWindows {
 protected:
  using D8 = hn::Repartition<uint8_t, D16>;

  CodeWindows() {
    const D16 du16;
    const D8 du8;
    HWY_ALIGN uint8_t window_bytes[32];
    HWY_ALIGN uint16_t lift[16];
    HWY_ALIGN uint8_t odd_bytes[32];
    for (int64_t k = 0; k < 16; ++k) {
      window_bytes[2 * k] = static_cast<uint8_t>(k * B / 8);
      window_bytes[2 * k + 1] = static_cast<uint8_t>(k * B / 8 + 1);
      lift[k] = static_cast<uint16_t>(1u << (16 - B - k * B % 8));
      odd_bytes[2 * k] = 0;
      odd_bytes[2 * k + 1] = 0xff;
    }
    windows_index_ = hn::Load(du8, window_bytes);
    lifts_ = hn::Load(du16, lift);
    high_half_ = hn::MaskFromVec(hn::Load(du8, odd_bytes));
  }

  // Each code's 16-bit window multiplied by 2^(16-B-s_k): code k's bits at the top of lane k
  // (reads 16 bytes at `pass`).
  HWY_INLINE hn::Vec<D16> lifted(const uint8_t* pass) const {
    const D16 du16;
    const D8 du8;
    const auto windows = hn::BitCast(du16, hn::TableLookupBytes(hn::LoadDup128(du8, pass), windows_index_));
    return hn::Mul(windows, lifts_);
  }

  // Table t holds entries 16t..16t+15 of `entries` (n of them; 0 past n): their low bytes in
  // low[t], high bytes in high[t], repeated in both 128-bit halves.
  static void load_byte_tables(const uint16_t* entries, int n, int tables, hn::Vec<D8>* low, hn::Vec<D8>* high) {
    const D8 du8;
    for (int t = 0; t < tables; ++t) {
      HWY_ALIGN uint8_t lo[32], hi[32];
      for (int e = 0; e < 16; ++e) {
        const int entry = 16 * t + e;
        const uint16_t v = entry < n ? entries[entry] : 0;
        lo[e] = lo[16 + e] = static_cast<uint8_t>(v & 0xff);
        hi[e] = hi[16 + e] = static_cast<uint8_t>(v >> 8);
      }
      low[t] = hn::Load(du8, lo);
      high[t] = hn::Load(du8, hi);
    }
  }

  hn::Vec<D8> windows_index_;
  hn::Vec<D16> lifts_;
  hn::Mask<D8> high_half_;  // the high byte of every u16 lane
};

// Reads 16 bytes from each pass (only the first 2B are used); a caller whose last pass would
// read past readable memory passes a padded copy.
template <int B, class D16>
class DenseCodeLookup : CodeWindows<B, D16> {
  static_assert(B >= 1 && B <= 6, "tables of up to 64 entries");
  using D8 = hn::Repartition<uint8_t, D16>;
  using DI8 = hn::Repartition<int8_t, D16>;
  static constexpr int kTables = B <= 4 ? 1 : 1 << (B - 4);

 public:
  static constexpr int64_t kPassBytes = int64_t{2} * B;  // 16 codes

  // entries[c] for c < 2^B: the 16-bit value code c looks up.
  explicit DenseCodeLookup(const uint16_t* entries) {
    this->load_byte_tables(entries, 1 << B, kTables, low_tables_, high_tables_);
  }

  // The entries of the 16 codes at `pass`, lane k = code k.
  HWY_INLINE hn::Vec<D16> operator()(const uint8_t* pass) const {
    const D16 du16;
    const auto lifted = this->lifted(pass);
    const auto code = hn::ShiftRight<16 - B>(lifted);      // c in the low byte
    const auto code_high = hn::ShiftRight<8 - B>(lifted);  // c in the high byte
    return hn::BitCast(du16,
                       hn::IfThenElse(this->high_half_, look_up(code_high, high_tables_), look_up(code, low_tables_)));
  }

 private:
  // Bytes of `index` looked up in `tables`; code bit 4 (and 5) of each byte's index, moved to
  // the byte's sign by a u16 shift, picks the table. What a shift carries from a lane's low byte
  // into its high byte lands in bits the shift emptied, below the sign.
  HWY_INLINE hn::Vec<D8> look_up(hn::Vec<D16> index, const hn::Vec<D8>* tables) const {
    const D8 du8;
    const DI8 di8;
    hn::Vec<D8> level[kTables];
    for (int t = 0; t < kTables; ++t) level[t] = hn::TableLookupBytes(tables[t], hn::BitCast(du8, index));
    for (int bit = 4, n = kTables; n > 1; ++bit, n /= 2) {
      const auto sign = hn::BitCast(di8, hn::ShiftLeftSame(index, 7 - bit));
      for (int t = 0; t < n / 2; ++t) {
        level[t] = hn::BitCast(
            du8, hn::IfNegativeThenElse(sign, hn::BitCast(di8, level[2 * t + 1]), hn::BitCast(di8, level[2 * t])));
      }
    }
    return level[0];
  }

  hn::Vec<D8> low_tables_[kTables];
  hn::Vec<D8> high_tables_[kTables];
};

// 16 dense b-bit codes (2 <= b <= 6) looked up in a table of 2^b int16 entries that is
// antisymmetric, entry[2^b - 1 - c] = -entry[c] (turboquant_block's Lloyd levels rounded to
// int16: solved symmetric, rounded half to even), the result one vector of 16 int16 lanes in
// code order, equal to DenseCodeLookup's.
//
// Only the lower half of the table is held: an arithmetic shift of the lifted window gives the
// code with its top bit as the sign, x = c - 2^b * top(c) in [-2^(b-1), 2^(b-1)); y = x ^ (x >> 15)
// is c for the lower half and 2^b - 1 - c for the upper half, so entry[c] = entry[y] negated
// where x < 0. Half the entries means one table of low and one of high bytes up to b = 5 (two
// each at b = 6), and one index vector (y in both bytes) for both: per 16 codes 12 instructions
// at b <= 5 against 13-18 for the whole table, 17 at b = 6 against ~25.
template <int B, class D16>
class SymmetricCodeLookup : CodeWindows<B, D16> {
  static_assert(B >= 2 && B <= 6, "half tables of up to 32 entries");
  using D8 = hn::Repartition<uint8_t, D16>;
  using DI8 = hn::Repartition<int8_t, D16>;
  using DI16 = hn::RebindToSigned<D16>;
  static constexpr int kTables = B <= 5 ? 1 : 2;

 public:
  static constexpr int64_t kPassBytes = int64_t{2} * B;  // 16 codes

  // entries[c] for c < 2^B as int16 bits; the caller checked the antisymmetry.
  explicit SymmetricCodeLookup(const uint16_t* entries) {
    this->load_byte_tables(entries, 1 << (B - 1), kTables, low_tables_, high_tables_);
  }

  // The entries of the 16 codes at `pass`, lane k = code k (reads 16 bytes).
  HWY_INLINE hn::Vec<D16> operator()(const uint8_t* pass) const {
    const D16 du16;
    const D8 du8;
    const DI8 di8;
    const DI16 di16;
    const auto x = hn::ShiftRight<16 - B>(hn::BitCast(di16, this->lifted(pass)));  // arithmetic
    const auto sx = hn::ShiftRight<15>(x);
    const auto y = hn::BitCast(du16, hn::Xor(x, sx));  // < 2^(B-1): bit 7 of both bytes clear
    const auto index = hn::BitCast(du8, hn::Mul(y, hn::Set(du16, uint16_t{0x0101})));  // y in both bytes
    hn::Vec<D8> low = hn::TableLookupBytes(low_tables_[0], index);
    hn::Vec<D8> high = hn::TableLookupBytes(high_tables_[0], index);
    if constexpr (kTables == 2) {
      // Bit 4 of y moved to each byte's sign picks the table.
      const auto sign = hn::BitCast(di8, hn::ShiftLeft<3>(hn::BitCast(du16, index)));
      low = hn::BitCast(du8, hn::IfNegativeThenElse(sign, hn::BitCast(di8, hn::TableLookupBytes(low_tables_[1], index)),
                                                    hn::BitCast(di8, low)));
      high =
          hn::BitCast(du8, hn::IfNegativeThenElse(sign, hn::BitCast(di8, hn::TableLookupBytes(high_tables_[1], index)),
                                                  hn::BitCast(di8, high)));
    }
    const auto v = hn::BitCast(di16, hn::IfThenElse(this->high_half_, high, low));
    return hn::BitCast(du16, hn::Sub(hn::Xor(v, sx), sx));  // negated where x < 0
  }

 private:
  hn::Vec<D8> low_tables_[kTables];
  hn::Vec<D8> high_tables_[kTables];
};

// 16 dense b-bit codes (b <= 6) as they are, lane k = code k in u16 lanes: DenseCodeLookup's
// extract step without the table (4 instructions per 16 codes). Codes on evenly spaced levels
// need no table: the key scorer multiplies the codes themselves and corrects each block's sum
// once (block_level_key_scores.cpp), the value adder widens them to f32 (block_level_value_sums.cpp).
template <int B, class D16>
class DenseCodes : CodeWindows<B, D16> {
  static_assert(B >= 1 && B <= 6, "codes of up to 6 bits");

 public:
  static constexpr int64_t kPassBytes = int64_t{2} * B;  // 16 codes

  // The 16 codes at `pass` (reads 16 bytes, as DenseCodeLookup).
  HWY_INLINE hn::Vec<D16> operator()(const uint8_t* pass) const { return hn::ShiftRight<16 - B>(this->lifted(pass)); }
};

// 16 byte codes widened to u16 lanes (the same interface as DenseCodes, for 8-bit codes).
template <class D16>
class ByteCodes {
 public:
  static constexpr int64_t kPassBytes = 16;
  HWY_INLINE hn::Vec<D16> operator()(const uint8_t* pass) const {
    const hn::Rebind<uint8_t, D16> du8;  // 16 bytes
    return hn::PromoteTo(D16(), hn::LoadU(du8, pass));
  }
};

// 8-bit codes on evenly spaced levels (quant/block_lloyd_quant.cpp from 7 bits on: level c is
// (2c - 255) / 256): the entry of code c is the integer 2c - 255, computed rather than looked up.
// The same interface as DenseCodeLookup (the constructor's table is not read).
template <class D16>
class EvenByteLevels {
 public:
  static constexpr int64_t kPassBytes = 16;
  explicit EvenByteLevels(const uint16_t* /*entries*/) {}
  HWY_INLINE hn::Vec<D16> operator()(const uint8_t* pass) const {
    const D16 du16;
    const hn::Rebind<uint8_t, D16> du8;  // 16 bytes
    const auto codes = hn::PromoteTo(du16, hn::LoadU(du8, pass));
    return hn::Sub(hn::Add(codes, codes), hn::Set(du16, uint16_t{255}));  // 2c - 255, wrapping below 0
  }
};

// The levels of 8 codes on even levels, as f32: (2c - 255) / 256 computed exactly from the
// widened byte (c * 2/256 - 255/256, one FMA on a small integer), for readers that want floats.
template <class DF>
HWY_INLINE hn::Vec<DF> even_byte_levels_f32(DF df, const uint8_t* codes) {
  const hn::Rebind<int32_t, DF> di;
  const hn::Rebind<uint32_t, DF> du32;
  const hn::Rebind<uint8_t, DF> du8;
  const auto code = hn::ConvertTo(df, hn::BitCast(di, hn::PromoteTo(du32, hn::LoadU(du8, codes))));
  return hn::MulAdd(code, hn::Set(df, 2.0f / 256.0f), hn::Set(df, -255.0f / 256.0f));
}

// Level tables of up to 8 f32 entries (block_level_key_scores.cpp, block_level_value_sums.cpp):
// the 8 f32 lanes of `table` picked by the low 3 bits of each lane of `index` (x86: one vpermps,
// which reads only those bits; elsewhere the bits above are masked first).
template <class DF>
HWY_INLINE hn::Vec<DF> permute_lanes8(DF df, hn::Vec<DF> table, hn::Vec<hn::RebindToUnsigned<DF>> index) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  (void)df;
  return hn::Vec<DF>{_mm256_permutevar8x32_ps(table.raw, index.raw)};
#else
  const hn::RebindToSigned<DF> di;
  const auto masked = hn::BitCast(di, hn::And(index, hn::Set(hn::RebindToUnsigned<DF>(), 7u)));
  return hn::TableLookupLanes(table, hn::IndicesFromVec(df, masked));
#endif
}
#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard toggle
