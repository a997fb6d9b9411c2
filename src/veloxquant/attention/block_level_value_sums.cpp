// Highway kernels for block_level_value_sums.h, compiled once per target and dispatched at run
// time. AVX3_DL (AVX-512 with VBMI) is compiled in too (Highway 1.0 compiles it only on request:
// hence the define, before any Highway header): its multishift spreads 16 codes to their lanes in
// one instruction (accumulate_permuted_wide), and head-64 even 8-bit values keep a query's 64
// outputs in four registers (accumulate_wide_even_bytes).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/block_level_value_sums.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/block_level_value_sums.h"
#include "veloxquant/attention/dense_code_lookup-inl.h"
#include "veloxquant/attention/dense_level_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/half.h"

#ifndef VELOXQUANT_BLOCK_LEVEL_VALUE_SUMS_ONCE_
#define VELOXQUANT_BLOCK_LEVEL_VALUE_SUMS_ONCE_
namespace veloxquant::attention::kernels {
// The most rows a tile reads through padded copies: the last pass of a row reads at most 14 bytes
// past its end, and rows are at least 4 bytes (32 one-bit codes).
inline constexpr int64_t kMaxPaddedRows = 4;
}  // namespace veloxquant::attention::kernels
#endif

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
bool ValueSumsSupportedImpl() { return hn::MaxLanes(hn::CappedTag<float, 8>()) == 8; }

// NQ queries, chunks of kChunkPasses passes (16 coordinates each): the chunk's NQ x 2 *
// kChunkPasses output vectors stay in registers while every row passes.
template <int B, int NQ, int kChunkPasses>
void accumulate_chunks(const BlockLevelValues& v, const float* weights, int64_t ld, float* acc, int64_t acc_stride) {
  const hn::CappedTag<float, 8> df;
  const hn::Repartition<uint16_t, decltype(df)> du16;  // 16 lanes
  const hn::Half<decltype(du16)> du16h;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  using VF = hn::Vec<decltype(df)>;
  using Lookup = DenseCodeLookup<B, decltype(du16)>;
  constexpr int64_t kPassBytes = Lookup::kPassBytes;
  constexpr int kVectors = 2 * kChunkPasses;
  const Lookup level_of(v.levels_f16);

  const uint8_t* const codes = v.codes;
  const uint16_t* const scales = v.scales;
  const int64_t dim = v.dim, n_rows = v.n_rows, code_stride = v.code_stride, block = v.block;
  const int64_t blocks = dim / block;
  const int64_t row_code_bytes = (dim * B + 7) / 8;
  const int64_t row_load_end = (dim / 16 - 1) * kPassBytes + 16;  // the last pass reads 16 bytes
  // Rows whose last pass would read past the tile's code bytes (the last few) are read from
  // zero-padded copies, made once.
  const int64_t first_padded = first_padded_row(n_rows, code_stride, row_code_bytes, row_load_end);
  if (n_rows - first_padded > kMaxPaddedRows) {  // not reached by any allowed shape
    return scalar::accumulate_block_level_rows(v, weights, ld, NQ, acc, acc_stride);
  }
  HWY_ALIGN uint8_t padded[kMaxPaddedRows][kMaxCodeRowBytes + 16];
  for (int64_t j = first_padded; j < n_rows; ++j) {
    uint8_t* copy = padded[j - first_padded];
    std::memcpy(copy, codes + j * code_stride, static_cast<std::size_t>(row_code_bytes));
    std::memset(copy + row_code_bytes, 0, 16);
  }
  const auto row_codes = [&](int64_t j) {
    return j < first_padded ? codes + j * code_stride : padded[j - first_padded];
  };

  for (int64_t e0 = 0; e0 < dim; e0 += int64_t{16} * kChunkPasses) {
    VF a[NQ][kVectors];
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
      for (int k = 0; k < kVectors; ++k) a[r][k] = hn::LoadU(df, acc + r * acc_stride + e0 + int64_t{8} * k);
    }
    const int64_t blk = e0 / block;
    const int64_t pass_offset = e0 / 16 * kPassBytes;
    for (int64_t j = 0; j < n_rows; ++j) {
      const uint8_t* pass = row_codes(j) + pass_offset;
      const VF scale = hn::PromoteTo(df, hn::BitCast(dh, hn::Set(du16h, scales[j * blocks + blk])));
      VF ws[NQ];
#pragma GCC unroll 3
      for (int r = 0; r < NQ; ++r) ws[r] = hn::Mul(hn::Set(df, weights[r * ld + j]), scale);
#pragma GCC unroll 2
      for (int c = 0; c < kChunkPasses; ++c) {
        const auto f16 = level_of(pass + c * kPassBytes);
        const VF lo = hn::PromoteTo(df, hn::BitCast(dh, hn::LowerHalf(du16h, f16)));
        const VF hi = hn::PromoteTo(df, hn::BitCast(dh, hn::UpperHalf(du16h, f16)));
#pragma GCC unroll 3
        for (int r = 0; r < NQ; ++r) {
          a[r][2 * c] = hn::MulAdd(lo, ws[r], a[r][2 * c]);
          a[r][2 * c + 1] = hn::MulAdd(hi, ws[r], a[r][2 * c + 1]);
        }
      }
    }
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
      for (int k = 0; k < kVectors; ++k) hn::StoreU(a[r][k], df, acc + r * acc_stride + e0 + int64_t{8} * k);
    }
  }
}

