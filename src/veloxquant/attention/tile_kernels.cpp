// Highway kernels for tile_kernels.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/tile_kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/tile_kernels.h"

#include "base/half.h"

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void AffineDecodeImpl(const uint8_t* codes, const float* scale, const float* min, int64_t group, int64_t n,
                      float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t e = 0;
  // Whole vectors inside one group share its (scale, min).
  if (group % lanes == 0) {
    for (; e + lanes <= n; e += lanes) {
      const int64_t g = e / group;
      const auto c = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, codes + e)));
      hn::StoreU(hn::MulAdd(c, hn::Set(df, scale[g]), hn::Set(df, min[g])), df, out + e);
    }
  }
  for (; e < n; ++e) out[e] = static_cast<float>(codes[e]) * scale[e / group] + min[e / group];
}

// One row's planes with the code width known at compile time: each 8-byte load feeds all 8/B
// planes (shift, mask, convert, store), so a 4-bit row of 64 codes is 4 loads and 28 other
// instructions.
template <int B>
HWY_INLINE void unpack_row_planes(const uint8_t* bytes, int64_t plane_bytes, float* out) {
  const hn::CappedTag<float, 8> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  constexpr int64_t lanes = static_cast<int64_t>(hn::MaxLanes(decltype(df)()));
  constexpr int kPlanes = 8 / B;
  const auto mask = hn::Set(di, (1 << B) - 1);
  int64_t p = 0;
  for (; p + lanes <= plane_bytes; p += lanes) {
    const auto v = hn::PromoteTo(di, hn::LoadU(d8, bytes + p));
    for (int k = 0; k < kPlanes; ++k) {
      const auto codes = B == 8 ? v : hn::And(hn::ShiftRightSame(v, k * B), mask);
      hn::StoreU(hn::ConvertTo(df, codes), df, out + k * plane_bytes + p);
    }
  }
  for (; p < plane_bytes; ++p) {
    for (int k = 0; k < kPlanes; ++k)
      out[k * plane_bytes + p] = static_cast<float>((bytes[p] >> (k * B)) & ((1 << B) - 1));
  }
}

template <int B>
void unpack_rows_planes(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, float* out) {
  const int64_t row_floats = plane_bytes * (8 / B);
  for (int64_t j = 0; j < n_rows; ++j) unpack_row_planes<B>(bytes + j * row_stride, plane_bytes, out + j * row_floats);
}

void UnpackPlanesImpl(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, int bits,
                      float* out) {
  switch (bits) {
    case 1:
      unpack_rows_planes<1>(bytes, row_stride, n_rows, plane_bytes, out);
      break;
    case 2:
      unpack_rows_planes<2>(bytes, row_stride, n_rows, plane_bytes, out);
      break;
    case 4:
      unpack_rows_planes<4>(bytes, row_stride, n_rows, plane_bytes, out);
      break;
    default:
      unpack_rows_planes<8>(bytes, row_stride, n_rows, plane_bytes, out);
      break;
  }
}

// A codebook of 2^bits centroids held in registers for lookups by 32-bit lane indices: one
// vector while it fits (b <= 3 on AVX2), two with a select (b = 4), a gather beyond.
template <class DF>
struct CentroidTable {
  using V = hn::Vec<DF>;
  V lo, hi;
  const float* c;
  int entries, lanes;
  CentroidTable(DF df, const float* centroids, int n)
      : c(centroids), entries(n), lanes(static_cast<int>(hn::Lanes(df))) {
    HWY_ALIGN float t0[hn::MaxLanes(df)] = {};
    HWY_ALIGN float t1[hn::MaxLanes(df)] = {};
    for (int i = 0; i < n && i < lanes; ++i) t0[i] = centroids[i];
    for (int i = lanes; i < n && i < 2 * lanes; ++i) t1[i - lanes] = centroids[i];
    lo = hn::Load(df, t0);
    hi = hn::Load(df, t1);
  }
  template <class VI>
  HWY_INLINE V lookup(DF df, VI idx) const {
    const hn::RebindToSigned<DF> di;
    if (entries <= lanes) return hn::TableLookupLanes(lo, hn::IndicesFromVec(df, idx));
    if (entries <= 2 * lanes) {
      const auto low_idx = hn::IndicesFromVec(df, hn::And(idx, hn::Set(di, lanes - 1)));
      const auto from_hi = hn::RebindMask(df, hn::Gt(idx, hn::Set(di, lanes - 1)));
      return hn::IfThenElse(from_hi, hn::TableLookupLanes(hi, low_idx), hn::TableLookupLanes(lo, low_idx));
    }
    return hn::GatherIndex(df, c, idx);
  }
};

