// Highway-dispatched kernels for byte_level_key_scores.h: the SIMD loop is x86 AVX2 (vpmaddubsw,
// vpsignb, in-lane byte shuffles), compiled per target; other targets report no support. AVX-512
// machines with VBMI and VNNI (Ice Lake on) take a 512-bit loop instead (AVX3_DL, which Highway
// 1.0 compiles only on request: hence the define, before any Highway header).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/byte_level_key_scores.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/byte_level_key_scores.h"
#include "veloxquant/attention/dense_level_rows.h"
#include "veloxquant/attention/integer_query_step.h"
#include "veloxquant/attention/wide_block_sums-inl.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "base/half.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
bool ByteKeysSupportedImpl() { return true; }

// 32 dense B-bit codes (one block) to their int8 levels, byte i of the result = level of code i.
// 128-bit lane h holds codes 16h..16h+15: lane 0 reads the block's first bytes, lane 1 the bytes
// from code 16 on (2B bytes in; with B = 5, 6 the block's 20, 24 bytes pass one 128-bit lane, so
// the load is 32 bytes with qwords 0, 1, 1, 2 and lane 1 starts at byte 8). In each lane the even
// codes' 16-bit windows are lifted (multiplied so the code tops the lane) and shifted down to
// the low byte, the odd codes' to the high byte; one blend joins them, every byte a clean code.
// The levels are looked up 16 at a time (one byte shuffle each), codes of 5 and 6 bits then pick
// among the tables by their bits 4 and 5 (blends).
// The byte shuffles' indices and the lifts per code width, built at compile time. (Built by a
// loop in the constructor, GCC 12 -O3 vectorized that loop wrongly for the AVX3 target at B = 5:
// every 5-bit score was off on AVX-512 machines without VBMI; -O2 or AVX2 were right.)
struct ByteBlockLayout {
  alignas(32) uint8_t index[2][32];
  alignas(32) uint16_t lift[2][16];
};
template <int B>
constexpr ByteBlockLayout byte_block_layout() {
  ByteBlockLayout out{};
  for (int h = 0; h < 2; ++h) {
    const int base = h == 0 ? 0 : (B <= 4 ? 2 * B : 2 * B - 8);
    for (int k = 0; k < 16; ++k) {
      const int bit = B * k, byte = base + bit / 8, shift = bit % 8;
      const int parity = k % 2, slot = 8 * h + k / 2;  // u16 slot of this code's window
      out.index[parity][2 * slot] = static_cast<uint8_t>(byte);
      // A code inside one byte needs no second byte (and lane 1's last may lie past the lane).
      out.index[parity][2 * slot + 1] = shift + B > 8 ? static_cast<uint8_t>(byte + 1) : uint8_t{0x80};
      out.lift[parity][slot] = static_cast<uint16_t>(1u << (16 - B - shift));
    }
  }
  return out;
}
template <int B>
alignas(32) inline constexpr ByteBlockLayout kByteBlockLayout = byte_block_layout<B>();

template <int B>
class ByteBlockLevels {
  static_assert(B >= 2 && B <= 6, "64-entry tables at most");

 public:
  static constexpr int64_t kBlockBytes = 4 * B;            // 32 codes
  static constexpr int64_t kLoadBytes = B <= 4 ? 16 : 32;  // read from the block's start