// 8-bit codes on even levels, NQ queries, chunks of 32 coordinates: each level is computed
// exactly from its code (dense_code_lookup-inl.h) and added with the weight times the block
// scale, as the table path adds a looked-up level. Rows take their weight times block scale from
// ws (weighted_block_scales, made once per tile), one broadcast per row and query (converting
// the scale and multiplying per row and chunk cost q8 about 8 more instructions per row).
template <int NQ>
void accumulate_even_bytes(const BlockLevelValues& v, const float* ws, float* acc, int64_t acc_stride) {
  const hn::CappedTag<float, 8> df;
  using VF = hn::Vec<decltype(df)>;
  const int64_t dim = v.dim, blocks = dim / v.block, n_rows = v.n_rows;
  for (int64_t e0 = 0; e0 < dim; e0 += 32) {
    VF a[NQ][4];
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) a[r][k] = hn::LoadU(df, acc + r * acc_stride + e0 + int64_t{8} * k);
    }
    const int64_t blk = e0 / v.block;
    const float* w[NQ];
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) w[r] = ws + (r * blocks + blk) * n_rows;
    const uint8_t* codes = v.codes + e0;
    for (int64_t j = 0; j < n_rows; ++j, codes += v.code_stride) {
      VF wr[NQ];
#pragma GCC unroll 3
      for (int r = 0; r < NQ; ++r) wr[r] = hn::Set(df, w[r][j]);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const VF level = even_byte_levels_f32(df, codes + int64_t{8} * k);
#pragma GCC unroll 3
        for (int r = 0; r < NQ; ++r) a[r][k] = hn::MulAdd(level, wr[r], a[r][k]);
      }
    }
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) hn::StoreU(a[r][k], df, acc + r * acc_stride + e0 + int64_t{8} * k);
    }
  }
}

// Codes on evenly spaced levels (even_levels, bits 1..6 or 8): level(c) = (2c - m) / 2^B with
// m = 2^B - 1, so value_j(e) = s * (2 / 2^B) * c - s * m / 2^B. The codes are widened to f32 as
// they are and added with ws2 = w * (s * 2 / 2^B), one FMA per element and query; the constant
// part of every row of a block meets the outputs once per call, -(m / 2) * sum_j ws2
// (uniform_weighted_scales). No level lookup, no scale work per row.
//
// The tile's weights times its block scales times k, ws[(r * blocks + b) * n + j] =
// w[r][j] * (f16(s_jb) * k) — the product each row's FMAs use, made once per tile in SIMD instead
// of once per row and chunk (k = 1 leaves f16(s) as it is: the table paths' w * s).
// The whole groups of 8 rows for NQ queries and kBlocks (1 or 2) blocks per row known at compile
// time (decode tiles: a GQA group): the output and weight rows as fixed pointers, no index
// arithmetic per store (the loop over runtime counts cost ~9 instructions per kv row, 3 now).
template <int NQ, int kBlocks>
void weighted_scales_fixed(const BlockLevelValues& v, const float* weights, int64_t ld, float k, float* ws) {
  const hn::CappedTag<float, 8> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  using VF = hn::Vec<decltype(df)>;
  const int64_t n = v.n_rows, whole = n / 8 * 8;
  const auto kv = hn::Set(df, k);
  const auto* scales = reinterpret_cast<const hwy::float16_t*>(v.scales);
  const float* w[NQ];
  float* out[NQ][kBlocks];
  for (int r = 0; r < NQ; ++r) {
    w[r] = weights + r * ld;
    for (int b = 0; b < kBlocks; ++b) out[r][b] = ws + (r * kBlocks + b) * n;
  }
  for (int64_t j = 0; j < whole; j += 8) {
    VF s[kBlocks];
    if constexpr (kBlocks == 1) {
      s[0] = hn::Mul(hn::PromoteTo(df, hn::LoadU(dh, scales + j)), kv);
    } else {
      const VF a = hn::PromoteTo(df, hn::LoadU(dh, scales + 2 * j));
      const VF b = hn::PromoteTo(df, hn::LoadU(dh, scales + 2 * j + 8));
      s[0] = hn::Mul(hn::ConcatEven(df, b, a), kv);
      s[1] = hn::Mul(hn::ConcatOdd(df, b, a), kv);
    }
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) {
      const VF wr = hn::LoadU(df, w[r] + j);
#pragma GCC unroll 2
      for (int b = 0; b < kBlocks; ++b) hn::StoreU(hn::Mul(wr, s[b]), df, out[r][b] + j);
    }
  }
}

