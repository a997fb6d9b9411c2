// Highway kernel for codeword_sum_rows.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/codeword_sum_rows.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/codeword_sum_rows.h"
#include "veloxquant/attention/integer_row_sums-inl.h"

#include <cmath>
#include <cstddef>

HWY_BEFORE_NAMESPACE();
namespace veloxquant::attention::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// kStages > 0: the stage count known at compile time (the loop unrolls); 0: read `stages`.
template <int kStages, class DF>
HWY_INLINE void rows_of(DF df, const uint8_t* codes, int64_t code_stride, int64_t n_rows, int64_t subvectors,
                        int stages, const float* words, int64_t stage_stride, float* out, int64_t out_stride) {
  const int n_stages = kStages > 0 ? kStages : stages;
  if constexpr (kStages > 0) {
    // Each stage's codebook from a pointer of its own and the code widened unsigned: a codeword is
    // one byte load, one shift and the load-add (it was a shift, a sign extension and an add of the
    // stage offset besides: 24 instructions per 4-stage sub-vector, 407 per kv row at 4 bits).
    const float* book[kStages];
    for (int st = 0; st < kStages; ++st) book[st] = words + st * stage_stride;
    for (int64_t j = 0; j < n_rows; ++j) {
      const uint8_t* code = codes + j * code_stride;
      float* dst = out + j * out_stride;
      for (int64_t s = 0; s < subvectors; ++s, code += kStages) {
        auto v = hn::LoadU(df, book[0] + (static_cast<std::size_t>(code[0]) << 3));
        for (int st = 1; st < kStages; ++st) {
          v = hn::Add(v, hn::LoadU(df, book[st] + (static_cast<std::size_t>(code[st]) << 3)));
        }
        hn::StoreU(v, df, dst + s * 8);
      }
    }
    return;
  }
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* code = codes + j * code_stride;
    float* dst = out + j * out_stride;
    for (int64_t s = 0; s < subvectors; ++s, code += n_stages) {
      auto v = hn::LoadU(df, words + static_cast<int64_t>(code[0]) * 8);
      for (int st = 1; st < n_stages; ++st)
        v = hn::Add(
            v, hn::LoadU(df, words + static_cast<int64_t>(st) * stage_stride + static_cast<int64_t>(code[st]) * 8));
      hn::StoreU(v, df, dst + s * 8);
    }
  }
}

void CodewordSumRowsImpl(const CodewordSumTile& tile, float* out, int64_t out_stride) {
  const hn::CappedTag<float, 8> df;
  if (tile.dim != 8 || hn::MaxLanes(df) != 8) {
    scalar::codeword_sum_rows(tile, out, out_stride);
    return;
  }
  const uint8_t* codes = tile.codes;
  const float* words = tile.words;
  const int64_t code_stride = tile.code_stride, n_rows = tile.n_rows, subvectors = tile.subvectors;
  const int64_t stage_stride = tile.stage_stride;
  const int stages = tile.stages;
  switch (stages) {
    case 1:
      rows_of<1>(df, codes, code_stride, n_rows, subvectors, stages, words, stage_stride, out, out_stride);
      break;
    case 2:
      rows_of<2>(df, codes, code_stride, n_rows, subvectors, stages, words, stage_stride, out, out_stride);
      break;
    case 4:
      rows_of<4>(df, codes, code_stride, n_rows, subvectors, stages, words, stage_stride, out, out_stride);
      break;
    default:
      rows_of<0>(df, codes, code_stride, n_rows, subvectors, stages, words, stage_stride, out, out_stride);
      break;
  }
}

// The fused kernels: each sub-vector decoded into a register and used at once (no f32 tile stored
// and read back). 8 lanes of 32 bits and a compile-time stage count; others run the reference.
#if HWY_TARGET != HWY_SCALAR && HWY_MAX_BYTES >= 32
#define VELOXQUANT_CODEWORD_FUSED_SIMD 1
using DF8 = hn::CappedTag<float, 8>;

template <int kStages>
HWY_INLINE hn::Vec<DF8> decode_subvector(DF8 df, const float* const* book, const uint8_t* code) {
  auto v = hn::LoadU(df, book[0] + (static_cast<std::size_t>(code[0]) << 3));
  for (int st = 1; st < kStages; ++st)
    v = hn::Add(v, hn::LoadU(df, book[st] + (static_cast<std::size_t>(code[st]) << 3)));
  return v;
}

