// Highway kernels for split_level_rows.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/split_level_rows.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cstring>

#include "veloxquant/attention/dense_code_lookup-inl.h"
#include "veloxquant/attention/split_level_rows.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// The codes of one vector (n <= 8 bytes at p) as the low bytes of a word: one 8-byte load where
// 8 bytes are readable (the bytes past the n are other codes or the next row's; the lanes never
// use them), else byte by byte (the tile's last row only).
HWY_INLINE uint64_t code_word(const uint8_t* p, int n, const uint8_t* end) {
  uint64_t word = 0;
  if (end - p >= 8) {
    std::memcpy(&word, p, 8);
    return word;
  }
  for (int i = 0; i < n; ++i) word |= static_cast<uint64_t>(p[i]) << (8 * i);
  return word;
}

// Group g of every row, B bits per code. N lanes (16 on AVX-512, 8 on AVX2) = N codes = N*B/8
// bytes per vector; a group of 8 (mod 16) channels ends in a half vector on 16 lanes.
template <int B, bool kOffset, class DF>
void decode_group(DF df, const SplitLevelKeys& k, int g, int64_t dim, const uint8_t* end, const float* offset,
                  float* out) {
  constexpr int N = static_cast<int>(hn::MaxLanes(DF()));
  constexpr int kBytes = N * B / 8;
  const hn::RebindToUnsigned<DF> du32;
  const hn::RebindToSigned<DF> di32;
  const hn::Repartition<uint8_t, DF> du8;
  const hn::Repartition<uint64_t, DF> du64;
  // Lane l's code starts at bit l*B of the vector's word: its 16-bit window is bytes l*B/8 and
  // the next (only needed when the code straddles them), brought to the lane's low bytes by a
  // byte shuffle within each 128-bit block (each block holds the word twice, so the indices
  // count from the word's start), then shifted down by l*B % 8. The lane's upper two bytes
  // repeat the window; the mask drops them.
  HWY_ALIGN uint8_t window[4 * N];
  HWY_ALIGN uint32_t shift[N];
  for (int l = 0; l < N; ++l) {
    const int bit = l * B;
    for (int b = 0; b < 4; ++b) window[4 * l + b] = static_cast<uint8_t>(bit / 8 + (b & 1));
    shift[l] = static_cast<uint32_t>(bit % 8);
  }
  const auto windows = hn::Load(du8, window);
  const auto shifts = hn::Load(du32, shift);
  const auto mask = hn::Set(du32, (1u << B) - 1u);
  // The levels in registers: entry i = level[i mod 2^B] (16 lanes: one table; 8 lanes: levels
  // 0-7 and 8-15, the code's bit 3 picks).
  const float* levels = k.levels[g];
  HWY_ALIGN float low[N], high[N];
  for (int i = 0; i < N; ++i) {
    low[i] = levels[i & ((1 << B) - 1)];
    high[i] = levels[(i + 8) & ((1 << B) - 1)];
  }
  const auto table_low = hn::Load(df, low);
  const auto table_high = hn::Load(df, high);
  const auto lookup = [&](const uint8_t* p, int n) {
    const auto bytes = hn::BitCast(du8, hn::Set(du64, code_word(p, n, end)));
    const auto codes = hn::And(hn::Shr(hn::BitCast(du32, hn::TableLookupBytes(bytes, windows)), shifts), mask);
    if constexpr (N >= 16) {
      (void)table_high;
      return hn::TableLookupLanes(table_low, hn::IndicesFromVec(df, hn::BitCast(di32, codes)));
    } else {
      const auto level = permute_lanes8(df, table_low, codes);
      if constexpr (B < 4) return level;
      const auto top = hn::RebindMask(df, hn::TestBit(codes, hn::Set(du32, 8u)));
      return hn::IfThenElse(top, permute_lanes8(df, table_high, codes), level);
    }
  };
  const int channels = k.channels[g];
  const int full = channels / N * N;
  const float* off = kOffset ? offset + k.offset[g] : nullptr;
  const uint8_t* codes = k.codes + k.code_offset[g];
  const uint8_t* scale_codes = k.scales + g;
  const float* scale_table = k.scale_table;
  const int64_t n_rows = k.n_rows, code_stride = k.code_stride, scale_stride = k.scale_stride;
  float* dst = out + k.offset[g];
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* row = codes + j * code_stride;
    const auto scale = hn::Set(df, scale_table[scale_codes[j * scale_stride]]);
    float* o = dst + j * dim;
    for (int i = 0; i < full; i += N) {
      auto v = hn::Mul(lookup(row + i * B / 8, kBytes), scale);
      if constexpr (kOffset) v = hn::Add(v, hn::LoadU(df, off + i));
      hn::StoreU(v, df, o + i);
    }
    if constexpr (N > 8) {
      if (full < channels) {  // 8 codes, B bytes
        const auto first8 = hn::FirstN(df, 8);
        auto v = hn::Mul(lookup(row + full * B / 8, B), scale);
        if constexpr (kOffset) v = hn::Add(v, hn::MaskedLoad(first8, df, off + full));
        hn::BlendedStore(v, first8, df, o + full);
      }
    }
  }
}