void weighted_block_scales(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float k,
                           float* ws) {
  const hn::CappedTag<float, 8> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  using VF = hn::Vec<decltype(df)>;
  const int64_t n = v.n_rows, blocks = v.dim / v.block, whole = n / 8 * 8;
  const auto kv = hn::Set(df, k);
  const auto* scales = reinterpret_cast<const hwy::float16_t*>(v.scales);
  // One and two blocks per row (head sizes 64 and 128 in blocks of 32 or 64): 8 rows' scales
  // converted (two blocks: de-interleaved) and multiplied into every query's weights in one pass.
  if (blocks <= 2) {
    const int64_t fixed = n_q == 3 || n_q == 1 ? whole : 0;  // rows done by weighted_scales_fixed
    if (n_q == 3) {
      blocks == 1 ? weighted_scales_fixed<3, 1>(v, weights, ld, k, ws)
                  : weighted_scales_fixed<3, 2>(v, weights, ld, k, ws);
    } else if (n_q == 1) {
      blocks == 1 ? weighted_scales_fixed<1, 1>(v, weights, ld, k, ws)
                  : weighted_scales_fixed<1, 2>(v, weights, ld, k, ws);
    }
    for (int64_t j = fixed; j < whole; j += 8) {
      VF s[2];
      if (blocks == 1) {
        s[0] = hn::Mul(hn::PromoteTo(df, hn::LoadU(dh, scales + j)), kv);
      } else {
        const VF a = hn::PromoteTo(df, hn::LoadU(dh, scales + 2 * j));
        const VF b = hn::PromoteTo(df, hn::LoadU(dh, scales + 2 * j + 8));
        s[0] = hn::Mul(hn::ConcatEven(df, b, a), kv);
        s[1] = hn::Mul(hn::ConcatOdd(df, b, a), kv);
      }
      for (int64_t r = 0; r < n_q; ++r) {
        const VF w = hn::LoadU(df, weights + r * ld + j);
        for (int64_t b = 0; b < blocks; ++b) hn::StoreU(hn::Mul(w, s[b]), df, ws + (r * blocks + b) * n + j);
      }
    }
    for (int64_t j = whole; j < n; ++j) {
      for (int64_t b = 0; b < blocks; ++b) {
        const float s = base::f16_to_f32(v.scales[j * blocks + b]) * k;
        for (int64_t r = 0; r < n_q; ++r) ws[(r * blocks + b) * n + j] = weights[r * ld + j] * s;
      }
    }
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float s = base::f16_to_f32(v.scales[j * blocks + b]) * k;
      for (int64_t r = 0; r < n_q; ++r) ws[(r * blocks + b) * n + j] = weights[r * ld + j] * s;
    }
  }
}

// The tile's weights times its block scales made once per call (weighted_block_scales), then
// `pass` over three queries at a time and the rest one by one: pass(NQ as an integral_constant,
// ws of the pass's first query, acc of its first query). The loops that read ws all start here.
template <class Pass>
void weighted_scale_passes(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                           int64_t acc_stride, const Pass& pass) {
  const int64_t per_query = v.dim / v.block * v.n_rows;
  thread_local std::vector<float> work;
  const std::size_t need = static_cast<std::size_t>(n_q * per_query);
  if (work.size() < need) work.resize(need);
  float* ws = work.data();
  weighted_block_scales(v, weights, ld, n_q, 1.0f, ws);
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) pass(std::integral_constant<int, 3>{}, ws + r * per_query, acc + r * acc_stride);
  for (; r < n_q; ++r) pass(std::integral_constant<int, 1>{}, ws + r * per_query, acc + r * acc_stride);
}

// ws2[(r * blocks + b) * n_rows + j] and sums2[r * blocks + b] as the scalar reference defines
// them (block_level_value_sums.h).
void uniform_weighted_scales(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* ws2,
                             float* sums2) {
  const int64_t n = v.n_rows, blocks = v.dim / v.block;
  weighted_block_scales(v, weights, ld, n_q, 2.0f / static_cast<float>(1 << v.bits), ws2);
  for (int64_t i = 0; i < n_q * blocks; ++i) {
    const float* out = ws2 + i * n;
    float total = 0.0f;
    for (int64_t j = 0; j < n; ++j) total += out[j];  // in order, as the reference
    sums2[i] = total;
  }
}

// Codes of 1..4 bits on any levels (turboquant_block's 3-bit values in the q4 and q3 presets,
// 4-bit in q5): the 2^B levels as f32 in one register (entry i = level[i mod 2^B], so the bits of
// the next codes above a code's own select the same level; 4 bits: levels 0-7 in one register,
// 8-15 in a second, code bit 3 moved to the sign picks by a blend), 8 codes = B bytes spread to
// their lanes by one 32-bit broadcast and one variable shift, looked up by one lane permute (two
// and a blend at 4 bits, against 8 instructions per 8 codes for the byte tables and f16 widening
// of accumulate_chunks) — no byte tables, no f16 widening. Rows take their weight times block
// scale from ws (weighted_block_scales), one broadcast per row and query. Chunks of 32
// coordinates (one block: blocks are multiples of 32), NQ x 4 outputs in registers (at 4 bits
// some spill to the stack; chunks of 16 measured 2% more per row); the same FMAs in the same row
// order as the scalar reference.
template <int B, int NQ>
void accumulate_permuted_chunks(const BlockLevelValues& v, const float* ws, float* acc, int64_t acc_stride) {
  static_assert(B >= 1 && B <= 4, "8 levels per register, two registers at 4 bits");
  const hn::CappedTag<float, 8> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  using VF = hn::Vec<decltype(df)>;
  HWY_ALIGN float entries[2][8];
  HWY_ALIGN uint32_t shift[8];
  for (int i = 0; i < 8; ++i) {
    entries[0][i] = base::f16_to_f32(v.levels_f16[i & ((1 << B) - 1)]);
    entries[1][i] = base::f16_to_f32(v.levels_f16[(8 + i) & ((1 << B) - 1)]);
    shift[i] = static_cast<uint32_t>(B * i);
  }
  const VF table = hn::Load(df, entries[0]), table_high = hn::Load(df, entries[1]);
  const auto shifts = hn::Load(du32, shift);

  const uint8_t* const codes = v.codes;
  const int64_t dim = v.dim, n_rows = v.n_rows, code_stride = v.code_stride, block = v.block;
  const int64_t blocks = dim / block;
  const int64_t row_code_bytes = dim * B / 8;
  const int64_t row_load_end = (dim / 8 - 1) * B + 4;  // the last group of 8 codes reads 4 bytes
  const int64_t first_padded = first_padded_row(n_rows, code_stride, row_code_bytes, row_load_end);
  HWY_ALIGN uint8_t padded[kMaxPaddedRows][kMaxCodeRowBytes + 16];
  for (int64_t j = first_padded; j < n_rows; ++j) {
    uint8_t* copy = padded[j - first_padded];
    std::memcpy(copy, codes + j * code_stride, static_cast<std::size_t>(row_code_bytes));
    std::memset(copy + row_code_bytes, 0, 16);
  }

  for (int64_t e0 = 0; e0 < dim; e0 += 32) {
    VF a[NQ][4];
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) a[r][g] = hn::LoadU(df, acc + r * acc_stride + e0 + int64_t{8} * g);
    }
    const int64_t blk = e0 / block;
    const int64_t byte0 = e0 / 8 * B;
    const float* w[NQ];
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) w[r] = ws + (r * blocks + blk) * n_rows;
    const auto add_row = [&](const uint8_t* group, int64_t j) HWY_ATTR {
      VF wr[NQ];
#pragma GCC unroll 3
      for (int r = 0; r < NQ; ++r) wr[r] = hn::Set(df, w[r][j]);
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) {
        uint32_t word;
        std::memcpy(&word, group + static_cast<int64_t>(g) * B, sizeof(word));
        const auto index = hn::Shr(hn::Set(du32, word), shifts);
        VF level = permute_lanes8(df, table, index);
        if constexpr (B == 4) {
          level = hn::IfNegativeThenElse(hn::BitCast(df, hn::ShiftLeft<28>(index)),
                                         permute_lanes8(df, table_high, index), level);
        }
#pragma GCC unroll 3
        for (int r = 0; r < NQ; ++r) a[r][g] = hn::MulAdd(level, wr[r], a[r][g]);
      }
    };
    // Rows read in place, then the padded copies (one pointer per row, no choice inside the loop).
    const uint8_t* group = codes + byte0;
    for (int64_t j = 0; j < first_padded; ++j, group += code_stride) add_row(group, j);
    for (int64_t j = first_padded; j < n_rows; ++j) add_row(padded[j - first_padded] + byte0, j);
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
      for (int g = 0; g < 4; ++g) hn::StoreU(a[r][g], df, acc + r * acc_stride + e0 + int64_t{8} * g);
    }
  }
}