void CentroidPlanesImpl(const uint8_t* s1, const uint8_t* s2, int64_t row_stride, int64_t n_rows, int64_t plane_bytes,
                        int bits, const float* c1, const float* c2, float* out) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int planes = 8 / bits, entries = 1 << bits, mask_bits = entries - 1;
  const auto mask = hn::Set(di, mask_bits);
  const CentroidTable<decltype(df)> t1(df, c1, entries);
  const CentroidTable<decltype(df)> t2(df, s2 ? c2 : c1, entries);
  const int64_t row_out = plane_bytes * planes;
  for (int64_t j = 0; j < n_rows; ++j, s1 += row_stride, s2 = s2 ? s2 + row_stride : nullptr, out += row_out) {
    int64_t p = 0;
    for (; p + lanes <= plane_bytes; p += lanes) {
      const auto v1 = hn::PromoteTo(di, hn::LoadU(d8, s1 + p));
      if (s2) {
        const auto v2 = hn::PromoteTo(di, hn::LoadU(d8, s2 + p));
        for (int k = 0; k < planes; ++k) {
          const auto a = t1.lookup(df, hn::And(hn::ShiftRightSame(v1, k * bits), mask));
          const auto b = t2.lookup(df, hn::And(hn::ShiftRightSame(v2, k * bits), mask));
          hn::StoreU(hn::Add(a, b), df, out + k * plane_bytes + p);
        }
      } else {
        for (int k = 0; k < planes; ++k) {
          hn::StoreU(t1.lookup(df, hn::And(hn::ShiftRightSame(v1, k * bits), mask)), df, out + k * plane_bytes + p);
        }
      }
    }
    for (; p < plane_bytes; ++p) {
      for (int k = 0; k < planes; ++k) {
        float v = c1[(s1[p] >> (k * bits)) & mask_bits];
        if (s2) v += c2[(s2[p] >> (k * bits)) & mask_bits];
        out[k * plane_bytes + p] = v;
      }
    }
  }
}

void FoldScalesImpl(const float* q, int64_t n_q, int64_t d, const float* scale, const float* min, float* folded,
                    float* bias) {
  const hn::CappedTag<float, 8> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t r = 0;
  // A GQA group of three per pass: each chunk of the group's (scale, min) loaded once for all three
  // queries (the per-query operations, and so the results, are those of the loop below).
  const int64_t whole = d / lanes * lanes;
  for (; r + 3 <= n_q && whole == d; r += 3) {
    const float* q0 = q + r * d;
    float* f0 = folded + r * d;
    auto s0 = hn::Zero(df), s1 = hn::Zero(df), s2 = hn::Zero(df);
    for (int64_t c = 0; c < d; c += lanes) {
      const auto sv = hn::LoadU(df, scale + c), mv = hn::LoadU(df, min + c);
      const auto a = hn::LoadU(df, q0 + c), b = hn::LoadU(df, q0 + d + c), e = hn::LoadU(df, q0 + 2 * d + c);
      hn::StoreU(hn::Mul(a, sv), df, f0 + c);
      hn::StoreU(hn::Mul(b, sv), df, f0 + d + c);
      hn::StoreU(hn::Mul(e, sv), df, f0 + 2 * d + c);
      s0 = hn::MulAdd(a, mv, s0);
      s1 = hn::MulAdd(b, mv, s1);
      s2 = hn::MulAdd(e, mv, s2);
    }
    bias[r] = hn::GetLane(hn::SumOfLanes(df, s0));
    bias[r + 1] = hn::GetLane(hn::SumOfLanes(df, s1));
    bias[r + 2] = hn::GetLane(hn::SumOfLanes(df, s2));
  }
  for (; r < n_q; ++r) {
    const float* qr = q + r * d;
    float* fr = folded + r * d;
    auto sum = hn::Zero(df);
    int64_t c = 0;
    for (; c + lanes <= d; c += lanes) {
      const auto qv = hn::LoadU(df, qr + c);
      hn::StoreU(hn::Mul(qv, hn::LoadU(df, scale + c)), df, fr + c);
      sum = hn::MulAdd(qv, hn::LoadU(df, min + c), sum);
    }
    float b = hn::GetLane(hn::SumOfLanes(df, sum));
    for (; c < d; ++c) {
      fr[c] = qr[c] * scale[c];
      b += qr[c] * min[c];
    }
    bias[r] = b;
  }
}

