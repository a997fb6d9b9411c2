#pragma once
// Product-VQ rows (caches/product_vq.h: vecinfer's default geometry) scored and accumulated
// straight from their codewords (Highway, dispatched at run time; each SIMD loop matches its
// scalar reference bit for bit).
//
// Decoding a tile of codes to f32 scratch and then scoring it stores every codeword and loads it
// back once more; here each codeword is loaded from its book into the register that the FMA
// reads, once per row for every query of the block:
//
// Keys (one shared book of 4-float codewords, 12-bit codes, 16 per row: head_dim 64). The two
// codewords of pair p = codes (2p, 2p + 1) fill one 8-lane vector, the query's coordinates
// [8p, 8p + 8) the other, so lane l of the row's accumulator is
//   a_l = fma(q[8p + l], word(code_{2p + l/4})[l % 4], a_l)     for p = 0..7 in order, a_l = 0 first
// and the score is ((a0 + a2) + (a1 + a3)) + ((a4 + a6) + (a5 + a7)): exactly what the shared
// tile kernel (lm/kernels/attention_tiles) computes on the decoded rows.
//
// Values (one book of 256 8-float codewords per position, 8-bit codes, one byte each):
//   acc[r][8t + e] = fma(w[r][j], word_t(code_jt)[e], acc[r][8t + e])     for rows j in order
// — again the tile kernel's arithmetic on the decoded rows.
#include <cstdint>

namespace veloxquant::attention::kernels {

struct CodewordKeys {
  const uint8_t* codes = nullptr;  // row j's 24 bytes at codes + j * code_stride
  int64_t code_stride = 0;
  int64_t n_rows = 0;
  const float* words = nullptr;  // 4096 codewords x 4 floats
};

struct CodewordValues {
  const uint8_t* codes = nullptr;  // row j's positions bytes at codes + j * code_stride
  int64_t code_stride = 0;
  int64_t n_rows = 0;
  int positions = 0;             // codes per row (head_dim / 8)
  const float* words = nullptr;  // [positions][256][8]
};

// True where the dispatched target runs the 8-lane loops (AVX2 and wider); elsewhere the caller
// decodes the rows and uses the plain tile kernels.
bool codeword_rows_supported();

// scores[r * ld + j] = <q[r * q_stride ..], key row j> for r < n_q, j < n_rows.
void score_codeword_keys(const CodewordKeys& k, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                         int64_t ld);
// acc[r * acc_stride + e] += sum_j w[r * ld + j] * value row j [e] for r < n_q, e < 8 * positions.
void accumulate_codeword_values(const CodewordValues& v, const float* w, int64_t ld, int64_t n_q, float* acc,
                                int64_t acc_stride);

namespace scalar {
void score_codeword_keys(const CodewordKeys& k, const float* q, int64_t q_stride, int64_t n_q, float* scores,
                         int64_t ld);
void accumulate_codeword_values(const CodewordValues& v, const float* w, int64_t ld, int64_t n_q, float* acc,
                                int64_t acc_stride);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
