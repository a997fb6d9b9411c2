#pragma once
// Key scores straight from integer codes on AMX (kvtc's latent key rows, caches/latent_rows.h):
// a row's component i is lo_i + step_i c_i, so a projected query p scores row j as
//   sum_i p_i lo_i + sum_i (p_i step_i) c_ji,
// a constant per query plus an integer dot product once p_i step_i is a fixed-point integer:
//   a_i = p_i step_i,  u = max_i |a_i| / 2^22,  v_i = round(a_i / u)  (|v_i| <= 2^22),
// 22 bits relative to the query's largest term (attention/code_row_scores.h rounds to 16 bits:
// with one outlier component the others kept few). v_i is split into three signed bytes,
// v_i = 65536 h_i + 256 m_i + l_i (m_i, l_i in [-128, 127], |h_i| <= 65), and each piece's sum
// over the row's codes is exact in int32 (and in f32: |sum| <= 128 * 255 * 256 < 2^24):
//   S = (float(S_h) * 65536 + float(S_m) * 256) + float(S_l),   score = S * u + offset,
// each add and multiply rounded apart (the products by 65536 and 256 are exact), offset the f32
// rounding of sum_i p_i lo_i summed in double.
//
// On CPUs with AMX-INT8 (attention/amx_tiles.h) the sums are tile products (tdpbusd): the codes
// of 16 rows as the A tile straight from the decoded rows (unsigned bytes, row-major: no
// interleave), each piece of 16 queries as a B tile (4 consecutive components of a query per
// dword), C = [16 rows x 16 queries] per piece; 16 x 16 x 64 products per instruction. The
// three C tiles are combined per row and transposed to the callers' [query][row] scores. The B
// tiles of the last query block a thread saw are kept (per thread) and reused while the same
// queries come back, which they do for every tile of a decode step. The integer sums are exact,
// so the AMX path equals the scalar reference below bit for bit; elsewhere the reference runs,
// and callers keep their f32 latent path there (code_key_scores_fast()).
#include <cstdint>

namespace veloxquant::attention::kernels {

// Whether score_code_keys runs on AMX tiles here (attention/amx_tiles.h's check).
bool code_key_scores_fast();

// Floats of a prepared query for code rows of code_stride (a multiple of 64, <= 256) codes:
// [offset, u, serial (2 floats' bits), index, 11 zeros, then the pieces h, m, l as code_stride
// signed bytes each].
inline int64_t code_key_query_floats(int64_t code_stride) { return 16 + 3 * code_stride / 4; }

// A fresh serial for prepare_code_key_query: one per batch of prepared queries (a call).
uint64_t next_code_key_serial();

// projected: r floats (r <= code_stride); step, lo: r each. Writes code_key_query_floats(
// code_stride) floats. (serial, index) name the query: the kernel reuses a thread's kept B tiles
// when every query of a block carries the same (serial, index) pairs as the kept ones, so two
// prepared queries with equal pairs must be equal (a serial per call from next_code_key_serial,
// an index per query of the call).
void prepare_code_key_query(const float* projected, const float* step, const float* lo, int64_t r,
                            int64_t code_stride, uint64_t serial, uint32_t index, float* prepared);

// scores[q * ld + j] for q < n_q, j < n_rows; codes: rows of code_stride bytes (each a code
// 0..255; bytes past a row's components may hold anything their pieces zero out, which
// prepare_code_key_query's do). The kernel reads whole blocks of 16 rows: codes must hold
// (n_rows + 15) / 16 * 16 rows (the rows past n_rows are read, their scores not written).
void score_code_keys(const float* prepared, int64_t prepared_stride, int64_t n_q, const uint8_t* codes,
                     int64_t code_stride, int64_t n_rows, float* scores, int64_t ld);

namespace scalar {
void score_code_keys(const float* prepared, int64_t prepared_stride, int64_t n_q, const uint8_t* codes,
                     int64_t code_stride, int64_t n_rows, float* scores, int64_t ld);
}  // namespace scalar

}  // namespace veloxquant::attention::kernels