float ScaleColumnImpl(const float* w, int64_t n, const float* scale, const float* min, float* out) {
  const hn::CappedTag<float, 8> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  auto sum = hn::Zero(df);
  int64_t j = 0;
  for (; j + lanes <= n; j += lanes) {
    const auto wv = hn::LoadU(df, w + j);
    hn::StoreU(hn::Mul(wv, hn::LoadU(df, scale + j)), df, out + j);
    sum = hn::MulAdd(wv, hn::LoadU(df, min + j), sum);
  }
  float b = hn::GetLane(hn::SumOfLanes(df, sum));
  for (; j < n; ++j) {
    out[j] = w[j] * scale[j];
    b += w[j] * min[j];
  }
  return b;
}

// Rows of 2 or 4 f16 fields (the (scale, min) pairs of one or two channel groups) into
// columns: one interleaved load and a widening per field for eight rows, instead of a gather
// per field and row block (slow on Zen and older cores) or a scalar transpose.
void F16ColumnsImpl(const uint16_t* rows, int64_t n, int64_t stride, float* columns) {
  const hn::CappedTag<float, 8> df;
  const hn::Rebind<uint16_t, decltype(df)> du;
  const hn::Rebind<hwy::float16_t, decltype(df)> dh;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto widen = [&](hn::Vec<decltype(du)> v) { return hn::PromoteTo(df, hn::BitCast(dh, v)); };
  int64_t j = 0;
  if (stride == 2) {
    for (; j + lanes <= n; j += lanes) {
      hn::Vec<decltype(du)> a, b;
      hn::LoadInterleaved2(du, rows + 2 * j, a, b);
      hn::StoreU(widen(a), df, columns + j);
      hn::StoreU(widen(b), df, columns + n + j);
    }
  } else if (stride == 4) {
    for (; j + lanes <= n; j += lanes) {
      hn::Vec<decltype(du)> a, b, c, e;
      hn::LoadInterleaved4(du, rows + 4 * j, a, b, c, e);
      hn::StoreU(widen(a), df, columns + j);
      hn::StoreU(widen(b), df, columns + n + j);
      hn::StoreU(widen(c), df, columns + 2 * n + j);
      hn::StoreU(widen(e), df, columns + 3 * n + j);
    }
  }
  for (; j < n; ++j) {
    for (int64_t c = 0; c < stride; ++c) columns[c * n + j] = base::f16_to_f32(rows[j * stride + c]);
  }
}

