// code_value_sums.h: the AMX kernel (functions compiled for AVX-512 VBMI + AMX-INT8 by target
// attributes and entered only after the run-time check) and the scalar reference. The final
// multiply-adds are rounded apart in both, so they agree bit for bit: the kernel uses the
// explicitly rounded AVX-512 multiply and add (which the compiler never fuses into an FMA), the
// reference is compiled for the baseline target, which has no FMA to fuse into.
#include "veloxquant/attention/code_value_sums.h"

// GCC 12's AVX-512 headers leave the pass-through operand of some masked intrinsics (reductions,
// down-conversions) undefined on purpose; inlined into target-attribute functions they raise
// -Wmaybe-uninitialized from inside the header, not from this file's code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "veloxquant/attention/amx_tiles.h"

namespace veloxquant::attention::kernels {
namespace {

constexpr float kTinyWeight = 1e-30f;
constexpr float kLevels = 65535.0f;

#define VQ_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,amx-tile,amx-int8")))

// Per-thread tile memory: the B tiles of a chunk (up to 16 blocks of 16 components, r <= 256),
// the weights' two byte planes (A tiles) and the integer sums of two blocks (C tiles).
struct alignas(64) AmxScratch {
  uint8_t b[16 * 16 * 64];
  uint8_t a_hi[16 * 64], a_lo[16 * 64];
  int32_t c[4][16 * 16];
};

// b[(cb * 16 + kk) * 64 + 4 * i + t] = codes[(4 kk + t) * stride + 16 cb + i] for cb < blocks,
// rounded up to whole 64-component chunks (rows >= n read as zero codes): each B tile row holds 4
// consecutive rows' codes of 16 components, as tdpbuud reads them. Per 4 rows and 64 components:
// two byte interleaves (rows 0-1, 2-3) per 32 components, then two word interleaves give the 4
// dwords of 16 components; all in registers, whole chunks stored (the scratch holds 16 blocks).
template <bool kFull>
VQ_AMX_TARGET inline void interleave_quads(const uint8_t* codes, int64_t stride, int64_t n, int64_t chunks, uint8_t* b,
                                           __m512i bl, __m512i bh, __m512i wl, __m512i wh) {
  for (int64_t kk = 0; kk < 16; ++kk) {
    const uint8_t* r0 = codes + 4 * kk * stride;
    for (int64_t cc = 0; cc < chunks; ++cc) {
      __m512i row[4];
      for (int t = 0; t < 4; ++t) {
        row[t] = kFull || 4 * kk + t < n ? _mm512_loadu_si512(r0 + t * stride + 64 * cc) : _mm512_setzero_si512();
      }
      const __m512i r01_lo = _mm512_permutex2var_epi8(row[0], bl, row[1]);
      const __m512i r01_hi = _mm512_permutex2var_epi8(row[0], bh, row[1]);
      const __m512i r23_lo = _mm512_permutex2var_epi8(row[2], bl, row[3]);
      const __m512i r23_hi = _mm512_permutex2var_epi8(row[2], bh, row[3]);
      uint8_t* out = b + (4 * cc * 16 + kk) * 64;
      _mm512_store_si512(out, _mm512_permutex2var_epi16(r01_lo, wl, r23_lo));
      _mm512_store_si512(out + 1024, _mm512_permutex2var_epi16(r01_lo, wh, r23_lo));
      _mm512_store_si512(out + 2048, _mm512_permutex2var_epi16(r01_hi, wl, r23_hi));
      _mm512_store_si512(out + 3072, _mm512_permutex2var_epi16(r01_hi, wh, r23_hi));
    }
  }
}

VQ_AMX_TARGET void interleave_row_quads(const uint8_t* codes, int64_t stride, int64_t n, int64_t blocks, uint8_t* b) {
  alignas(64) uint8_t byte_lo[64], byte_hi[64];
  alignas(64) uint16_t word_lo[32], word_hi[32];
  for (int64_t i = 0; i < 32; ++i) {
    byte_lo[2 * i] = static_cast<uint8_t>(i);
    byte_lo[2 * i + 1] = static_cast<uint8_t>(64 + i);
    byte_hi[2 * i] = static_cast<uint8_t>(32 + i);
    byte_hi[2 * i + 1] = static_cast<uint8_t>(96 + i);
  }
  for (int64_t i = 0; i < 16; ++i) {
    word_lo[2 * i] = static_cast<uint16_t>(i);
    word_lo[2 * i + 1] = static_cast<uint16_t>(32 + i);
    word_hi[2 * i] = static_cast<uint16_t>(16 + i);
    word_hi[2 * i + 1] = static_cast<uint16_t>(48 + i);
  }
  const __m512i bl = _mm512_load_si512(byte_lo), bh = _mm512_load_si512(byte_hi);
  const __m512i wl = _mm512_load_si512(word_lo), wh = _mm512_load_si512(word_hi);
  const int64_t chunks = (blocks + 3) / 4;
  if (n == kCodeValueRows) {
    interleave_quads<true>(codes, stride, n, chunks, b, bl, bh, wl, wh);
  } else {
    interleave_quads<false>(codes, stride, n, chunks, b, bl, bh, wl, wh);
  }
}

// One query's weights of a chunk (n <= 64) as 16-bit integers split into byte planes; returns
// the chunk's largest weight (0: skipped, planes zero) and the integer weight sum.
VQ_AMX_TARGET float quantize_weights(const float* w, int64_t n, uint8_t* hi, uint8_t* lo, int64_t* wsum) {
  __m512 x[4];
  __m512 mx = _mm512_setzero_ps();
  for (int64_t v = 0; v < 4; ++v) {
    const int64_t left = n - 16 * v;
    const __mmask16 k = left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1u);
    x[v] = _mm512_maskz_loadu_ps(k, w + 16 * v);
    mx = _mm512_max_ps(mx, x[v]);
  }
  const float m = _mm512_reduce_max_ps(mx);
  if (!(m >= kTinyWeight)) {
    std::memset(hi, 0, 64);
    std::memset(lo, 0, 64);
    *wsum = 0;
    return 0.0f;
  }
  const __m512 inv = _mm512_set1_ps(kLevels / m);
  const __m512i top = _mm512_set1_epi32(65535), low_byte = _mm512_set1_epi32(255);
  int64_t sum = 0;
  for (int64_t v = 0; v < 4; ++v) {
    __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(x[v], inv));  // round to nearest even
    q = _mm512_max_epi32(_mm512_min_epi32(q, top), _mm512_setzero_si512());
    sum += _mm512_reduce_add_epi32(q);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + 16 * v), _mm512_cvtepi32_epi8(_mm512_srli_epi32(q, 8)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + 16 * v), _mm512_cvtepi32_epi8(_mm512_and_si512(q, low_byte)));
  }
  *wsum = sum;
  return m;
}