#if HWY_TARGET == HWY_AVX3_DL
// accumulate_permuted_chunks on 512-bit vectors: 16 codes per vector, the same FMA per element
// in the same row order (bit for bit). The 16 codes of B bits are 2B <= 8 whole bytes: one
// 64-bit load broadcast (folded into the instruction) and one multishift (VBMI) put code l's bits
// at the bottom of lane l, one lane permute of the 16-entry table (entry i = level[i mod 2^B],
// so no mask and, at 4 bits, no second table) looks the level up. The last chunk of a row loads
// the 8 bytes that end the row instead of reading past it (no padded copies). Passes of 64
// coordinates keep NQ x 4 outputs in registers; kOneBlock: blocks of 64 or more, one weight per
// row and query in a pass (otherwise blocks of 32: two).
template <int B, int NQ, bool kOneBlock>
void accumulate_permuted_wide(const BlockLevelValues& v, const float* ws, float* acc, int64_t acc_stride) {
  static_assert(B >= 1 && B <= 4, "16 levels in one register");
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  // Entry i = level[i mod 2^B], widened from f16 in three instructions (a scalar loop here was
  // ~4 instructions per row of a 64-row tile).
  const __m512 levels =
      _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << (1 << B)) - 1), v.levels_f16));
  const __m512 table = _mm512_permutexvar_ps(_mm512_and_si512(lane, _mm512_set1_epi32((1 << B) - 1)), levels);
  const __m512i lane_bits = _mm512_mullo_epi32(lane, _mm512_set1_epi32(B));
  const uint8_t* const codes = v.codes;
  const int64_t dim = v.dim, n_rows = v.n_rows, code_stride = v.code_stride, block = v.block;
  const int64_t blocks = dim / block, row_bytes = dim * B / 8;
  for (int64_t e0 = 0; e0 < dim; e0 += 64) {
    // Chunk i's 8-byte load and the bit of its first code in it.
    int64_t load_at[4];
    __m512i control[4];
    for (int i = 0; i < 4; ++i) {
      const int64_t start = (e0 + 16 * i) * B / 8;
      load_at[i] = std::min(start, row_bytes - 8);
      control[i] = _mm512_add_epi32(lane_bits, _mm512_set1_epi32(static_cast<int>(8 * (start - load_at[i]))));
    }
    __m512 a[NQ][4];
    const float* w[NQ][2];
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) a[r][i] = _mm512_loadu_ps(acc + r * acc_stride + e0 + 16 * i);
      w[r][0] = ws + (r * blocks + e0 / block) * n_rows;
      w[r][1] = ws + (r * blocks + (e0 + 32) / block) * n_rows;
    }
    const uint8_t* row = codes;
    for (int64_t j = 0; j < n_rows; ++j, row += code_stride) {
      __m512 wr[NQ][2];
#pragma GCC unroll 4
      for (int r = 0; r < NQ; ++r) {
        wr[r][0] = _mm512_set1_ps(w[r][0][j]);
        wr[r][1] = kOneBlock ? wr[r][0] : _mm512_set1_ps(w[r][1][j]);
      }
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        uint64_t word;
        std::memcpy(&word, row + load_at[i], sizeof(word));
        const __m512i index = _mm512_multishift_epi64_epi8(control[i], _mm512_set1_epi64(static_cast<int64_t>(word)));
        const __m512 level = _mm512_permutexvar_ps(index, table);
#pragma GCC unroll 4
        for (int r = 0; r < NQ; ++r) a[r][i] = _mm512_fmadd_ps(level, wr[r][i / 2], a[r][i]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) _mm512_storeu_ps(acc + r * acc_stride + e0 + 16 * i, a[r][i]);
    }
  }
}