template <bool kOffset, class DF>
void decode_groups(DF df, const SplitLevelKeys& k, const float* offset, float* out) {
  const int64_t dim = split_level_row_dim(k);
  int row_bytes = 0;  // the groups' codes end there
  for (int g = 0; g < k.n_groups; ++g) {
    row_bytes = std::max(row_bytes, k.code_offset[g] + k.channels[g] * k.bits[g] / 8);
  }
  const uint8_t* end = k.codes + (k.n_rows - 1) * k.code_stride + row_bytes;
  for (int g = 0; g < k.n_groups; ++g) {
    switch (k.bits[g]) {
      case 1:
        decode_group<1, kOffset>(df, k, g, dim, end, offset, out);
        break;
      case 2:
        decode_group<2, kOffset>(df, k, g, dim, end, offset, out);
        break;
      case 3:
        decode_group<3, kOffset>(df, k, g, dim, end, offset, out);
        break;
      default:
        decode_group<4, kOffset>(df, k, g, dim, end, offset, out);
        break;
    }
  }
}

// 8 or 16 lanes: the SIMD loop; fewer (SSE4): the scalar reference.
template <class DF>
void decode_rows(DF df, const SplitLevelKeys& k, const float* offset, float* out) {
  if constexpr (hn::MaxLanes(DF()) >= 8) {
    if (offset != nullptr) return decode_groups<true>(df, k, offset, out);
    return decode_groups<false>(df, k, offset, out);
  } else {
    (void)df;
    scalar::decode_split_level_rows(k, offset, out);
  }
}

void DecodeSplitRowsImpl(const SplitLevelKeys& k, const float* offset, float* out) {
  decode_rows(hn::CappedTag<float, 16>(), k, offset, out);
}
#else
void DecodeSplitRowsImpl(const SplitLevelKeys& k, const float* offset, float* out) {
  scalar::decode_split_level_rows(k, offset, out);
}
#endif

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(DecodeSplitRowsImpl);

int64_t split_level_row_dim(const SplitLevelKeys& k) {
  int64_t dim = 0;
  for (int g = 0; g < k.n_groups; ++g) dim += k.channels[g];
  return dim;
}

bool valid_split_level_rows(const SplitLevelKeys& k) {
  if (!valid_split_level_keys(k)) return false;
  // Walk [0, dim): at each point exactly one group must start (channels are positive).
  const int64_t dim = split_level_row_dim(k);
  int64_t at = 0;
  for (int step = 0; step < k.n_groups; ++step) {
    int starting = -1;
    for (int g = 0; g < k.n_groups; ++g) {
      if (k.offset[g] == at) {
        if (starting >= 0) return false;
        starting = g;
      }
    }
    if (starting < 0) return false;
    at += k.channels[starting];
  }
  return at == dim;
}

void decode_split_level_rows(const SplitLevelKeys& rows, const float* offset, float* out) {
  if (rows.n_rows <= 0) return;
  HWY_DYNAMIC_DISPATCH(DecodeSplitRowsImpl)(rows, offset, out);
}

namespace scalar {
void decode_split_level_rows(const SplitLevelKeys& k, const float* offset, float* out) {
  const int64_t dim = split_level_row_dim(k);
  for (int64_t j = 0; j < k.n_rows; ++j) {
    const uint8_t* row = k.codes + j * k.code_stride;
    for (int g = 0; g < k.n_groups; ++g) {
      const int b = k.bits[g];
      const float s = k.scale_table[k.scales[j * k.scale_stride + g]];
      for (int i = 0; i < k.channels[g]; ++i) {
        const int bit = i * b;  // code i of the group, LSB first
        const uint8_t* at = row + k.code_offset[g] + bit / 8;
        const unsigned window = at[0] | (bit % 8 + b > 8 ? static_cast<unsigned>(at[1]) << 8 : 0u);
        const unsigned code = (window >> (bit % 8)) & ((1u << b) - 1);
        const int e = k.offset[g] + i;
        float v = s * k.levels[g][code];
        if (offset != nullptr) v = v + offset[e];
        out[j * dim + e] = v;
      }
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif  // HWY_ONCE