void AddPlanesInterleavedImpl(const float* planes, int64_t plane_len, int per_byte, float* out) {
  const hn::CappedTag<float, 8> df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t p = 0;
  if (per_byte == 1) {
    for (; p + lanes <= plane_len; p += lanes)
      hn::StoreU(hn::Add(hn::LoadU(df, out + p), hn::LoadU(df, planes + p)), df, out + p);
  } else if (per_byte == 2) {
    for (; p + lanes <= plane_len; p += lanes) {
      hn::Vec<decltype(df)> o0, o1;
      hn::LoadInterleaved2(df, out + 2 * p, o0, o1);
      hn::StoreInterleaved2(hn::Add(o0, hn::LoadU(df, planes + p)), hn::Add(o1, hn::LoadU(df, planes + plane_len + p)),
                            df, out + 2 * p);
    }
  } else if (per_byte == 4) {
    for (; p + lanes <= plane_len; p += lanes) {
      hn::Vec<decltype(df)> o0, o1, o2, o3;
      hn::LoadInterleaved4(df, out + 4 * p, o0, o1, o2, o3);
      hn::StoreInterleaved4(hn::Add(o0, hn::LoadU(df, planes + p)), hn::Add(o1, hn::LoadU(df, planes + plane_len + p)),
                            hn::Add(o2, hn::LoadU(df, planes + 2 * plane_len + p)),
                            hn::Add(o3, hn::LoadU(df, planes + 3 * plane_len + p)), df, out + 4 * p);
    }
  }
  for (; p < plane_len; ++p) {
    for (int k = 0; k < per_byte; ++k) out[p * per_byte + k] += planes[k * plane_len + p];
  }
}

// Group-affine values read by planes and accumulated straight from their bytes: for each
// pass over kSub chunks of `lanes` bytes (all in one channel group), NQ x planes x kSub
// accumulators stay in registers across the rows; each row's bytes are widened once and every
// plane's codes feed NQ FMAs with the row's group-scaled weight, broadcast once per pass. No
// f32 tile of the codes.
// DF: 8 lanes, or 16 on AVX-512 targets (each lane's chain of FMAs over the rows is the same
// whatever the width, so the sums are bit-identical).
// wg, bg: the weights and biases of this pass's channel group and first query; acc: that
// query's accumulator row.
template <int B, int NQ, int kSub, class DF = hn::CappedTag<float, 8>>
void accumulate_planes_pass(const PlaneValueRows& rows, int64_t p0, const float* wg, const float* bg, float* acc,
                            int64_t acc_stride) {
  const uint8_t* bytes = rows.bytes;
  const int64_t row_stride = rows.row_stride, n_rows = rows.n_rows, plane_bytes = rows.plane_bytes;
  const DF df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  constexpr int kPlanes = 8 / B;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto mask = hn::Set(di, (1 << B) - 1);
  hn::Vec<decltype(df)> a[NQ][kPlanes][kSub];
  for (int r = 0; r < NQ; ++r) {
    for (int k = 0; k < kPlanes; ++k) {
      for (int u = 0; u < kSub; ++u) {
        a[r][k][u] = hn::LoadU(df, acc + r * acc_stride + k * plane_bytes + p0 + u * lanes);
        // The group's bias (sum_j w_j m_jg) enters with the accumulator: no pass after the rows.
        if (bg != nullptr) a[r][k][u] = hn::Add(a[r][k][u], hn::Set(df, bg[r]));
      }
    }
  }
  for (int64_t j = 0; j < n_rows; ++j) {
    hn::Vec<decltype(df)> w[NQ];
    for (int r = 0; r < NQ; ++r) w[r] = hn::Set(df, wg[r * n_rows + j]);
    for (int u = 0; u < kSub; ++u) {
      const auto v = hn::PromoteTo(di, hn::LoadU(d8, bytes + j * row_stride + p0 + u * lanes));
      for (int k = 0; k < kPlanes; ++k) {
        // The top field of a byte needs no mask after its shift; the bottom one no shift.
        const auto field = k == 0 ? v : hn::ShiftRightSame(v, k * B);
        const auto codes = hn::ConvertTo(df, k == kPlanes - 1 ? field : hn::And(field, mask));
        for (int r = 0; r < NQ; ++r) a[r][k][u] = hn::MulAdd(w[r], codes, a[r][k][u]);
      }
    }
  }
  for (int r = 0; r < NQ; ++r) {
    for (int k = 0; k < kPlanes; ++k) {
      for (int u = 0; u < kSub; ++u)
        hn::StoreU(a[r][k][u], df, acc + r * acc_stride + k * plane_bytes + p0 + u * lanes);
    }
  }
}

