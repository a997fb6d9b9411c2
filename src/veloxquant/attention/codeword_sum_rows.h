#pragma once
// Rows of residual vector-quantization codes decoded to f32 for the attention driver's tile
// kernels (nsnquant, caches/nsnquant_rows.h; Highway, dispatched at run time, with a plain scalar
// reference the kernel equals bit for bit).
//
// A row holds one code byte per (sub-vector s, stage st), sub-vector-major with the stages inner
// (code s * stages + st); stage st's codebook holds `entries` codewords of `dim` floats at
// words + st * stage_stride. A sub-vector decodes to the sum of its stages' codewords, added in
// stage order (the order quant/nsn_codebook.h's decode uses):
//
//   out[j * out_stride + s * dim + e] = ((c_0[e] + c_1[e]) + c_2[e]) + ...
//
// With dim 8 (nsnquant's default) a sub-vector is one 8-lane vector: one load per stage and an add,
// no per-coordinate loop; other widths take the scalar loop.
#include <cstdint>

namespace veloxquant::attention::kernels {

// A tile of code rows and the codebooks they index: rows j < n_rows, row j's codes at
// codes + j * code_stride (`subvectors` sub-vectors of `stages` bytes), stage st's codebook of
// `dim`-float codewords at words + st * stage_stride.
struct CodewordSumTile {
  const uint8_t* codes;
  int64_t code_stride, n_rows, subvectors;
  int stages;
  const float* words;
  int64_t stage_stride;
  int dim;
};

void codeword_sum_rows(const CodewordSumTile& tile, float* out, int64_t out_stride);

// The same rows scored against n_q queries without an f32 tile (each sub-vector decoded into a
// register and multiplied at once; nsnquant's keys):
//   scores[r * ld + j] = <q + r * q_stride, row j>   (the row's subvectors * dim floats)
// Order (kernel and reference): 8 lane sums (element c of the row into lane c % 8) of fused
// multiply-adds in element order, reduced ((l0 + l2) + (l1 + l3)) + ((l4 + l6) + (l5 + l7)).
void codeword_sum_scores(const CodewordSumTile& tile, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                         int64_t ld);
// And accumulated with weights (nsnquant's values):
//   acc[r * acc_stride + e] = fma(w[r * ld + j], row j [e], acc[...]) for j ascending.
void codeword_sum_accumulate(const CodewordSumTile& tile, const float* w, int64_t ld, int64_t n_q, float* acc,
                             int64_t acc_stride);

namespace scalar {
void codeword_sum_scores(const CodewordSumTile& tile, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                         int64_t ld);
void codeword_sum_accumulate(const CodewordSumTile& tile, const float* w, int64_t ld, int64_t n_q, float* acc,
                             int64_t acc_stride);
void codeword_sum_rows(const CodewordSumTile& tile, float* out, int64_t out_stride);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