// NQ queries, rows four at a time (their lane sums reduced side by side), then the rest. kSub > 0:
// the sub-vector count known at compile time (head_dim 64 at width 8: the loop unrolls, 13 -> 9
// instructions per sub-vector and query block).
template <int kStages, int NQ, int kSub>
void scores_of(const uint8_t* codes, int64_t code_stride, int64_t n_rows, int64_t runtime_subvectors,
               const float* const* book, const float* q, int64_t q_stride, float* scores, int64_t ld) {
  const int64_t subvectors = kSub > 0 ? kSub : runtime_subvectors;
  const DF8 df;
  const hn::Half<DF8> dh;
  using V = hn::Vec<DF8>;
  const auto row_sums = [&](int64_t j, V* acc) {
    const uint8_t* code = codes + j * code_stride;
    for (int r = 0; r < NQ; ++r) acc[r] = hn::Zero(df);
#pragma GCC unroll 16
    for (int64_t s = 0; s < subvectors; ++s, code += kStages) {
      const V z = decode_subvector<kStages>(df, book, code);
      for (int r = 0; r < NQ; ++r) acc[r] = hn::MulAdd(z, hn::LoadU(df, q + r * q_stride + s * 8), acc[r]);
    }
  };
  int64_t j = 0;
#if HWY_MAX_BYTES >= 64 && !HWY_HAVE_SCALABLE
  // AVX-512: four rows in two 16-lane vectors, x = rows (j, j + 2) and y = (j + 1, j + 3), each
  // 8-lane half running row_sums' FMA chain for its row against a doubled query chunk (one load
  // feeds both): half the FMAs. sums_of_pair(x, y) holds the pairs (j, j + 1) and (j + 2, j + 3)
  // in its halves, and sums_of_pairs of them is sums_of_4 of the four rows: bit-identical.
  constexpr int64_t kMaxDoubled = 3 * 32 * 16;
  using DW = hn::CappedTag<float, 16>;
  if (NQ * subvectors * 16 <= kMaxDoubled) {
    const DW dw;
    HWY_ALIGN float doubled[kMaxDoubled];
    for (int r = 0; r < NQ; ++r) {
      for (int64_t sv = 0; sv < subvectors; ++sv) {
        const V chunk = hn::LoadU(df, q + r * q_stride + sv * 8);
        hn::Store(chunk, df, doubled + (r * subvectors + sv) * 16);
        hn::Store(chunk, df, doubled + (r * subvectors + sv) * 16 + 8);
      }
    }
    for (; j + 4 <= n_rows; j += 4) {
      const uint8_t* c0 = codes + j * code_stride;
      hn::Vec<DW> x[NQ], y[NQ];
      for (int r = 0; r < NQ; ++r) x[r] = y[r] = hn::Zero(dw);
#pragma GCC unroll 16
      for (int64_t sv = 0; sv < subvectors; ++sv) {
        const uint8_t* c = c0 + sv * kStages;
        const auto zx = hn::Combine(dw, decode_subvector<kStages>(df, book, c + 2 * code_stride),
                                    decode_subvector<kStages>(df, book, c));
        const auto zy = hn::Combine(dw, decode_subvector<kStages>(df, book, c + 3 * code_stride),
                                    decode_subvector<kStages>(df, book, c + code_stride));
        for (int r = 0; r < NQ; ++r) {
          const auto qv = hn::Load(dw, doubled + (r * subvectors + sv) * 16);
          x[r] = hn::MulAdd(zx, qv, x[r]);
          y[r] = hn::MulAdd(zy, qv, y[r]);
        }
      }
      for (int r = 0; r < NQ; ++r) {
        const auto pairs = sums_of_pair(dw, x[r], y[r]);
        hn::StoreU(sums_of_pairs(df, hn::LowerHalf(df, pairs), hn::UpperHalf(df, pairs)), dh, scores + r * ld + j);
      }
    }
  }
#endif
  for (; j + 4 <= n_rows; j += 4) {
    V a0[NQ], a1[NQ], a2[NQ], a3[NQ];
    row_sums(j, a0);
    row_sums(j + 1, a1);
    row_sums(j + 2, a2);
    row_sums(j + 3, a3);
    for (int r = 0; r < NQ; ++r) hn::StoreU(sums_of_4(df, a0[r], a1[r], a2[r], a3[r]), dh, scores + r * ld + j);
  }
  for (; j < n_rows; ++j) {
    V a[NQ];
    row_sums(j, a);
    const V zero = hn::Zero(df);
    for (int r = 0; r < NQ; ++r) scores[r * ld + j] = hn::GetLane(sums_of_4(df, a[r], zero, zero, zero));
  }
}