#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
// One 16-lane pass over 16 bytes that hold two channel groups of 8 bytes each (2-bit codes in
// groups of 32 channels: every plane's 16 bytes span two groups), lanes 0-7 with group g's
// weights and bias (wg0, bg0), lanes 8-15 with group g + 1's (wg1, bg1). Each lane's chain — the
// accumulator plus its group's bias, then one fused multiply-add per row — is the one the 8-lane
// pass over that group's 8 bytes runs, so the sums are bit-identical; the two 8-lane passes it
// replaces each spent as many instructions per row.
template <int B, int NQ, class DW>
void accumulate_planes_split_pass(const PlaneValueRows& rows, int64_t p0, const float* wg0, const float* wg1,
                                  const float* bg0, const float* bg1, float* acc, int64_t acc_stride) {
  const uint8_t* bytes = rows.bytes;
  const int64_t row_stride = rows.row_stride, n_rows = rows.n_rows, plane_bytes = rows.plane_bytes;
  const DW df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint8_t, decltype(di)> d8;
  constexpr int kPlanes = 8 / B;
  const auto lower = hn::FirstN(df, 8);
  const auto mask = hn::Set(di, (1 << B) - 1);
  const auto split = [&](float lo, float hi) { return hn::IfThenElse(lower, hn::Set(df, lo), hn::Set(df, hi)); };
  hn::Vec<DW> a[NQ][kPlanes];
  for (int r = 0; r < NQ; ++r) {
    for (int k = 0; k < kPlanes; ++k) {
      a[r][k] = hn::LoadU(df, acc + r * acc_stride + k * plane_bytes + p0);
      if (bg0 != nullptr) a[r][k] = hn::Add(a[r][k], split(bg0[r], bg1[r]));
    }
  }
  for (int64_t j = 0; j < n_rows; ++j) {
    hn::Vec<DW> w[NQ];
    for (int r = 0; r < NQ; ++r) w[r] = split(wg0[r * n_rows + j], wg1[r * n_rows + j]);
    const auto v = hn::PromoteTo(di, hn::LoadU(d8, bytes + j * row_stride + p0));
    for (int k = 0; k < kPlanes; ++k) {
      const auto field = k == 0 ? v : hn::ShiftRightSame(v, k * B);
      const auto codes = hn::ConvertTo(df, k == kPlanes - 1 ? field : hn::And(field, mask));
      for (int r = 0; r < NQ; ++r) a[r][k] = hn::MulAdd(w[r], codes, a[r][k]);
    }
  }
  for (int r = 0; r < NQ; ++r) {
    for (int k = 0; k < kPlanes; ++k) hn::StoreU(a[r][k], df, acc + r * acc_stride + k * plane_bytes + p0);
  }
}
#endif