// Whether accumulate_permuted_wide takes these values: passes of 64 coordinates, rows of at
// least 8 code bytes.
bool permuted_wide_fits(const BlockLevelValues& v, int bits) { return v.dim % 64 == 0 && v.dim * bits / 8 >= 8; }

template <int B, int NQ>
void accumulate_permuted_wide_any(const BlockLevelValues& v, const float* ws, float* acc, int64_t acc_stride) {
  if (v.block % 64 == 0) return accumulate_permuted_wide<B, NQ, true>(v, ws, acc, acc_stride);
  accumulate_permuted_wide<B, NQ, false>(v, ws, acc, acc_stride);
}
#endif

template <int B>
void accumulate_permuted(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                         int64_t acc_stride) {
#if HWY_TARGET == HWY_AVX3_DL
  if (permuted_wide_fits(v, B)) {
    return weighted_scale_passes(v, weights, ld, n_q, acc, acc_stride,
                                 [&](auto nq, const float* ws, float* out) HWY_ATTR {
                                   accumulate_permuted_wide_any<B, decltype(nq)::value>(v, ws, out, acc_stride);
                                 });
  }
#endif
  if (v.n_rows - first_padded_row(v.n_rows, v.code_stride, v.dim * B / 8, (v.dim / 8 - 1) * B + 4) > kMaxPaddedRows) {
    return scalar::accumulate_block_level_rows(v, weights, ld, n_q, acc, acc_stride);  // no allowed shape
  }
  weighted_scale_passes(v, weights, ld, n_q, acc, acc_stride, [&](auto nq, const float* ws, float* out) HWY_ATTR {
    accumulate_permuted_chunks<B, decltype(nq)::value>(v, ws, out, acc_stride);
  });
}

// NQ queries, chunks of 32 coordinates (a chunk lies in one block: blocks are multiples of 32).
template <int B, int NQ>
void accumulate_uniform_chunks(const BlockLevelValues& v, const float* ws2, const float* sums2, float* acc,
                               int64_t acc_stride) {
  const hn::CappedTag<float, 8> df;
  const hn::RebindToSigned<decltype(df)> di32;
  const hn::Repartition<uint16_t, decltype(df)> du16;  // 16 lanes
  const hn::Half<decltype(du16)> du16h;
  const hn::Rebind<uint8_t, decltype(df)> du8;  // 8 bytes
  using VF = hn::Vec<decltype(df)>;
  using Codes = DenseCodes<std::min(B, 6), decltype(du16)>;
  constexpr bool kNibbles = B == 4;
  constexpr int64_t kPassBytes = B == 8 ? 16 : Codes::kPassBytes;
  const Codes codes_of;

  const uint8_t* const codes = v.codes;
  const int64_t dim = v.dim, n_rows = v.n_rows, code_stride = v.code_stride, block = v.block;
  const int64_t blocks = dim / block;
  const int64_t row_code_bytes = (dim * B + 7) / 8;
  const int64_t row_load_end = B == 8 || kNibbles ? row_code_bytes : (dim / 16 - 1) * kPassBytes + 16;
  const int64_t first_padded = first_padded_row(n_rows, code_stride, row_code_bytes, row_load_end);
  HWY_ALIGN uint8_t padded[kMaxPaddedRows][kMaxCodeRowBytes + 16];
  for (int64_t j = first_padded; j < n_rows; ++j) {
    uint8_t* copy = padded[j - first_padded];
    std::memcpy(copy, codes + j * code_stride, static_cast<std::size_t>(row_code_bytes));
    std::memset(copy + row_code_bytes, 0, 16);
  }
  const auto row_codes = [&](int64_t j) {
    return j < first_padded ? codes + j * code_stride : padded[j - first_padded];
  };
  // 16 codes as two f32 vectors: codes e..e+7 and e+8..e+15; 4-bit codes (nibbles, byte i =
  // codes 2i and 2i + 1) as the even and the odd codes, so the outputs of such a chunk are held
  // deinterleaved in registers (load_outputs / store_outputs) — the same sums per element.
  const auto widen = [&](const uint8_t* pass, VF& lo, VF& hi) HWY_ATTR {
    if constexpr (kNibbles) {
      const hn::RebindToUnsigned<decltype(di32)> du32;
      const auto bytes = hn::PromoteTo(du32, hn::LoadU(du8, pass));
      lo = hn::ConvertTo(df, hn::BitCast(di32, hn::And(bytes, hn::Set(du32, 15u))));
      hi = hn::ConvertTo(df, hn::BitCast(di32, hn::ShiftRight<4>(bytes)));
    } else if constexpr (B == 8) {
      lo = hn::ConvertTo(
          df, hn::BitCast(di32, hn::PromoteTo(hn::RebindToUnsigned<decltype(di32)>(), hn::LoadU(du8, pass))));
      hi = hn::ConvertTo(
          df, hn::BitCast(di32, hn::PromoteTo(hn::RebindToUnsigned<decltype(di32)>(), hn::LoadU(du8, pass + 8))));
    } else {
      const auto c = codes_of(pass);
      lo = hn::ConvertTo(
          df, hn::BitCast(di32, hn::PromoteTo(hn::RebindToUnsigned<decltype(di32)>(), hn::LowerHalf(du16h, c))));
      hi = hn::ConvertTo(
          df, hn::BitCast(di32, hn::PromoteTo(hn::RebindToUnsigned<decltype(di32)>(), hn::UpperHalf(du16h, c))));
    }
  };
  const float constant = -0.5f * static_cast<float>((1 << B) - 1);

  for (int64_t e0 = 0; e0 < dim; e0 += 32) {
    VF a[NQ][4];
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) {
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) a[r][q] = hn::LoadU(df, acc + r * acc_stride + e0 + int64_t{8} * q);
      if constexpr (kNibbles) {
        for (int q = 0; q < 4; q += 2) {
          const VF even = hn::ConcatEven(df, a[r][q + 1], a[r][q]), odd = hn::ConcatOdd(df, a[r][q + 1], a[r][q]);
          a[r][q] = even;
          a[r][q + 1] = odd;
        }
      }
    }
    const int64_t blk = e0 / block;
    const int64_t pass_offset = e0 / 16 * kPassBytes;
    const float* w[NQ];
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) w[r] = ws2 + (r * blocks + blk) * n_rows;
    for (int64_t j = 0; j < n_rows; ++j) {
      const uint8_t* pass = row_codes(j) + pass_offset;
      VF lo0, hi0, lo1, hi1;
      widen(pass, lo0, hi0);
      widen(pass + kPassBytes, lo1, hi1);
#pragma GCC unroll 3
      for (int r = 0; r < NQ; ++r) {
        const VF ws = hn::Set(df, w[r][j]);
        a[r][0] = hn::MulAdd(lo0, ws, a[r][0]);
        a[r][1] = hn::MulAdd(hi0, ws, a[r][1]);
        a[r][2] = hn::MulAdd(lo1, ws, a[r][2]);
        a[r][3] = hn::MulAdd(hi1, ws, a[r][3]);
      }
    }