  // levels: all 64 bytes of ByteLevels::value (entries past 2^B are never looked up: every code
  // the operator makes is clean).
  explicit ByteBlockLevels(const int8_t* levels) {
    const ByteBlockLayout& layout = kByteBlockLayout<B>;
    even_index_ = _mm256_load_si256(reinterpret_cast<const __m256i*>(layout.index[0]));
    odd_index_ = _mm256_load_si256(reinterpret_cast<const __m256i*>(layout.index[1]));
    even_lift_ = _mm256_load_si256(reinterpret_cast<const __m256i*>(layout.lift[0]));
    odd_lift_ = _mm256_load_si256(reinterpret_cast<const __m256i*>(layout.lift[1]));
    high_bytes_ = _mm256_set1_epi16(static_cast<int16_t>(0xff00));
    // Table t: levels 16t..16t+15 in both 128-bit lanes.
    const auto table = [levels](int t) {
      return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(levels + 16 * t)));
    };
    table0_ = table(0);
    table1_ = table(1);
    table2_ = table(2);
    table3_ = table(3);
  }

  HWY_INLINE __m256i operator()(const uint8_t* block) const {
    __m256i src;
    if constexpr (B <= 4) {
      src = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block)));
    } else {
      src = _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block)), 0x94);
    }
    const __m256i even =
        _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(src, even_index_), even_lift_), 16 - B);
    const __m256i odd = _mm256_srli_epi16(_mm256_mullo_epi16(_mm256_shuffle_epi8(src, odd_index_), odd_lift_), 8 - B);
    const __m256i codes = _mm256_blendv_epi8(even, odd, high_bytes_);  // bit 7 of every byte clear
    if constexpr (B <= 4) {
      return _mm256_shuffle_epi8(table0_, codes);
    } else {
      // Code bit 4 moved to each byte's sign picks the table (bits shifted in from the byte
      // below land under the sign, which is all the blend reads); for 6 bits bit 5 then picks
      // the pair.
      const __m256i bit4 = _mm256_slli_epi16(codes, 3);
      const __m256i low =
          _mm256_blendv_epi8(_mm256_shuffle_epi8(table0_, codes), _mm256_shuffle_epi8(table1_, codes), bit4);
      if constexpr (B == 5) {
        return low;
      } else {
        const __m256i high =
            _mm256_blendv_epi8(_mm256_shuffle_epi8(table2_, codes), _mm256_shuffle_epi8(table3_, codes), bit4);
        return _mm256_blendv_epi8(low, high, _mm256_slli_epi16(codes, 2));
      }
    }
  }

 private:
  __m256i even_index_, odd_index_, even_lift_, odd_lift_, high_bytes_, table0_, table1_, table2_, table3_;
};

// Rows of 64 codes (two blocks of 32) against NQ <= 3 queries. Per row and query the two block
// sums T_0, T_1 (8 i32 lanes each) are reduced together: horizontal adds give
// [T_00, T_01, T_10, T_11, T_20, T_21, ...] exactly, one conversion and one multiply by
// [s0, s1, s0, s1, ...] the products, one more horizontal add the sums per query.
template <int B, int NQ>
void score_units(const BlockLevelKeys& k, const ByteLevels& levels, const int8_t* q8, const uint8_t* abs_q8,
                 const float* q_step, const float* bias, float* scores, int64_t ld) {
  static_assert(NQ >= 1 && NQ <= 3, "one reduction per row");
  using Levels = ByteBlockLevels<B>;
  constexpr int64_t kDim = 64;
  const Levels level_of(levels.value);
  const __m256i ones = _mm256_set1_epi16(1);
  // The queries side by side (constant offsets from one register in the loop).
  HWY_ALIGN int8_t q[NQ][kDim];
  HWY_ALIGN uint8_t a[NQ][kDim];
  for (int r = 0; r < NQ; ++r) {
    std::memcpy(q[r], q8 + r * kDim, kDim);
    std::memcpy(a[r], abs_q8 + r * kDim, kDim);
  }
  // Lanes of the result: query 0, 1 in lanes 0, 1; query 2 in lane 4 (a missing query repeats
  // the last one and is not stored).
  HWY_ALIGN float step_lanes[8], bias_lanes[8];
  const int slot_of[8] = {0, 1, 0, 1, 2, 2, 2, 2};
  for (int t = 0; t < 8; ++t) {
    const int r = std::min(slot_of[t], NQ - 1);
    step_lanes[t] = q_step[r] * levels.step;
    bias_lanes[t] = bias != nullptr ? bias[r] : 0.0f;
  }
  const __m256 steps = _mm256_load_ps(step_lanes), biases = _mm256_load_ps(bias_lanes);

  const int64_t n_rows = k.n_rows, code_stride = k.code_stride;
  const int64_t row_code_bytes = 2 * Levels::kBlockBytes;
  const int64_t first_padded =
      first_padded_row(n_rows, code_stride, row_code_bytes, Levels::kBlockBytes + Levels::kLoadBytes);
  HWY_ALIGN uint8_t padded[2 * Levels::kBlockBytes + 32];

  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* row = k.codes + j * code_stride;
    if (j >= first_padded) {
      std::memcpy(padded, row, static_cast<std::size_t>(row_code_bytes));
      std::memset(padded + row_code_bytes, 0, 32);
      row = padded;
    }
    __m256i sum[3][2];
#pragma GCC unroll 2
    for (int b = 0; b < 2; ++b) {
      const __m256i level = level_of(row + b * Levels::kBlockBytes);
#pragma GCC unroll 3
      for (int r = 0; r < NQ; ++r) {
        const __m256i signed_level =
            _mm256_sign_epi8(level, _mm256_load_si256(reinterpret_cast<const __m256i*>(q[r] + 32 * b)));
        const __m256i pairs =
            _mm256_maddubs_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(a[r] + 32 * b)), signed_level);
        sum[r][b] = _mm256_madd_epi16(pairs, ones);
      }
    }
    for (int r = NQ; r < 3; ++r) {
      sum[r][0] = sum[NQ - 1][0];
      sum[r][1] = sum[NQ - 1][1];
    }
    const __m256i g0 =
        _mm256_hadd_epi32(_mm256_hadd_epi32(sum[0][0], sum[0][1]), _mm256_hadd_epi32(sum[1][0], sum[1][1]));
    const __m256i h2 = _mm256_hadd_epi32(sum[2][0], sum[2][1]);
    const __m256i g1 = _mm256_hadd_epi32(h2, h2);
    const __m256i totals =
        _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
    uint32_t scale_pair;
    std::memcpy(&scale_pair, k.scales + 2 * j, sizeof(scale_pair));
    const __m256 scale = _mm256_cvtph_ps(_mm_set1_epi32(static_cast<int>(scale_pair)));
    const __m256 products = _mm256_mul_ps(_mm256_cvtepi32_ps(totals), scale);
    const __m256 out = _mm256_fmadd_ps(_mm256_hadd_ps(products, products), steps, biases);
    const __m128 low = _mm256_castps256_ps128(out);
    _mm_store_ss(scores + j, low);
    if constexpr (NQ >= 2) _mm_store_ss(scores + ld + j, _mm_movehdup_ps(low));
    if constexpr (NQ == 3) _mm_store_ss(scores + 2 * ld + j, _mm256_extractf128_ps(out, 1));
  }
}