// Queries [r, r + NQ) of `out`: every chunk of the planes, one or two vectors per pass.
template <int B, int NQ>
void accumulate_planes_block(const PlaneValueRows& rows, const GroupValueTargets& out, int64_t r) {
  const int64_t n_rows = rows.n_rows, plane_bytes = rows.plane_bytes, group = rows.group, n_q = out.n_q;
  const float* ws = out.ws + r * n_rows;
  const float* bias = out.bias != nullptr ? out.bias + r : nullptr;
  float* acc = out.acc + r * out.acc_stride;
  const int64_t acc_stride = out.acc_stride;
  const hn::CappedTag<float, 8> df;
  constexpr int kPlanes = 8 / B;
  // Two chunks per pass where their accumulators and weights still fit 16 registers: half the
  // weight broadcasts and loop overhead per row.
  constexpr bool kPairs = NQ * kPlanes * 2 + NQ <= 15;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t p0 = 0; p0 + lanes <= plane_bytes;) {
    const int64_t g = p0 * kPlanes / group;
    const float* wg = ws + g * n_q * n_rows;
    const float* bg = bias != nullptr ? bias + g * n_q : nullptr;
#if HWY_TARGET != HWY_SCALAR && !HWY_HAVE_SCALABLE
    // AVX-512: 16 lanes per vector (the 8-lane passes ran at half the machine's width), two
    // vectors per pass where the 32 registers hold their accumulators and the chunks stay in
    // one channel group.
    using DW = hn::CappedTag<float, 16>;
    if constexpr (hn::MaxLanes(DW()) == 16) {
      constexpr int64_t kWide = 16;
      constexpr bool kWidePairs = NQ * kPlanes * 2 + NQ <= 30;
      const auto in_group = [&](int64_t bytes_from_p0) { return (p0 + bytes_from_p0 - 1) * kPlanes / group == g; };
      if (kWidePairs && p0 + 2 * kWide <= plane_bytes && in_group(2 * kWide)) {
        accumulate_planes_pass<B, NQ, kWidePairs ? 2 : 1, DW>(rows, p0, wg, bg, acc, acc_stride);
        p0 += 2 * kWide;
        continue;
      }
      if (p0 + kWide <= plane_bytes && in_group(kWide)) {
        accumulate_planes_pass<B, NQ, 1, DW>(rows, p0, wg, bg, acc, acc_stride);
        p0 += kWide;
        continue;
      }
      // Groups of exactly 8 bytes per plane (2-bit codes, groups of 32 channels): two at once.
      if (p0 + kWide <= plane_bytes && in_group(lanes) && (p0 + lanes) * kPlanes / group == g + 1 &&
          (p0 + kWide - 1) * kPlanes / group == g + 1) {
        accumulate_planes_split_pass<B, NQ, DW>(rows, p0, wg, wg + n_q * n_rows, bg, bg != nullptr ? bg + n_q : nullptr,
                                                acc, acc_stride);
        p0 += kWide;
        continue;
      }
    }
#endif
    if (kPairs && p0 + 2 * lanes <= plane_bytes && (p0 + 2 * lanes - 1) * kPlanes / group == g) {
      accumulate_planes_pass<B, NQ, kPairs ? 2 : 1>(rows, p0, wg, bg, acc, acc_stride);
      p0 += (kPairs ? 2 : 1) * lanes;
    } else {
      accumulate_planes_pass<B, NQ, 1>(rows, p0, wg, bg, acc, acc_stride);
      p0 += lanes;
    }
  }
}

template <int B>
void accumulate_planes_bits(const PlaneValueRows& rows, const GroupValueTargets& out) {
  // Query blocks of 3 (a GQA group of 3 in one pass over the bytes). For 2-bit codes 3 x 4
  // accumulators and 3 weights fill 15 of 16 registers and a temporary spills, still fewer
  // instructions than a second pass over the rows for the third query.
  constexpr int kBlock = 3;
  int64_t r = 0;
  for (; r + kBlock <= out.n_q; r += kBlock) accumulate_planes_block<B, kBlock>(rows, out, r);
  for (; r < out.n_q; ++r) accumulate_planes_block<B, 1>(rows, out, r);
}

void AccumulatePlanesImpl(const PlaneValueRows& rows, const GroupValueTargets& out) {
  switch (rows.bits) {
    case 2:
      accumulate_planes_bits<2>(rows, out);
      break;
    case 4:
      accumulate_planes_bits<4>(rows, out);
      break;
    default:
      accumulate_planes_bits<8>(rows, out);
      break;
  }
}