#pragma GCC unroll 3
    for (int r = 0; r < NQ; ++r) {
      const VF c = hn::Set(df, constant), total = hn::Set(df, sums2[r * blocks + blk]);
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) a[r][q] = hn::MulAdd(c, total, a[r][q]);
      if constexpr (kNibbles) {
        for (int q = 0; q < 4; q += 2) {
          const VF low = hn::InterleaveLower(df, a[r][q], a[r][q + 1]),
                   high = hn::InterleaveUpper(df, a[r][q], a[r][q + 1]);
          a[r][q] = hn::ConcatLowerLower(df, high, low);
          a[r][q + 1] = hn::ConcatUpperUpper(df, high, low);
        }
      }
#pragma GCC unroll 4
      for (int q = 0; q < 4; ++q) hn::StoreU(a[r][q], df, acc + r * acc_stride + e0 + int64_t{8} * q);
    }
  }
}

template <int B>
void accumulate_uniform(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                        int64_t acc_stride) {
  const int64_t blocks = v.dim / v.block;
  const int64_t row_code_bytes = (v.dim * B + 7) / 8;
  const int64_t row_load_end = B == 8 || B == 4 ? row_code_bytes : (v.dim / 16 - 1) * 2 * B + 16;
  if (v.n_rows - first_padded_row(v.n_rows, v.code_stride, row_code_bytes, row_load_end) > kMaxPaddedRows) {
    return scalar::accumulate_block_level_rows(v, weights, ld, n_q, acc, acc_stride);  // no allowed shape
  }
  thread_local std::vector<float> work;
  const std::size_t need = static_cast<std::size_t>((n_q + 2) * blocks * v.n_rows + n_q * blocks);
  if (work.size() < need) work.resize(need);
  float* sums2 = work.data();
  float* ws2 = sums2 + n_q * blocks;
  uniform_weighted_scales(v, weights, ld, n_q, ws2, sums2);
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) {
    accumulate_uniform_chunks<B, 3>(v, ws2 + r * blocks * v.n_rows, sums2 + r * blocks, acc + r * acc_stride,
                                    acc_stride);
  }
  for (; r < n_q; ++r) {
    accumulate_uniform_chunks<B, 1>(v, ws2 + r * blocks * v.n_rows, sums2 + r * blocks, acc + r * acc_stride,
                                    acc_stride);
  }
}

template <int B, int kChunkPasses>
void accumulate_queries(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                        int64_t acc_stride) {
  // Three queries per pass over the rows (a GQA group of SmolLM2 and Llama-3), then one by one.
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) {
    accumulate_chunks<B, 3, kChunkPasses>(v, weights + r * ld, ld, acc + r * acc_stride, acc_stride);
  }
  for (; r < n_q; ++r) accumulate_chunks<B, 1, kChunkPasses>(v, weights + r * ld, ld, acc + r * acc_stride, acc_stride);
}

