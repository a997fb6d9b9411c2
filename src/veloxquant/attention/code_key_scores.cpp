// code_key_scores.h: the query preparation, the AMX kernel (functions compiled for AVX-512 +
// AMX-INT8 by target attributes, entered only after the run-time check) and the scalar
// reference. The final adds and multiplies are rounded apart in both: the kernel uses the
// explicitly rounded AVX-512 forms (never fused into an FMA), and the file is compiled with
// -ffp-contract=off, so the reference's are not fused either.
#include "veloxquant/attention/code_key_scores.h"

// GCC 12's AVX-512 headers leave the pass-through operand of some masked intrinsics undefined on
// purpose; inlined into target-attribute functions they raise -Wmaybe-uninitialized from inside
// the header (as -Wuninitialized for some), not from this file's code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "veloxquant/attention/amx_tiles.h"

namespace veloxquant::attention::kernels {
namespace {

constexpr int kHeaderFloats = 16;      // offset, u, serial (2), index, zeros
constexpr double kLevels = 4194304.0;  // 2^22: |v_i| <= 2^22
constexpr int64_t kMaxChunks = 4;      // code_stride <= 256: 64 components per tile product
constexpr int kPieces = 3;

const int8_t* pieces_of(const float* prepared) { return reinterpret_cast<const int8_t*>(prepared + kHeaderFloats); }
uint64_t serial_of(const float* prepared) {
  uint64_t s = 0;
  std::memcpy(&s, prepared + 2, sizeof(s));
  return s;
}
uint32_t index_of(const float* prepared) {
  uint32_t i = 0;
  std::memcpy(&i, prepared + 4, sizeof(i));
  return i;
}

// The combination of the three pieces' exact sums and the query's scale and offset, as the
// header gives it: the reference's form, which the kernel's vector form equals lane for lane.
float combine(int32_t s_h, int32_t s_m, int32_t s_l, float unit, float offset) {
  const float s = (static_cast<float>(s_h) * 65536.0f + static_cast<float>(s_m) * 256.0f) + static_cast<float>(s_l);
  return s * unit + offset;
}

#define VQ_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,amx-tile,amx-int8")))

// v[0..15] rows of 16 lanes -> v[k] lane jj = old v[jj] lane k (a 16 x 16 transpose of 32-bit
// lanes) for k < outputs (the rest are left undefined): pairs of lanes, pairs of pairs, then the
// four 128-bit blocks of four vectors (a GQA group's 9 outputs skip 13 of the 64 shuffles).
VQ_AMX_TARGET inline void transpose16(__m512* v, int64_t outputs = 16) {
  __m512 t[16], w[16];
  for (int64_t i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]);
  }
  // w[4G + k], 128-bit block L = column 4L + k of rows 4G..4G+3.
  for (int64_t g = 0; g < 4; ++g) {
    const __m512d a0 = _mm512_castps_pd(t[4 * g]), a1 = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d a2 = _mm512_castps_pd(t[4 * g + 2]), a3 = _mm512_castps_pd(t[4 * g + 3]);
    w[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a0, a2));
    w[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a0, a2));
    w[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(a1, a3));
    w[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(a1, a3));
  }
  // Column 4L + k = block L of w[k], w[4 + k], w[8 + k], w[12 + k].
  for (int k = 0; k < 4 && k < outputs; ++k) {
    const __m512 y0 = _mm512_shuffle_f32x4(w[k], w[4 + k], 0x44);
    const __m512 y2 = _mm512_shuffle_f32x4(w[8 + k], w[12 + k], 0x44);
    v[k] = _mm512_shuffle_f32x4(y0, y2, 0x88);
    if (4 + k < outputs) v[4 + k] = _mm512_shuffle_f32x4(y0, y2, 0xDD);
    if (8 + k >= outputs) continue;
    const __m512 y1 = _mm512_shuffle_f32x4(w[k], w[4 + k], 0xEE);
    const __m512 y3 = _mm512_shuffle_f32x4(w[8 + k], w[12 + k], 0xEE);
    v[8 + k] = _mm512_shuffle_f32x4(y1, y3, 0x88);
    if (12 + k < outputs) v[12 + k] = _mm512_shuffle_f32x4(y1, y3, 0xDD);
  }
}