void GatherPairsImpl(const float* pairs, const int32_t* natural, int64_t n, float* first, float* second) {
  const hn::CappedTag<float, 8> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t c = 0;
  for (; c + lanes <= n; c += lanes) {
    const auto at = hn::ShiftLeft<1>(hn::LoadU(di, natural + c));  // pair index -> float index
    hn::StoreU(hn::GatherIndex(df, pairs, at), df, first + c);
    hn::StoreU(hn::GatherIndex(df, pairs + 1, at), df, second + c);
  }
  for (; c < n; ++c) {
    first[c] = pairs[2 * static_cast<int64_t>(natural[c])];
    second[c] = pairs[2 * natural[c] + 1];
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(AffineDecodeImpl);
HWY_EXPORT(UnpackPlanesImpl);
HWY_EXPORT(CentroidPlanesImpl);
HWY_EXPORT(TargetNameImpl);
HWY_EXPORT(FoldScalesImpl);
HWY_EXPORT(ScaleColumnImpl);
HWY_EXPORT(F16ColumnsImpl);
HWY_EXPORT(AddPlanesInterleavedImpl);
HWY_EXPORT(AccumulatePlanesImpl);
HWY_EXPORT(GatherPairsImpl);

void gather_pairs(const float* pairs, const int32_t* natural, int64_t n, float* first, float* second) {
  HWY_DYNAMIC_DISPATCH(GatherPairsImpl)(pairs, natural, n, first, second);
}

bool can_accumulate_planes(int bits, int64_t plane_bytes, int64_t group) {
  // Whole 8-byte chunks (the widest SIMD pass), each inside one channel group.
  return (bits == 2 || bits == 4 || bits == 8) && plane_bytes % 8 == 0 && group % (int64_t{8} * (8 / bits)) == 0;
}

void accumulate_planes(const PlaneValueRows& rows, const GroupValueTargets& out) {
  HWY_DYNAMIC_DISPATCH(AccumulatePlanesImpl)(rows, out);
}

void fold_scales(const float* q, int64_t n_q, int64_t d, const float* scale, const float* min, float* folded,
                 float* bias) {
  HWY_DYNAMIC_DISPATCH(FoldScalesImpl)(q, n_q, d, scale, min, folded, bias);
}

float scale_column(const float* w, int64_t n, const float* scale, const float* min, float* out) {
  return HWY_DYNAMIC_DISPATCH(ScaleColumnImpl)(w, n, scale, min, out);
}

void f16_columns(const uint16_t* rows, int64_t n, int64_t stride, float* columns) {
  HWY_DYNAMIC_DISPATCH(F16ColumnsImpl)(rows, n, stride, columns);
}

void add_planes_interleaved(const float* planes, int64_t plane_len, int per_byte, float* out) {
  HWY_DYNAMIC_DISPATCH(AddPlanesInterleavedImpl)(planes, plane_len, per_byte, out);
}

void centroid_planes(const uint8_t* s1, const uint8_t* s2, int64_t row_stride, int64_t n_rows, int64_t plane_bytes,
                     int bits, const float* c1, const float* c2, float* out) {
  HWY_DYNAMIC_DISPATCH(CentroidPlanesImpl)(s1, s2, row_stride, n_rows, plane_bytes, bits, c1, c2, out);
}

void unpack_planes(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, int bits,
                   float* out) {
  HWY_DYNAMIC_DISPATCH(UnpackPlanesImpl)(bytes, row_stride, n_rows, plane_bytes, bits, out);
}

void affine_decode(const uint8_t* codes, const float* scale, const float* min, int64_t group, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(AffineDecodeImpl)(codes, scale, min, group, n, out);
}

const char* target_name() { return HWY_DYNAMIC_DISPATCH(TargetNameImpl)(); }

namespace scalar {
void gather_pairs(const float* pairs, const int32_t* natural, int64_t n, float* first, float* second) {
  for (int64_t c = 0; c < n; ++c) {
    first[c] = pairs[2 * static_cast<int64_t>(natural[c])];
    second[c] = pairs[2 * natural[c] + 1];
  }
}

void accumulate_planes(const PlaneValueRows& rows, const GroupValueTargets& out) {
  const auto [bytes, row_stride, n_rows, plane_bytes, bits, group] = rows;
  const auto [ws, bias, n_q, acc, acc_stride] = out;
  const int planes = 8 / bits;
  for (int64_t r = 0; r < n_q; ++r) {
    if (bias != nullptr) {
      for (int k = 0; k < planes; ++k) {
        for (int64_t p = 0; p < plane_bytes; ++p)
          acc[r * acc_stride + k * plane_bytes + p] += bias[((p * planes + k) / group) * n_q + r];
      }
    }
    for (int64_t j = 0; j < n_rows; ++j) {
      const uint8_t* row = bytes + j * row_stride;
      for (int k = 0; k < planes; ++k) {
        for (int64_t p = 0; p < plane_bytes; ++p) {
          const int64_t g = (p * planes + k) / group;
          const float code = static_cast<float>((row[p] >> (k * bits)) & ((1 << bits) - 1));
          acc[r * acc_stride + k * plane_bytes + p] += ws[(g * n_q + r) * n_rows + j] * code;
        }
      }
    }
  }
}

void fold_scales(const float* q, int64_t n_q, int64_t d, const float* scale, const float* min, float* folded,
                 float* bias) {
  for (int64_t r = 0; r < n_q; ++r) {
    float b = 0.0f;
    for (int64_t c = 0; c < d; ++c) {
      folded[r * d + c] = q[r * d + c] * scale[c];
      b += q[r * d + c] * min[c];
    }
    bias[r] = b;
  }
}

float scale_column(const float* w, int64_t n, const float* scale, const float* min, float* out) {
  float b = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    out[j] = w[j] * scale[j];
    b += w[j] * min[j];
  }
  return b;
}

void f16_columns(const uint16_t* rows, int64_t n, int64_t stride, float* columns) {
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t c = 0; c < stride; ++c) columns[c * n + j] = base::f16_to_f32(rows[j * stride + c]);
  }
}