template <int B>
void score_queries(const BlockLevelKeys& k, const ByteLevels& levels, const int8_t* q8, const uint8_t* abs_q8,
                   const float* q_step, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  const int64_t d = k.dim;
  const auto bias_at = [&](int64_t r) { return bias != nullptr ? bias + r : nullptr; };
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) {
    score_units<B, 3>(k, levels, q8 + r * d, abs_q8 + r * d, q_step + r, bias_at(r), scores + r * ld, ld);
  }
  if (n_q - r == 2) {
    score_units<B, 2>(k, levels, q8 + r * d, abs_q8 + r * d, q_step + r, bias_at(r), scores + r * ld, ld);
  } else if (n_q - r == 1) {
    score_units<B, 1>(k, levels, q8 + r * d, abs_q8 + r * d, q_step + r, bias_at(r), scores + r * ld, ld);
  }
}

#if HWY_TARGET == HWY_AVX3_DL
// One row of 64 codes per 512-bit register, eight rows per pass. A row's 8B bytes are loaded
// under a mask (nothing past the row is read: no padded copy at the buffer's end); one byte
// permute gives qword q the bytes from qB on (its 8 codes), one multishift moves code i of each
// qword to byte i (bits above B are the next code's, ignored below), and one 64-entry byte permute
// looks the levels up (it reads 6 index bits, so the table repeats every 2^B entries). The levels
// are stored + 128 as unsigned bytes so one vpdpbusd per query multiplies them with the signed
// query: lane l = sum over e in 4l..4l+3 of (level8 + 128) * q8, exact in 32 bits; the 128 * q8
// part is cancelled by starting each lane at -128 times its four query elements' sum. Lanes 0-7 are
// block 0, 8-15 block 1.
//
// Eight rows' 16-lane sums reduce to one register (unpack/add in three levels): quarters
// [rows 0-3 block 0, rows 0-3 block 1, rows 4-7 block 0, rows 4-7 block 1]; then the same float
// steps as the scalar reference: float(T) * s, the two blocks added, fma with the step and bias.
// The byte permute (qword q takes the row's bytes from qB on) and the multishift's bit offsets
// (code i of a qword at bit Bi), per bit width: built at compile time, one load each per call.
struct WideCodeLayout {
  alignas(64) uint8_t spread[64];
  alignas(64) uint8_t shifts[64];
};
constexpr std::array<WideCodeLayout, 7> wide_code_layouts() {
  std::array<WideCodeLayout, 7> out{};
  for (int bits = 2; bits <= 6; ++bits) {
    for (int q = 0; q < 8; ++q) {
      for (int i = 0; i < 8; ++i) {
        out[bits].spread[8 * q + i] = static_cast<uint8_t>(q * bits + i);
        out[bits].shifts[8 * q + i] = static_cast<uint8_t>(bits * i);
      }
    }
  }
  return out;
}
alignas(64) constexpr std::array<WideCodeLayout, 7> kWideCodeLayouts = wide_code_layouts();