// The B tiles of one block of at most 16 queries, and the per-query scale and offset as lanes;
// a thread keeps the last block's (the queries' (serial, index) pairs name it).
//
// The C columns are (piece, query) pairs, column p * nq + q, packed into ceil(3 nq / 16) C
// tiles: a GQA group of 9 queries needs two tiles, not three, so a block of 16 rows costs two
// products per chunk, two tile stores and two B tile loads fewer.
struct alignas(64) QueryTiles {
  int8_t b[kMaxChunks][kPieces][16 * 64];  // [chunk][C tile]
  float unit[16], offset[16];
  int32_t index_m[16], index_l[16];  // lanes of the m and l pieces in C tiles (tile_m, +1), (tile_l, +1)
  int64_t tile_m = 0, tile_l = 0;
  uint64_t serial[16] = {};
  uint32_t index[16] = {};
  int64_t nq = 0, chunks = 0;
  int64_t c_tiles = 0;
};

bool same_queries(const QueryTiles& t, const float* prepared, int64_t stride, int64_t nq, int64_t chunks) {
  if (t.nq != nq || t.chunks != chunks) return false;
  for (int64_t q = 0; q < nq; ++q) {
    const float* p = prepared + q * stride;
    if (serial_of(p) != t.serial[q] || index_of(p) != t.index[q]) return false;
  }
  return true;
}

// B tile (chunk ch, C tile t) row kk = dword kk (components 64 ch + 4 kk .. + 3) of the piece of
// each of the tile's 16 columns: a 16 x 16 transpose of the columns' 64-byte piece chunks;
// columns past 3 nq are zero.
VQ_AMX_TARGET void build_query_tiles(const float* prepared, int64_t stride, int64_t nq, int64_t code_stride,
                                     QueryTiles& t) {
  const int64_t chunks = code_stride / 64, columns = kPieces * nq;
  t.c_tiles = (columns + 15) / 16;
  for (int64_t ch = 0; ch < chunks; ++ch) {
    for (int64_t ct = 0; ct < t.c_tiles; ++ct) {
      __m512 v[16];
      for (int64_t lane = 0; lane < 16; ++lane) {
        const int64_t col = 16 * ct + lane, p = col / nq, q = col % nq;
        v[lane] = col < columns ? _mm512_loadu_ps(pieces_of(prepared + q * stride) + p * code_stride + 64 * ch)
                                : _mm512_setzero_ps();
      }
      transpose16(v);
      for (int64_t kk = 0; kk < 16; ++kk) _mm512_store_ps(t.b[ch][ct] + 64 * kk, v[kk]);
    }
  }
  t.tile_m = nq / 16;
  t.tile_l = 2 * nq / 16;
  for (int64_t q = 0; q < 16; ++q) {
    const float* p = prepared + q * stride;
    const bool live = q < nq;
    t.unit[q] = live ? p[1] : 0.0f;
    t.offset[q] = live ? p[0] : 0.0f;
    t.serial[q] = live ? serial_of(p) : 0;
    t.index[q] = live ? index_of(p) : 0;
    // Lanes of a two-tile permute (0-15 the first tile, 16-31 the next).
    t.index_m[q] = live ? static_cast<int32_t>(nq + q - 16 * t.tile_m) : 0;
    t.index_l[q] = live ? static_cast<int32_t>(2 * nq + q - 16 * t.tile_l) : 0;
  }
  t.nq = nq;
  t.chunks = chunks;
}