template <int kStages>
void scores_stages(const uint8_t* codes, int64_t code_stride, int64_t n_rows, int64_t subvectors,
                   const float* const* book, const float* q, int64_t q_stride, int64_t n_q, float* scores, int64_t ld) {
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) {
    if (subvectors == 8) {
      scores_of<kStages, 3, 8>(codes, code_stride, n_rows, 8, book, q + r * q_stride, q_stride, scores + r * ld, ld);
    } else {
      scores_of<kStages, 3, 0>(codes, code_stride, n_rows, subvectors, book, q + r * q_stride, q_stride,
                               scores + r * ld, ld);
    }
  }
  for (; r < n_q; ++r) {
    scores_of<kStages, 1, 0>(codes, code_stride, n_rows, subvectors, book, q + r * q_stride, q_stride, scores + r * ld,
                             ld);
  }
}

// Sub-vectors outer, rows inner in blocks of four: the block's NQ x 4 weights broadcast once, each
// sub-vector's NQ accumulators loaded once per block; per element the rows are added in order.
template <int kStages, int NQ>
void accumulate_of(const uint8_t* codes, int64_t code_stride, int64_t n_rows, int64_t subvectors,
                   const float* const* book, const float* w, int64_t ld, float* acc, int64_t acc_stride) {
  const DF8 df;
  using V = hn::Vec<DF8>;
  int64_t j = 0;
  for (; j + 4 <= n_rows; j += 4) {
    V wv[4][NQ];
    for (int t = 0; t < 4; ++t) {
      for (int r = 0; r < NQ; ++r) wv[t][r] = hn::Set(df, w[r * ld + j + t]);
    }
    const uint8_t* c0 = codes + j * code_stride;
    int64_t s = 0;
#if HWY_MAX_BYTES >= 64 && !HWY_HAVE_SCALABLE
    // AVX-512: sub-vectors s and s + 1 side by side in one 16-lane vector (their accumulator
    // columns are adjacent); each lane still adds the four rows in order: bit-identical.
    {
      const hn::CappedTag<float, 16> dw;
      hn::Vec<decltype(dw)> ww[4][NQ];
      for (int t = 0; t < 4; ++t) {
        for (int r = 0; r < NQ; ++r) ww[t][r] = hn::Set(dw, w[r * ld + j + t]);
      }
      for (; s + 2 <= subvectors; s += 2) {
        hn::Vec<decltype(dw)> a[NQ];
        for (int r = 0; r < NQ; ++r) a[r] = hn::LoadU(dw, acc + r * acc_stride + s * 8);
        for (int t = 0; t < 4; ++t) {
          const uint8_t* c = c0 + t * code_stride + s * kStages;
          const auto z =
              hn::Combine(dw, decode_subvector<kStages>(df, book, c + kStages), decode_subvector<kStages>(df, book, c));
          for (int r = 0; r < NQ; ++r) a[r] = hn::MulAdd(ww[t][r], z, a[r]);
        }
        for (int r = 0; r < NQ; ++r) hn::StoreU(a[r], dw, acc + r * acc_stride + s * 8);
      }
    }
#endif
    for (; s < subvectors; ++s) {
      V a[NQ];
      for (int r = 0; r < NQ; ++r) a[r] = hn::LoadU(df, acc + r * acc_stride + s * 8);
      for (int t = 0; t < 4; ++t) {
        const V z = decode_subvector<kStages>(df, book, c0 + t * code_stride + s * kStages);
        for (int r = 0; r < NQ; ++r) a[r] = hn::MulAdd(wv[t][r], z, a[r]);
      }
      for (int r = 0; r < NQ; ++r) hn::StoreU(a[r], df, acc + r * acc_stride + s * 8);
    }
  }
  for (; j < n_rows; ++j) {
    const uint8_t* code = codes + j * code_stride;
    for (int64_t s = 0; s < subvectors; ++s) {
      const V z = decode_subvector<kStages>(df, book, code + s * kStages);
      for (int r = 0; r < NQ; ++r) {
        float* o = acc + r * acc_stride + s * 8;
        hn::StoreU(hn::MulAdd(hn::Set(df, w[r * ld + j]), z, hn::LoadU(df, o)), df, o);
      }
    }
  }
}