class WideByteLevels {
 public:
  WideByteLevels(int bits, const ByteLevels& levels)
      : table_(_mm512_loadu_si512(levels.offset_table)),
        spread_(_mm512_load_si512(kWideCodeLayouts[bits].spread)),
        shifts_(_mm512_load_si512(kWideCodeLayouts[bits].shifts)),
        row_mask_((__mmask64{1} << (8 * bits)) - 1) {}  // bits <= 6: 48 bytes at most
  // The row's 64 levels + 128; rows past the tile read nothing and give 0 (masked below).
  HWY_INLINE __m512i operator()(const uint8_t* row, __mmask64 live) const {
    const __m512i bytes = _mm512_maskz_loadu_epi8(row_mask_ & live, row);
    const __m512i codes = _mm512_multishift_epi64_epi8(shifts_, _mm512_permutexvar_epi8(spread_, bytes));
    return _mm512_permutexvar_epi8(codes, table_);
  }

 private:
  __m512i table_, spread_, shifts_;
  __mmask64 row_mask_;
};

template <int NQ>
VQ_WITH_AVX512_VNNI void score_wide_units(const BlockLevelKeys& k, const ByteLevels& levels, const int8_t* q8,
                                          const float* q_step, const float* bias, float* scores, int64_t ld) {
  static_assert(NQ >= 1 && NQ <= 4, "registers for four queries' partial sums");
  constexpr int64_t kDim = 64;
  const WideByteLevels level_of(k.bits, levels);
  __m512i q[NQ];
  // Each row's dot products start from -128 * (the query's four elements' sum) per lane, which
  // cancels the + 128 of the stored levels exactly.
  __m512i start[NQ];
  __m256 step[NQ], add[NQ];
  const __m512i zero = _mm512_setzero_si512();
  for (int r = 0; r < NQ; ++r) {
    q[r] = _mm512_loadu_si512(q8 + r * kDim);
    start[r] = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(static_cast<char>(0x80)), q[r]));
    step[r] = _mm256_set1_ps(q_step[r] * levels.step);
    add[r] = _mm256_set1_ps(bias != nullptr ? bias[r] : 0.0f);
  }
  const int64_t stride = k.code_stride;
  wide_row_passes<NQ>(
      k.n_rows, k.scales,
      [&](int64_t row, bool live, __m512i* out) HWY_ATTR VQ_WITH_AVX512_VNNI {
        const __m512i level = level_of(k.codes + row * stride, live ? ~__mmask64{0} : 0);
        for (int r = 0; r < NQ; ++r) out[r] = _mm512_dpbusd_epi32(start[r], level, q[r]);
      },
      [&](int r, __m512i sums, __m512 scale, int64_t j, int64_t live_rows)
          HWY_ATTR { wide_store_scores(sums, scale, step[r], add[r], live_rows, scores + r * ld + j); });
}

VQ_WITH_AVX512_VNNI void score_wide(const BlockLevelKeys& k, const ByteLevels& levels, const int8_t* q8,
                                    const float* q_step, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  wide_query_units(n_q, [&](auto nq, int64_t r) HWY_ATTR VQ_WITH_AVX512_VNNI {
    score_wide_units<decltype(nq)::value>(k, levels, q8 + r * k.dim, q_step + r, bias != nullptr ? bias + r : nullptr,
                                          scores + r * ld, ld);
  });
}
#endif  // HWY_TARGET == HWY_AVX3_DL