// One block of at most 16 queries of a chunk: per query q < nq the unit u_q = m_q / 65535 of its
// weights' 16-bit integers (0: the chunk is skipped for it) and wu_q = float(sum_j W_qj) * u_q,
// and where its sums go (acc[q * acc_stride + i], the block's first query at acc).
struct QueryBlock {
  float unit[16], wu[16];
  int64_t nq;
  float* acc;
  int64_t acc_stride;
};

// Quantizes the weights of the block's queries (from q0) for the chunk's n rows from j0 into the
// A tiles' byte planes (a query per row) and fills the block's unit and wu; false when every
// query skips the chunk.
VQ_AMX_TARGET bool quantize_block(const TileWeights& w, int64_t q0, int64_t j0, int64_t n, AmxScratch& s,
                                  QueryBlock& block) {
  bool any = false;
  for (int64_t q = 0; q < block.nq; ++q) {
    int64_t wsum = 0;
    const float m = quantize_weights(w.weights + (q0 + q) * w.ld + j0, n, s.a_hi + q * 64, s.a_lo + q * 64, &wsum);
    block.unit[q] = m / kLevels;
    block.wu[q] = static_cast<float>(wsum) * block.unit[q];
    any = any || m > 0.0f;
  }
  return any;
}

// acc_q[i] += lo_i * wu_q + step_i * (float(S_qi) * unit_q) for the 16 components from i0 (< r)
// of every live query q (S from the two C tiles' rows q); lo and step loaded once for them.
VQ_AMX_TARGET void add_block(const int32_t* c_hi, const int32_t* c_lo, int64_t i0, const CodeValueRows& rows,
                             const QueryBlock& block) {
  const int64_t left = rows.r - i0;
  const __mmask16 k = left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
  const __m512 lov = _mm512_maskz_loadu_ps(k, rows.lo + i0), stepv = _mm512_maskz_loadu_ps(k, rows.step + i0);
  for (int64_t q = 0; q < block.nq; ++q) {
    if (!(block.unit[q] > 0.0f)) continue;
    const __m512i s =
        _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(c_hi + 16 * q), 8), _mm512_load_si512(c_lo + 16 * q));
    constexpr int kNear = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const __m512 a = _mm512_mul_round_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(block.unit[q]), kNear);
    const __m512 t = _mm512_add_round_ps(_mm512_mul_round_ps(lov, _mm512_set1_ps(block.wu[q]), kNear),
                                         _mm512_mul_round_ps(stepv, a, kNear), kNear);
    float* dst = block.acc + q * block.acc_stride + i0;
    _mm512_mask_storeu_ps(dst, k, _mm512_add_round_ps(_mm512_maskz_loadu_ps(k, dst), t, kNear));
  }
}