template <int kStages>
void accumulate_stages(const uint8_t* codes, int64_t code_stride, int64_t n_rows, int64_t subvectors,
                       const float* const* book, const float* w, int64_t ld, int64_t n_q, float* acc,
                       int64_t acc_stride) {
  int64_t r = 0;
  for (; r + 3 <= n_q; r += 3) {
    accumulate_of<kStages, 3>(codes, code_stride, n_rows, subvectors, book, w + r * ld, ld, acc + r * acc_stride,
                              acc_stride);
  }
  for (; r < n_q; ++r) {
    accumulate_of<kStages, 1>(codes, code_stride, n_rows, subvectors, book, w + r * ld, ld, acc + r * acc_stride,
                              acc_stride);
  }
}
#endif

void CodewordSumScoresImpl(const CodewordSumTile& tile, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                           int64_t ld) {
#ifdef VELOXQUANT_CODEWORD_FUSED_SIMD
  const int stages = tile.stages;
  if (tile.dim == 8 && (stages == 1 || stages == 2 || stages == 4)) {
    const uint8_t* codes = tile.codes;
    const int64_t code_stride = tile.code_stride, n_rows = tile.n_rows, subvectors = tile.subvectors;
    const float* book[4];
    for (int st = 0; st < stages; ++st) book[st] = tile.words + st * tile.stage_stride;
    switch (stages) {
      case 1:
        return scores_stages<1>(codes, code_stride, n_rows, subvectors, book, q, q_stride, n_q, scores, ld);
      case 2:
        return scores_stages<2>(codes, code_stride, n_rows, subvectors, book, q, q_stride, n_q, scores, ld);
      default:
        return scores_stages<4>(codes, code_stride, n_rows, subvectors, book, q, q_stride, n_q, scores, ld);
    }
  }
#endif
  scalar::codeword_sum_scores(tile, q, q_stride, n_q, scores, ld);
}

void CodewordSumAccumulateImpl(const CodewordSumTile& tile, const float* w, int64_t ld, int64_t n_q, float* acc,
                               int64_t acc_stride) {
#ifdef VELOXQUANT_CODEWORD_FUSED_SIMD
  const int stages = tile.stages;
  if (tile.dim == 8 && (stages == 1 || stages == 2 || stages == 4)) {
    const uint8_t* codes = tile.codes;
    const int64_t code_stride = tile.code_stride, n_rows = tile.n_rows, subvectors = tile.subvectors;
    const float* book[4];
    for (int st = 0; st < stages; ++st) book[st] = tile.words + st * tile.stage_stride;
    switch (stages) {
      case 1:
        return accumulate_stages<1>(codes, code_stride, n_rows, subvectors, book, w, ld, n_q, acc, acc_stride);
      case 2:
        return accumulate_stages<2>(codes, code_stride, n_rows, subvectors, book, w, ld, n_q, acc, acc_stride);
      default:
        return accumulate_stages<4>(codes, code_stride, n_rows, subvectors, book, w, ld, n_q, acc, acc_stride);
    }
  }
#endif
  scalar::codeword_sum_accumulate(tile, w, ld, n_q, acc, acc_stride);
}
#undef VELOXQUANT_CODEWORD_FUSED_SIMD

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(CodewordSumRowsImpl);
HWY_EXPORT(CodewordSumScoresImpl);
HWY_EXPORT(CodewordSumAccumulateImpl);

void codeword_sum_scores(const CodewordSumTile& tile, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                         int64_t ld) {
  if (tile.n_rows <= 0 || n_q <= 0) return;
  HWY_DYNAMIC_DISPATCH(CodewordSumScoresImpl)(tile, q, q_stride, n_q, scores, ld);
}