// The scores of 16 rows (the C tiles' rows, c[tile][16 * row + column]) for the block's
// queries: per row the three pieces' sums gathered to query lanes and combined, then transposed
// to one vector of 16 rows per query; the first n rows stored.
VQ_AMX_TARGET void store_scores(const int32_t (*c)[256], const QueryTiles& t, int64_t n, float* scores, int64_t ld) {
  constexpr int kNear = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 unit = _mm512_load_ps(t.unit), offset = _mm512_load_ps(t.offset);
  const __m512 hi = _mm512_set1_ps(65536.0f), mid = _mm512_set1_ps(256.0f);
  const __m512i index_m = _mm512_load_si512(t.index_m), index_l = _mm512_load_si512(t.index_l);
  const int32_t* m0 = c[t.tile_m];
  const int32_t* m1 = c[std::min(t.tile_m + 1, t.c_tiles - 1)];
  const int32_t* l0 = c[t.tile_l];
  const int32_t* l1 = c[std::min(t.tile_l + 1, t.c_tiles - 1)];
  __m512 v[16];
  for (int64_t jj = 0; jj < 16; ++jj) {
    const __m512 h = _mm512_cvtepi32_ps(_mm512_load_si512(c[0] + 16 * jj));
    const __m512 m = _mm512_cvtepi32_ps(
        _mm512_permutex2var_epi32(_mm512_load_si512(m0 + 16 * jj), index_m, _mm512_load_si512(m1 + 16 * jj)));
    const __m512 l = _mm512_cvtepi32_ps(
        _mm512_permutex2var_epi32(_mm512_load_si512(l0 + 16 * jj), index_l, _mm512_load_si512(l1 + 16 * jj)));
    const __m512 s = _mm512_add_round_ps(
        _mm512_add_round_ps(_mm512_mul_round_ps(h, hi, kNear), _mm512_mul_round_ps(m, mid, kNear), kNear), l, kNear);
    v[jj] = _mm512_add_round_ps(_mm512_mul_round_ps(s, unit, kNear), offset, kNear);
  }
  transpose16(v, t.nq);
  const __mmask16 k = n >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
  for (int64_t q = 0; q < t.nq; ++q) _mm512_mask_storeu_ps(scores + q * ld, k, v[q]);
}

// The products of one block of 16 rows: C tiles C0.. (kT of them, the enclosing template's
// parameter) zeroed, then per 64-component chunk the rows' codes as tile A and the chunk's kT B
// tiles as B0.., one product each. GCC's AMX intrinsics paste the tile number into the
// instruction text, so the ids are literals of this macro, not template parameters (nor
// parenthesized: "%%tmm" #id).
#define VQ_KEY_PRODUCTS(C0, C1, C2, A, B0, B1, B2)           \
  do {                                                       \
    _tile_zero(C0);                                          \
    if constexpr (kT > 1) _tile_zero(C1);                    \
    if constexpr (kT > 2) _tile_zero(C2);                    \
    for (int64_t ch = 0; ch < t.chunks; ++ch) {              \
      _tile_loadd(A, rows + 64 * ch, code_stride);           \
      _tile_loadd(B0, t.b[ch][0], 64);                       \
      if constexpr (kT > 1) _tile_loadd(B1, t.b[ch][1], 64); \
      if constexpr (kT > 2) _tile_loadd(B2, t.b[ch][2], 64); \
      _tile_dpbusd(C0, A, B0);                               \
      if constexpr (kT > 1) _tile_dpbusd(C1, A, B1);         \
      if constexpr (kT > 2) _tile_dpbusd(C2, A, B2);         \
    }                                                        \
  } while (0)