void ScoreByteLevelsImpl(const BlockLevelKeys& k, const ByteLevels& levels, const int8_t* q8, const uint8_t* abs_q8,
                         const float* q_step, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  if (k.n_rows <= 0 || n_q <= 0) return;
#if HWY_TARGET == HWY_AVX3_DL
  if (k.dim == 64 && k.block == 32 && k.bits >= 2 && k.bits <= 6 && has_avx512_vnni()) {
    return score_wide(k, levels, q8, q_step, bias, n_q, scores, ld);
  }
#endif
  if (k.dim == 64 && k.block == 32) {
    switch (k.bits) {
      case 2:
        return score_queries<2>(k, levels, q8, abs_q8, q_step, bias, n_q, scores, ld);
      case 3:
        return score_queries<3>(k, levels, q8, abs_q8, q_step, bias, n_q, scores, ld);
      case 4:
        return score_queries<4>(k, levels, q8, abs_q8, q_step, bias, n_q, scores, ld);
      case 5:
        return score_queries<5>(k, levels, q8, abs_q8, q_step, bias, n_q, scores, ld);
      case 6:
        return score_queries<6>(k, levels, q8, abs_q8, q_step, bias, n_q, scores, ld);
      default:
        break;
    }
  }
  scalar::score_byte_level_rows(k, levels, q8, abs_q8, q_step, bias, n_q, scores, ld);
}
#else
bool ByteKeysSupportedImpl() { return false; }
void ScoreByteLevelsImpl(const BlockLevelKeys& k, const ByteLevels& levels, const int8_t* q8, const uint8_t* abs_q8,
                         const float* q_step, const float* bias, int64_t n_q, float* scores, int64_t ld) {
  scalar::score_byte_level_rows(k, levels, q8, abs_q8, q_step, bias, n_q, scores, ld);
}
#endif

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(ByteKeysSupportedImpl);
HWY_EXPORT(ScoreByteLevelsImpl);

ByteLevels byte_levels(const float* levels, int bits) {
  const int n = 1 << bits;
  float max_abs = 0.0f;
  for (int c = 0; c < n; ++c) max_abs = std::max(max_abs, std::fabs(levels[c]));
  const QueryStep s = query_step(max_abs, 127);
  ByteLevels out{};
  out.step = s.step;
  for (int c = 0; c < n; ++c) out.value[c] = static_cast<int8_t>(std::lrintf(levels[c] * s.inverse));
  for (int c = 0; c < 64; ++c) out.offset_table[c] = static_cast<uint8_t>(out.value[c % n] + 128);
  return out;
}

bool can_score_byte_level_rows(int bits, int64_t dim, int64_t block) {
  static const bool supported = HWY_DYNAMIC_DISPATCH(ByteKeysSupportedImpl)();
  return supported && bits >= 2 && bits <= 6 && dim == 64 && block == 32;
}

void quantize_query_i8(const float* q, int64_t d, int8_t* q8, uint8_t* abs_q8, float* step) {
  const QueryStep s = vector_step(q, d, 127);
  *step = s.step;
  const bool finite = !std::isnan(s.step);
  for (int64_t e = 0; e < d; ++e) {
    const int v = finite ? static_cast<int>(std::lrintf(q[e] * s.inverse)) : 0;
    q8[e] = static_cast<int8_t>(v);
    abs_q8[e] = static_cast<uint8_t>(v < 0 ? -v : v);
  }
}

void score_byte_level_rows(const BlockLevelKeys& keys, const ByteLevels& levels, const int8_t* q8,
                           const uint8_t* abs_q8, const float* q_step, const float* bias, int64_t n_q, float* scores,
                           int64_t ld) {
  HWY_DYNAMIC_DISPATCH(ScoreByteLevelsImpl)(keys, levels, q8, abs_q8, q_step, bias, n_q, scores, ld);
}

namespace scalar {
void score_byte_level_rows(const BlockLevelKeys& k, const ByteLevels& levels, const int8_t* q8,
                           const uint8_t* /*abs_q8*/, const float* q_step, const float* bias, int64_t n_q,
                           float* scores, int64_t ld) {
  const int64_t nb = k.dim / k.block;
  for (int64_t r = 0; r < n_q; ++r) {
    const float step = q_step[r] * levels.step;
    for (int64_t j = 0; j < k.n_rows; ++j) {
      const uint8_t* packed = k.codes + j * k.code_stride;
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t total = 0;
        for (int64_t e = b * k.block; e < (b + 1) * k.block; ++e) {
          total += static_cast<int32_t>(q8[r * k.dim + e]) * levels.value[dense_code(packed, e, k.bits)];
        }
        const float product = static_cast<float>(total) * base::f16_to_f32(k.scales[j * nb + b]);
        acc = b == 0 ? product : acc + product;
      }
      scores[r * ld + j] = std::fma(acc, step, bias != nullptr ? bias[r] : 0.0f);
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