void codeword_sum_accumulate(const CodewordSumTile& tile, const float* w, int64_t ld, int64_t n_q, float* acc,
                             int64_t acc_stride) {
  if (tile.n_rows <= 0 || n_q <= 0) return;
  HWY_DYNAMIC_DISPATCH(CodewordSumAccumulateImpl)(tile, w, ld, n_q, acc, acc_stride);
}

void codeword_sum_rows(const CodewordSumTile& tile, float* out, int64_t out_stride) {
  HWY_DYNAMIC_DISPATCH(CodewordSumRowsImpl)(tile, out, out_stride);
}

namespace scalar {
namespace {
// Sub-vector s of a row: its stages' codewords added in stage order, into z[dim].
void decode_one(const uint8_t* code, int stages, const float* words, int64_t stage_stride, int dim, float* z) {
  const float* c = words + static_cast<int64_t>(code[0]) * dim;
  for (int e = 0; e < dim; ++e) z[e] = c[e];
  for (int st = 1; st < stages; ++st) {
    c = words + static_cast<int64_t>(st) * stage_stride + static_cast<int64_t>(code[st]) * dim;
    for (int e = 0; e < dim; ++e) z[e] += c[e];
  }
}
}  // namespace

void codeword_sum_scores(const CodewordSumTile& tile, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                         int64_t ld) {
  const uint8_t* codes = tile.codes;
  const float* words = tile.words;
  const int64_t code_stride = tile.code_stride, n_rows = tile.n_rows, subvectors = tile.subvectors;
  const int64_t stage_stride = tile.stage_stride;
  const int stages = tile.stages, dim = tile.dim;
  float z[256];
  for (int64_t r = 0; r < n_q; ++r) {
    for (int64_t j = 0; j < n_rows; ++j) {
      const uint8_t* code = codes + j * code_stride;
      float lane[8] = {};
      for (int64_t s = 0; s < subvectors; ++s) {
        decode_one(code + s * stages, stages, words, stage_stride, dim, z);
        for (int e = 0; e < dim; ++e) {
          const int64_t c = s * dim + e;
          lane[c % 8] = std::fma(z[e], q[r * q_stride + c], lane[c % 8]);
        }
      }
      scores[r * ld + j] = ((lane[0] + lane[2]) + (lane[1] + lane[3])) + ((lane[4] + lane[6]) + (lane[5] + lane[7]));
    }
  }
}

void codeword_sum_accumulate(const CodewordSumTile& tile, const float* w, int64_t ld, int64_t n_q, float* acc,
                             int64_t acc_stride) {
  const uint8_t* codes = tile.codes;
  const float* words = tile.words;
  const int64_t code_stride = tile.code_stride, n_rows = tile.n_rows, subvectors = tile.subvectors;
  const int64_t stage_stride = tile.stage_stride;
  const int stages = tile.stages, dim = tile.dim;
  float z[256];
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* code = codes + j * code_stride;
    for (int64_t s = 0; s < subvectors; ++s) {
      decode_one(code + s * stages, stages, words, stage_stride, dim, z);
      for (int64_t r = 0; r < n_q; ++r) {
        for (int e = 0; e < dim; ++e) {
          float& a = acc[r * acc_stride + s * dim + e];
          a = std::fma(w[r * ld + j], z[e], a);
        }
      }
    }
  }
}

void codeword_sum_rows(const CodewordSumTile& tile, float* out, int64_t out_stride) {
  const uint8_t* codes = tile.codes;
  const float* words = tile.words;
  const int64_t code_stride = tile.code_stride, stage_stride = tile.stage_stride;
  const int stages = tile.stages, dim = tile.dim;
  for (int64_t j = 0; j < tile.n_rows; ++j) {
    const uint8_t* code = codes + j * code_stride;
    for (int64_t s = 0; s < tile.subvectors; ++s) {
      float* o = out + j * out_stride + s * dim;
      const float* c = words + static_cast<int64_t>(code[s * stages]) * dim;
      for (int e = 0; e < dim; ++e) o[e] = c[e];
      for (int st = 1; st < stages; ++st) {
        c = words + static_cast<int64_t>(st) * stage_stride + static_cast<int64_t>(code[s * stages + st]) * dim;
        for (int e = 0; e < dim; ++e) o[e] += c[e];
      }
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