// Tile layouts: kT = 3: C 0-2, codes 3, B 4-6. kT <= 2: two sets of C tiles, 0-1 (kSet 0) and
// 2-3 (kSet 1), codes 4, B 5-6. The third C and B ids of the two-set layouts name tiles the
// discarded kT > 2 branches never touch; they are distinct only because clang checks a
// product's three tiles apart even in a discarded branch.
template <int kT, int kSet>
VQ_AMX_TARGET inline void products(const uint8_t* rows, int64_t code_stride, const QueryTiles& t) {
  if constexpr (kT == 3) {
    VQ_KEY_PRODUCTS(0, 1, 2, 3, 4, 5, 6);
  } else if constexpr (kSet == 0) {
    VQ_KEY_PRODUCTS(0, 1, 2, 4, 5, 6, 7);
  } else {
    VQ_KEY_PRODUCTS(2, 3, 0, 4, 5, 6, 7);
  }
}
#undef VQ_KEY_PRODUCTS

template <int kT, int kSet>
VQ_AMX_TARGET inline void store_sums(int32_t (*c)[256]) {
  if constexpr (kT == 3) {
    _tile_stored(0, c[0], 64);
    _tile_stored(1, c[1], 64);
    _tile_stored(2, c[2], 64);
  } else if constexpr (kSet == 0) {
    _tile_stored(0, c[0], 64);
    if constexpr (kT > 1) _tile_stored(1, c[1], 64);
  } else {
    _tile_stored(2, c[0], 64);
    if constexpr (kT > 1) _tile_stored(3, c[1], 64);
  }
}

// All blocks of 16 rows for one query block. With one or two C tiles a block, the two sets of C
// tiles alternate: the next block's products
// are issued before this block's sums are stored, so the stores do not wait out the products'
// latency. With three (more than 10 queries): tiles 0-2, codes 3, B 4-6, one block at a time.
template <int kT>
VQ_AMX_TARGET void score_blocks(const QueryTiles& t, const uint8_t* codes, int64_t code_stride, int64_t n_rows,
                                float* scores, int64_t ld) {
  alignas(64) int32_t c[kPieces][256];
  const int64_t blocks = (n_rows + 15) / 16;
  const auto rows_of = [&](int64_t k) { return std::min<int64_t>(16, n_rows - 16 * k); };
  if constexpr (kT == 3) {
    for (int64_t k = 0; k < blocks; ++k) {
      products<3, 0>(codes + 16 * k * code_stride, code_stride, t);
      store_sums<3, 0>(c);
      store_scores(c, t, rows_of(k), scores + 16 * k, ld);
    }
  } else {
    products<kT, 0>(codes, code_stride, t);
    for (int64_t k = 0; k < blocks; k += 2) {
      if (k + 1 < blocks) products<kT, 1>(codes + 16 * (k + 1) * code_stride, code_stride, t);
      store_sums<kT, 0>(c);
      store_scores(c, t, rows_of(k), scores + 16 * k, ld);
      if (k + 1 >= blocks) break;
      if (k + 2 < blocks) products<kT, 0>(codes + 16 * (k + 2) * code_stride, code_stride, t);
      store_sums<kT, 1>(c);
      store_scores(c, t, rows_of(k + 1), scores + 16 * (k + 1), ld);
    }
  }
}

VQ_AMX_TARGET void score_amx(const float* prepared, int64_t prepared_stride, int64_t n_q, const uint8_t* codes,
                             int64_t code_stride, int64_t n_rows, float* scores, int64_t ld) {
  thread_local QueryTiles tiles;
  use_square_tiles();
  const int64_t chunks = code_stride / 64;
  for (int64_t q0 = 0; q0 < n_q; q0 += 16) {
    const int64_t nq = std::min<int64_t>(16, n_q - q0);
    const float* pq = prepared + q0 * prepared_stride;
    if (!same_queries(tiles, pq, prepared_stride, nq, chunks)) {
      build_query_tiles(pq, prepared_stride, nq, code_stride, tiles);
    }
    float* out = scores + q0 * ld;
    switch (tiles.c_tiles) {
      case 1:
        score_blocks<1>(tiles, codes, code_stride, n_rows, out, ld);
        break;
      case 2:
        score_blocks<2>(tiles, codes, code_stride, n_rows, out, ld);
        break;
      default:
        score_blocks<3>(tiles, codes, code_stride, n_rows, out, ld);
        break;
    }
  }
}

}  // namespace

