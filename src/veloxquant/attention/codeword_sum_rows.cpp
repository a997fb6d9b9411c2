// Highway kernel for codeword_sum_rows.h, compiled once per target and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/attention/codeword_sum_rows.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/attention/codeword_sum_rows.h"

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
      auto v = hn::LoadU(df, words + code[0] * 8);
      for (int st = 1; st < n_stages; ++st) v = hn::Add(v, hn::LoadU(df, words + st * stage_stride + code[st] * 8));
      hn::StoreU(v, df, dst + s * 8);
    }
  }
}

void CodewordSumRowsImpl(const uint8_t* codes, int64_t code_stride, int64_t n_rows, int64_t subvectors, int stages,
                         const float* words, int64_t stage_stride, int dim, float* out, int64_t out_stride) {
  const hn::CappedTag<float, 8> df;
  if (dim != 8 || hn::MaxLanes(df) != 8) {
    scalar::codeword_sum_rows(codes, code_stride, n_rows, subvectors, stages, words, stage_stride, dim, out,
                              out_stride);
    return;
  }
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

}  // namespace veloxquant::attention::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant::attention::kernels {
HWY_EXPORT(CodewordSumRowsImpl);

void codeword_sum_rows(const uint8_t* codes, int64_t code_stride, int64_t n_rows, int64_t subvectors, int stages,
                       const float* words, int64_t stage_stride, int dim, float* out, int64_t out_stride) {
  HWY_DYNAMIC_DISPATCH(CodewordSumRowsImpl)
  (codes, code_stride, n_rows, subvectors, stages, words, stage_stride, dim, out, out_stride);
}

namespace scalar {
void codeword_sum_rows(const uint8_t* codes, int64_t code_stride, int64_t n_rows, int64_t subvectors, int stages,
                       const float* words, int64_t stage_stride, int dim, float* out, int64_t out_stride) {
  for (int64_t j = 0; j < n_rows; ++j) {
    const uint8_t* code = codes + j * code_stride;
    for (int64_t s = 0; s < subvectors; ++s) {
      float* o = out + j * out_stride + s * dim;
      const float* c = words + code[s * stages] * dim;
      for (int e = 0; e < dim; ++e) o[e] = c[e];
      for (int st = 1; st < stages; ++st) {
        c = words + st * stage_stride + code[s * stages + st] * dim;
        for (int e = 0; e < dim; ++e) o[e] += c[e];
      }
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
#endif