#if HWY_TARGET == HWY_AVX3_DL
// 8-bit codes on even levels, head size 64: each level computed exactly from its code, as
// accumulate_even_bytes does, 16 per register; a query's 64 outputs are four registers for the
// whole tile, so three queries' twelve stay put while every row passes once (no chunks).
template <int NQ>
void accumulate_wide_even_bytes(const BlockLevelValues& v, const float* ws, float* acc, int64_t acc_stride) {
  const int64_t n_rows = v.n_rows, blocks = v.dim / v.block;
  const __m512 two = _mm512_set1_ps(2.0f / 256.0f), offset = _mm512_set1_ps(-255.0f / 256.0f);
  __m512 a[NQ][4];
  const float* w0[NQ];
  const float* w1[NQ];
  for (int r = 0; r < NQ; ++r) {
    for (int g = 0; g < 4; ++g) a[r][g] = _mm512_loadu_ps(acc + r * acc_stride + 16 * g);
    w0[r] = ws + (r * blocks) * n_rows;
    w1[r] = ws + (r * blocks + blocks - 1) * n_rows;
  }
  const uint8_t* codes = v.codes;
  for (int64_t j = 0; j < n_rows; ++j, codes += v.code_stride) {
    __m512 wa[NQ], wb[NQ];
    for (int r = 0; r < NQ; ++r) {
      wa[r] = _mm512_set1_ps(w0[r][j]);
      wb[r] = _mm512_set1_ps(w1[r][j]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512i code = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + 16 * g)));
      const __m512 level = _mm512_fmadd_ps(_mm512_cvtepi32_ps(code), two, offset);
#pragma GCC unroll 3
      for (int r = 0; r < NQ; ++r) a[r][g] = _mm512_fmadd_ps(level, g < 2 ? wa[r] : wb[r], a[r][g]);
    }
  }
  for (int r = 0; r < NQ; ++r) {
    for (int g = 0; g < 4; ++g) _mm512_storeu_ps(acc + r * acc_stride + 16 * g, a[r][g]);
  }
}

#endif  // HWY_TARGET == HWY_AVX3_DL

void accumulate_even_byte_queries(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                                  int64_t acc_stride) {
#if HWY_TARGET == HWY_AVX3_DL
  if (v.dim == 64 && (v.block == 32 || v.block == 64)) {
    return weighted_scale_passes(v, weights, ld, n_q, acc, acc_stride,
                                 [&](auto nq, const float* ws, float* out) HWY_ATTR {
                                   accumulate_wide_even_bytes<decltype(nq)::value>(v, ws, out, acc_stride);
                                 });
  }
#endif
  weighted_scale_passes(v, weights, ld, n_q, acc, acc_stride, [&](auto nq, const float* ws, float* out) HWY_ATTR {
    accumulate_even_bytes<decltype(nq)::value>(v, ws, out, acc_stride);
  });
}

template <int B>
void accumulate_bits(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                     int64_t acc_stride) {
  // Chunks of 32 coordinates (12 outputs in registers for three queries) where the lookup
  // tables leave room: up to 4 bits (one table of low and one of high bytes).
  if constexpr (B <= 4) {
    if (v.dim % 32 == 0) return accumulate_queries<B, 2>(v, weights, ld, n_q, acc, acc_stride);
  }
  accumulate_queries<B, 1>(v, weights, ld, n_q, acc, acc_stride);
}

// The rows alone (v.offset is not read).
void accumulate_rows(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                     int64_t acc_stride) {
  // 128-bit targets (ValueSumsSupportedImpl false: callers decode instead) keep the scalar loop.
  if constexpr (hn::MaxLanes(hn::CappedTag<float, 8>()) == 8) {
    if (v.even_levels && v.bits <= 6) {
      switch (v.bits) {
        case 1:
          return accumulate_uniform<1>(v, weights, ld, n_q, acc, acc_stride);
        case 2:
          return accumulate_uniform<2>(v, weights, ld, n_q, acc, acc_stride);
        case 3:
          return accumulate_uniform<3>(v, weights, ld, n_q, acc, acc_stride);
        case 4:
          return accumulate_uniform<4>(v, weights, ld, n_q, acc, acc_stride);
        case 5:
          return accumulate_uniform<5>(v, weights, ld, n_q, acc, acc_stride);
        case 6:
          return accumulate_uniform<6>(v, weights, ld, n_q, acc, acc_stride);
        // 8 bits keep accumulate_even_bytes (q8 measured 379 instructions per row at ctx 1024
        // through the uniform loop against 329 through it).
        default:
          break;
      }
    }
    if (!v.even_levels && v.dim % 32 == 0) {
      switch (v.bits) {
        case 1:
          return accumulate_permuted<1>(v, weights, ld, n_q, acc, acc_stride);
        case 2:
          return accumulate_permuted<2>(v, weights, ld, n_q, acc, acc_stride);
        case 3:
          return accumulate_permuted<3>(v, weights, ld, n_q, acc, acc_stride);
        case 4:
          return accumulate_permuted<4>(v, weights, ld, n_q, acc, acc_stride);
        default:
          break;
      }
    }
    switch (v.bits) {
      case 1:
        return accumulate_bits<1>(v, weights, ld, n_q, acc, acc_stride);
      case 2:
        return accumulate_bits<2>(v, weights, ld, n_q, acc, acc_stride);
      case 3:
        return accumulate_bits<3>(v, weights, ld, n_q, acc, acc_stride);
      case 4:
        return accumulate_bits<4>(v, weights, ld, n_q, acc, acc_stride);
      case 5:
        return accumulate_bits<5>(v, weights, ld, n_q, acc, acc_stride);
      case 6:
        return accumulate_bits<6>(v, weights, ld, n_q, acc, acc_stride);
      case 8:
        if (v.even_levels) return accumulate_even_byte_queries(v, weights, ld, n_q, acc, acc_stride);
        break;
      default:
        break;
    }
  }
  scalar::accumulate_block_level_rows(v, weights, ld, n_q, acc, acc_stride);
}