// The block's weight planes (A tiles 4, 5) times each B tile of the chunk's codes (blocks of 16
// components, two at a time: B tiles 6, 7 into C tiles 0-1, 2-3), added to the block's sums.
VQ_AMX_TARGET void multiply_blocks(AmxScratch& s, const CodeValueRows& rows, const QueryBlock& block) {
  const int64_t blocks = (rows.r + 15) / 16;
  _tile_loadd(4, s.a_hi, 64);
  _tile_loadd(5, s.a_lo, 64);
  for (int64_t cb = 0; cb < blocks; cb += 2) {
    const bool two = cb + 1 < blocks;
    // All four products issued before any store: each store waits for its product's latency.
    _tile_zero(0);
    _tile_zero(1);
    _tile_loadd(6, s.b + cb * 1024, 64);
    if (two) {
      _tile_zero(2);
      _tile_zero(3);
      _tile_loadd(7, s.b + (cb + 1) * 1024, 64);
    }
    _tile_dpbuud(0, 4, 6);
    _tile_dpbuud(1, 5, 6);
    if (two) {
      _tile_dpbuud(2, 4, 7);
      _tile_dpbuud(3, 5, 7);
    }
    _tile_stored(0, s.c[0], 64);
    _tile_stored(1, s.c[1], 64);
    if (two) {
      _tile_stored(2, s.c[2], 64);
      _tile_stored(3, s.c[3], 64);
    }
    add_block(s.c[0], s.c[1], 16 * cb, rows, block);
    if (two) add_block(s.c[2], s.c[3], 16 * (cb + 1), rows, block);
  }
}

VQ_AMX_TARGET void accumulate_amx(const TileWeights& w, const CodeValueRows& rows, float* acc, int64_t acc_stride) {
  thread_local AmxScratch s;
  // The shared 16 x 64 tiles (attention/amx_tiles.h): the A tiles' rows past nq hold whatever an
  // earlier block left there, and the C tiles' rows past nq are never read.
  use_square_tiles();
  const int64_t blocks = (rows.r + 15) / 16;
  for (int64_t j0 = 0; j0 < rows.n_rows; j0 += kCodeValueRows) {
    const int64_t n = std::min(kCodeValueRows, rows.n_rows - j0);
    interleave_row_quads(rows.codes + j0 * rows.stride, rows.stride, n, blocks, s.b);
    for (int64_t q0 = 0; q0 < w.n_queries; q0 += 16) {
      QueryBlock block;
      block.nq = std::min<int64_t>(16, w.n_queries - q0);
      block.acc = acc + q0 * acc_stride;
      block.acc_stride = acc_stride;
      if (quantize_block(w, q0, j0, n, s, block)) multiply_blocks(s, rows, block);
    }
  }
}

}  // namespace

bool code_value_sums_fast() { return amx_int8_usable(); }

void accumulate_code_values(const TileWeights& w, const CodeValueRows& rows, float* acc, int64_t acc_stride) {
  if (code_value_sums_fast()) {
    accumulate_amx(w, rows, acc, acc_stride);
    return;
  }
  scalar::accumulate_code_values(w, rows, acc, acc_stride);
}

namespace scalar {
void accumulate_code_values(const TileWeights& w, const CodeValueRows& rows, float* acc, int64_t acc_stride) {
  int32_t weight[kCodeValueRows];
  for (int64_t j0 = 0; j0 < rows.n_rows; j0 += kCodeValueRows) {
    const int64_t n = std::min(kCodeValueRows, rows.n_rows - j0);
    for (int64_t q = 0; q < w.n_queries; ++q) {
      const float* wq = w.weights + q * w.ld + j0;
      float m = 0.0f;
      for (int64_t j = 0; j < n; ++j) m = std::max(m, wq[j]);
      if (!(m >= kTinyWeight)) continue;
      const float inv = kLevels / m, unit = m / kLevels;
      int64_t wsum = 0;
      for (int64_t j = 0; j < n; ++j) {
        const float x = std::nearbyint(wq[j] * inv);
        weight[j] = static_cast<int32_t>(std::clamp(x, 0.0f, kLevels));
        wsum += weight[j];
      }
      const float wu = static_cast<float>(wsum) * unit;
      float* a = acc + q * acc_stride;
      const uint8_t* chunk = rows.codes + j0 * rows.stride;
      for (int64_t i = 0; i < rows.r; ++i) {
        int32_t sum = 0;
        for (int64_t j = 0; j < n; ++j) sum += weight[j] * static_cast<int32_t>(chunk[j * rows.stride + i]);
        a[i] = a[i] + (rows.lo[i] * wu + rows.step[i] * (static_cast<float>(sum) * unit));
      }
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