bool code_key_scores_fast() { return amx_int8_usable(); }

uint64_t next_code_key_serial() {
  static std::atomic<uint64_t> serial{0};
  return ++serial;  // from 1: a thread's kept tiles start with serial 0, which names no query
}

void prepare_code_key_query(const float* projected, const float* step, const float* lo, int64_t r, int64_t code_stride,
                            uint64_t serial, uint32_t index, float* prepared) {
  double offset = 0.0, largest = 0.0;
  for (int64_t i = 0; i < r; ++i) {
    offset += static_cast<double>(projected[i]) * lo[i];
    largest = std::max(largest, std::abs(static_cast<double>(projected[i]) * step[i]));
  }
  std::fill(prepared, prepared + code_key_query_floats(code_stride), 0.0f);
  auto* pieces = reinterpret_cast<int8_t*>(prepared + kHeaderFloats);
  // A zero query (or all steps zero) scores every row as the offset; a non-finite one gives the
  // non-finite scores its f32 latent would (u = NaN), with zero pieces instead of undefined
  // conversions.
  const float unit =
      std::isfinite(largest) ? static_cast<float>(largest / kLevels) : std::numeric_limits<float>::quiet_NaN();
  prepared[0] = static_cast<float>(offset);
  prepared[1] = unit;
  std::memcpy(prepared + 2, &serial, sizeof(serial));
  std::memcpy(prepared + 4, &index, sizeof(index));
  if (!(unit > 0.0f) || !std::isfinite(unit)) return;
  for (int64_t i = 0; i < r; ++i) {
    const double a = static_cast<double>(projected[i]) * step[i] / unit;
    const auto v = static_cast<int32_t>(std::clamp(std::nearbyint(a), -kLevels, kLevels));
    // Balanced base-256 digits: l and m in [-128, 127], h = the rest (|h| <= 65).
    const int32_t l = ((v + 128) & 255) - 128, rest = (v - l) / 256;
    const int32_t m = ((rest + 128) & 255) - 128, h = (rest - m) / 256;
    pieces[i] = static_cast<int8_t>(h);
    pieces[code_stride + i] = static_cast<int8_t>(m);
    pieces[2 * code_stride + i] = static_cast<int8_t>(l);
  }
}

void score_code_keys(const float* prepared, int64_t prepared_stride, int64_t n_q, const uint8_t* codes,
                     int64_t code_stride, int64_t n_rows, float* scores, int64_t ld) {
  if (code_key_scores_fast()) {
    score_amx(prepared, prepared_stride, n_q, codes, code_stride, n_rows, scores, ld);
    return;
  }
  scalar::score_code_keys(prepared, prepared_stride, n_q, codes, code_stride, n_rows, scores, ld);
}

namespace scalar {
void score_code_keys(const float* prepared, int64_t prepared_stride, int64_t n_q, const uint8_t* codes,
                     int64_t code_stride, int64_t n_rows, float* scores, int64_t ld) {
  for (int64_t q = 0; q < n_q; ++q) {
    const float* p = prepared + q * prepared_stride;
    const int8_t* h = pieces_of(p);
    const int8_t* m = h + code_stride;
    const int8_t* l = m + code_stride;
    for (int64_t j = 0; j < n_rows; ++j) {
      const uint8_t* row = codes + j * code_stride;
      int32_t s_h = 0, s_m = 0, s_l = 0;
      for (int64_t i = 0; i < code_stride; ++i) {
        s_h += h[i] * static_cast<int32_t>(row[i]);
        s_m += m[i] * static_cast<int32_t>(row[i]);
        s_l += l[i] * static_cast<int32_t>(row[i]);
      }
      scores[q * ld + j] = combine(s_h, s_m, s_l, p[1], p[0]);
    }
  }
}
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