void add_planes_interleaved(const float* planes, int64_t plane_len, int per_byte, float* out) {
  for (int64_t p = 0; p < plane_len; ++p) {
    for (int k = 0; k < per_byte; ++k) out[p * per_byte + k] += planes[k * plane_len + p];
  }
}

void affine_decode(const uint8_t* codes, const float* scale, const float* min, int64_t group, int64_t n, float* out) {
  for (int64_t e = 0; e < n; ++e) out[e] = static_cast<float>(codes[e]) * scale[e / group] + min[e / group];
}

void unpack_planes(const uint8_t* bytes, int64_t row_stride, int64_t n_rows, int64_t plane_bytes, int bits,
                   float* out) {
  const int planes = 8 / bits;
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* row = bytes + j * row_stride;
    float* o = out + j * plane_bytes * planes;
    for (int k = 0; k < planes; ++k) {
      for (int64_t p = 0; p < plane_bytes; ++p)
        o[k * plane_bytes + p] = static_cast<float>((row[p] >> (k * bits)) & ((1 << bits) - 1));
    }
  }
}

void centroid_planes(const uint8_t* s1, const uint8_t* s2, int64_t row_stride, int64_t n_rows, int64_t plane_bytes,
                     int bits, const float* c1, const float* c2, float* out) {
  const int mask = (1 << bits) - 1, planes = 8 / bits;
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* r1 = s1 + j * row_stride;
    const uint8_t* r2 = s2 ? s2 + j * row_stride : nullptr;
    float* o = out + j * plane_bytes * planes;
    for (int k = 0; k < planes; ++k) {
      for (int64_t p = 0; p < plane_bytes; ++p) {
        float v = c1[(r1[p] >> (k * bits)) & mask];
        if (r2) v += c2[(r2[p] >> (k * bits)) & mask];
        o[k * plane_bytes + p] = v;
      }
    }
  }
}
}  // namespace scalar
}  // namespace veloxquant::attention::kernels
#endif