// acc[r][e] = fma(total_r, offset[e], acc[r][e]), total_r the tile's weights of query r summed in
// eight interleaved partial sums (one vector add per 8 rows), combined as the header says.
void add_weighted_offset(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                         int64_t acc_stride) {
  const hn::CappedTag<float, 8> df;
  const int64_t n = v.n_rows, whole = n / 8 * 8, dim_whole = v.dim / 8 * 8;
  for (int64_t r = 0; r < n_q; ++r) {
    const float* w = weights + r * ld;
    auto sum = hn::Zero(df);
    for (int64_t j = 0; j < whole; j += 8) sum = hn::Add(sum, hn::LoadU(df, w + j));
    HWY_ALIGN float p[8];
    hn::Store(sum, df, p);
    for (int64_t j = whole; j < n; ++j) p[j - whole] += w[j];
    const float total = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
    float* out = acc + r * acc_stride;
    const auto t = hn::Set(df, total);
    for (int64_t e = 0; e < dim_whole; e += 8) {
      hn::StoreU(hn::MulAdd(t, hn::LoadU(df, v.offset + e), hn::LoadU(df, out + e)), df, out + e);
    }
    for (int64_t e = dim_whole; e < v.dim; ++e) out[e] = std::fma(total, v.offset[e], out[e]);
  }
}

void AccumulateBlockLevelsImpl(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                               int64_t acc_stride) {
  if (v.n_rows <= 0 || n_q <= 0) return;
  if constexpr (hn::MaxLanes(hn::CappedTag<float, 8>()) == 8) {
    BlockLevelValues rows = v;
    rows.offset = nullptr;  // every path above, scalar fallbacks included, then sees rows only
    accumulate_rows(rows, weights, ld, n_q, acc, acc_stride);
    if (v.offset != nullptr) add_weighted_offset(v, weights, ld, n_q, acc, acc_stride);
    return;
  }
  scalar::accumulate_block_level_rows(v, weights, ld, n_q, acc, acc_stride);
}
#else
bool ValueSumsSupportedImpl() { return false; }
void AccumulateBlockLevelsImpl(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                               int64_t acc_stride) {
  scalar::accumulate_block_level_rows(v, weights, ld, n_q, acc, acc_stride);
}
#endif

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(ValueSumsSupportedImpl);
HWY_EXPORT(AccumulateBlockLevelsImpl);

bool can_accumulate_block_level_rows(int bits, int64_t dim, int64_t block) {
  static const bool supported = HWY_DYNAMIC_DISPATCH(ValueSumsSupportedImpl)();
  return supported && ((bits >= 1 && bits <= 6) || bits == 8) && block > 0 && block % 32 == 0 && dim > 0 &&
         dim % block == 0 && (dim * bits + 7) / 8 <= kMaxCodeRowBytes;
}

void accumulate_block_level_rows(const BlockLevelValues& values, const float* weights, int64_t ld, int64_t n_q,
                                 float* acc, int64_t acc_stride) {
  HWY_DYNAMIC_DISPATCH(AccumulateBlockLevelsImpl)(values, weights, ld, n_q, acc, acc_stride);
}

namespace scalar {
namespace {
int code_at(const BlockLevelValues& v, const uint8_t* packed, int64_t e) { return dense_code(packed, e, v.bits); }

// Evenly spaced levels: the header's uniform formula, element by element.
void accumulate_uniform_rows(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                             int64_t acc_stride) {
  const int64_t blocks = v.dim / v.block;
  const float k = 2.0f / static_cast<float>(1 << v.bits);
  const float constant = -0.5f * static_cast<float>((1 << v.bits) - 1);
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      float sum2 = 0.0f;
      for (int64_t j = 0; j < v.n_rows; ++j) {
        const float ws2 = weights[r * ld + j] * (base::f16_to_f32(v.scales[j * blocks + b]) * k);
        sum2 += ws2;
        const uint8_t* packed = v.codes + j * v.code_stride;
        for (int64_t e = b * v.block; e < (b + 1) * v.block; ++e) {
          float& out = acc[r * acc_stride + e];
          out = std::fma(static_cast<float>(code_at(v, packed, e)), ws2, out);
        }
      }
      for (int64_t e = b * v.block; e < (b + 1) * v.block; ++e) {
        float& out = acc[r * acc_stride + e];
        out = std::fma(constant, sum2, out);
      }
    }
  }
}

// The offset's share, as the header defines it.
void add_weighted_offset(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                         int64_t acc_stride) {
  for (int64_t r = 0; r < n_q; ++r) {
    float p[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t j = 0; j < v.n_rows; ++j) p[j % 8] += weights[r * ld + j];
    const float total = ((p[0] + p[4]) + (p[1] + p[5])) + ((p[2] + p[6]) + (p[3] + p[7]));
    for (int64_t e = 0; e < v.dim; ++e) {
      float& out = acc[r * acc_stride + e];
      out = std::fma(total, v.offset[e], out);
    }
  }
}

void accumulate_table_rows(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                           int64_t acc_stride) {
  const int64_t blocks = v.dim / v.block;
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < v.n_rows; ++j) {
      const uint8_t* packed = v.codes + j * v.code_stride;
      for (int64_t e = 0; e < v.dim; ++e) {
        const int code = dense_code(packed, e, v.bits);
        const float ws = weights[r * ld + j] * base::f16_to_f32(v.scales[j * blocks + e / v.block]);
        float& out = acc[r * acc_stride + e];
        out = std::fma(base::f16_to_f32(v.levels_f16[code]), ws, out);
      }
    }
  }
}
}  // namespace

void accumulate_block_level_rows(const BlockLevelValues& v, const float* weights, int64_t ld, int64_t n_q, float* acc,
                                 int64_t acc_stride) {
  if (v.even_levels && v.bits <= 6) {
    accumulate_uniform_rows(v, weights, ld, n_q, acc, acc_stride);
  } else {
    accumulate_table_rows(v, weights, ld, n_q, acc, acc_stride);
  }
  if (v.offset != nullptr) add_weighted_offset(v, weights, ld, n_q, acc, acc_stride);
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
