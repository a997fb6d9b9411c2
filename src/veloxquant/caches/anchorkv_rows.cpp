#include "veloxquant/caches/anchorkv_rows.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "base/half.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/attention/word_code_rows.h"
#include "veloxquant/caches/anchorkv_cache.h"
#include "veloxquant/caches/anchorkv_records.h"
#include "veloxquant/caches/anchorkv_residuals.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

namespace {

std::atomic<uint64_t> next_call{1};

// One tile's rows that carry a residual: their place in the tile and their slot.
struct ResidualList {
  int64_t n = 0;
  int32_t at[attention::kTileRows];
  uint32_t slot[attention::kTileRows];
};

// The listed residual rows of one stream (codes from byte `code_offset`, (lo, step) from f16
// `param_offset` of each slot) decoded into out[i * d ..]: lo + code * step per element, the same
// levels anchorkv_decode_residual computes (it is the reference for widths and layouts the word
// unpacker does not take: a stream whose codes are not whole, 4-byte aligned words).
void decode_residuals(const lm::Tensor& codes, const lm::Tensor& params, int64_t b, int64_t h, const ResidualList& list,
                      int64_t code_offset, int64_t param_offset, int64_t d, int bits, float* out) {
  float levels[256];
  const int64_t n_levels = int64_t{1} << bits;
  for (int64_t i = 0; i < list.n; ++i) {
    const uint8_t* code = row_ptr<uint8_t>(codes, b, h, list.slot[i]) + code_offset;
    const uint16_t* p = row_ptr<uint16_t>(params, b, h, list.slot[i]) + param_offset;
    float* row = out + i * d;
    if ((d * bits) % 32 == 0 && reinterpret_cast<std::uintptr_t>(code) % 4 == 0) {
      const float lo = base::f16_to_f32(p[0]), step = base::f16_to_f32(p[1]);
      for (int64_t k = 0; k < n_levels; ++k) levels[k] = lo + static_cast<float>(k) * step;
      attention::kernels::unpack_word_rows(reinterpret_cast<const uint32_t*>(code), 0, 1, d, bits, levels, row);
    } else {
      anchorkv_decode_residual(code, p, d, bits, row);
    }
  }
}

// The residual rows' code order (attention/code_rows.h) for rows of d codes of `bits` bits: one per
// thread, rebuilt only when the geometry changes (no allocation per call).
const attention::CodeOrder& residual_order(int bits, int64_t d) {
  thread_local std::unique_ptr<attention::CodeOrder> order;
  if (!order || order->bits() != bits || order->size() != d) order = std::make_unique<attention::CodeOrder>(bits, d);
  return *order;
}

// One stream's part of a residual slot: its codes start `code_offset` bytes into the slot's
// codes (`row_bytes` of them), its (lo, step) `param_offset` f16s into the slot's params.
struct ResidualStream {
  int64_t code_offset;
  int64_t param_offset;
  int64_t row_bytes;
};

// Where each listed row's codes of one stream start, and their (lo, step) (the f16 pairs gathered,
// then widened together).
void residual_rows(const lm::Tensor& codes, const lm::Tensor& params, int64_t b, int64_t h, const ResidualList& list,
                   const ResidualStream& stream, const uint8_t** rows, float* lo, float* step) {
  const uint8_t* code_base = row_ptr<uint8_t>(codes, b, h, 0) + stream.code_offset;
  const uint16_t* param_base = row_ptr<uint16_t>(params, b, h, 0) + stream.param_offset;
  const int64_t code_stride = codes.strides()[2], param_stride = params.strides()[2];
  uint16_t half[2 * attention::kTileRows];
  for (int64_t i = 0; i < list.n; ++i) {
    rows[i] = code_base + static_cast<int64_t>(list.slot[i]) * code_stride;
    const uint16_t* p = param_base + static_cast<int64_t>(list.slot[i]) * param_stride;
    half[i] = p[0];
    half[list.n + i] = p[1];
  }
  lm::kernels::simd::f16_to_f32(half, lo, list.n);  // exact, as the scalar widening
  lm::kernels::simd::f16_to_f32(half + list.n, step, list.n);
}

// A tile's records of one stream (field 0: keys, 1: values): anchor index and coefficient per row,
// and the rows that carry a residual (caches/anchorkv_records.h, in SIMD).
void read_records(const lm::Tensor& records, int64_t b, int64_t h, int64_t j0, int64_t n, int field, int32_t* anchor,
                  float* coef, ResidualList& list) {
  list.n = read_anchor_records(row_ptr<uint32_t>(records, b, h, j0), n, field, anchor, coef, list.at, list.slot);
}

}  // namespace

int64_t AnchorKvRows::prepared_dim() const {
  return attention::CodeOrder::is_planar(c_.o_.anchorkv_residual_bits, key_dim()) ? 2 * key_dim() + 1 : key_dim();
}

void AnchorKvRows::prepare_query(const float* query, float* prepared) const {
  const int64_t d = key_dim();
  std::copy_n(query, d, prepared);
  if (prepared_dim() == d) return;
  // The query in the residual codes' order (scored against codes unpacked by planes) and its sum
  // (the residuals' lo terms), once per call instead of once per tile.
  residual_order(c_.o_.anchorkv_residual_bits, d).permute(query, prepared + d);
  float sum = 0.0f;
  for (int64_t e = 0; e < d; ++e) sum += query[e];
  prepared[2 * d] = sum;
}

AnchorKvRows::AnchorKvRows(const AnchorKvCache& cache, const lm::Tensor& call_k, const lm::Tensor& call_v)
    : c_(cache),
      exact_(cache.tail_k_, cache.tail_v_, cache.offset_ - cache.rows_, call_k, call_v),
      anchor_k_(attention::PlainRows::of(cache.anchor_k_)),
      anchor_v_(attention::PlainRows::of(cache.anchor_v_)),
      call_(next_call.fetch_add(1)) {}

int64_t AnchorKvRows::rows(int64_t, int64_t) const { return c_.rows_ + exact_.rows(); }

const float* AnchorKvRows::anchor_scores(int64_t b, int64_t h, const float* prepared, int64_t n_queries,
                                         float* widened) const {
  // <q, a> for every anchor of (b, h) and every query of the block: the same score_rows call each
  // tile made before, made at the head's first tile of the call and kept per thread for its later
  // tiles (a split-K range of 256 rows is 4 tiles; with 32 anchors at 4k the table had cost half a
  // key score per row).
  struct Kept {
    uint64_t call = 0;
    int64_t b = -1, h = -1, n_queries = 0;
    std::vector<float> queries, dots;
  };
  thread_local Kept kept;
  const int64_t d = key_dim(), pd = prepared_dim(), n_anchor = c_.anchors_;
  const std::size_t query_floats = static_cast<std::size_t>(n_queries * pd);
  if (kept.call == call_ && kept.b == b && kept.h == h && kept.n_queries == n_queries &&
      std::memcmp(kept.queries.data(), prepared, query_floats * sizeof(float)) == 0) {
    return kept.dots.data();
  }
  kept.call = call_;
  kept.b = b;
  kept.h = h;
  kept.n_queries = n_queries;
  kept.queries.assign(prepared, prepared + query_floats);
  kept.dots.resize(static_cast<std::size_t>(n_queries * n_anchor));
  anchor_k_.widen(b, h, 0, n_anchor, widened);
  attention::kernels::score_rows(prepared, pd, n_queries, widened, d, n_anchor, d, kept.dots.data(), n_anchor);
  return kept.dots.data();
}

void AnchorKvRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                              float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t d = key_dim(), pd = prepared_dim(), n_anchor = c_.anchors_, end = std::min(j1, c_.rows_);
  const int bits = c_.o_.anchorkv_residual_bits;
  if (j0 < end) {
    const int64_t n = end - j0;
    const bool table = n_anchor <= kMaxTableAnchors;
    // Scratch: anchor keys (one, or all of them when the head's table is made), the query x
    // anchor dot products (one row's; the table's are kept per thread), the tile's residual rows
    // and their dot products with the queries.
    const int64_t anchor_floats = (table ? n_anchor : 1) * d;
    float* ak = scratch.f32(static_cast<std::size_t>(anchor_floats + n_queries + n * d + n_queries * n));
    float* row_dots = ak + anchor_floats;
    float* res = row_dots + n_queries;
    float* res_dots = res + n * d;
    const float* dots = table ? anchor_scores(b, h, prepared, n_queries, ak) : nullptr;
    ResidualList list;
    int32_t anchor[attention::kTileRows];
    float coef[attention::kTileRows];
    read_records(c_.records_, b, h, j0, n, 0, anchor, coef, list);
    if (table) {
      anchor_row_scores(anchor, coef, n, dots, n_anchor, n_queries, scores, ld);
    } else {
      for (int64_t j = 0; j < n; ++j) {
        anchor_k_.widen(b, h, anchor[j], anchor[j] + 1, ak);
        attention::kernels::score_rows(prepared, pd, n_queries, ak, d, 1, d, row_dots, 1);
        for (int64_t r = 0; r < n_queries; ++r) scores[r * ld + j] = coef[j] * row_dots[r];
      }
    }
    if (list.n > 0 && attention::CodeOrder::is_planar(bits, d)) {
      // + <q, lo + step c> = lo sum(q) + step <q, c>: the residual rows' codes unpacked together in
      // code order (whole-vector shifts) and scored against the queries permuted alike.
      const int64_t row_bytes = d * bits / 8;
      float* lo = scratch.f32_second(static_cast<std::size_t>(2 * list.n));
      float* step = lo + list.n;
      const uint8_t* rows[attention::kTileRows];
      residual_rows(c_.residual_codes_, c_.residual_params_, b, h, list, {0, 0, row_bytes}, rows, lo, step);
      // prepare_query put each query in code order after it, then its sum.
      score_residual_codes(rows, list.n, row_bytes, bits, prepared + d, pd, n_queries, res_dots, list.n, res);
      for (int64_t r = 0; r < n_queries; ++r) {
        const float qsum = prepared[r * pd + 2 * d];
        for (int64_t i = 0; i < list.n; ++i) {
          scores[r * ld + list.at[i]] += lo[i] * qsum + step[i] * res_dots[r * list.n + i];
        }
      }
    } else if (list.n > 0) {  // + <q, r>: the residual rows decoded together and scored as one block
      decode_residuals(c_.residual_codes_, c_.residual_params_, b, h, list, 0, 0, d, bits, res);
      attention::kernels::score_rows(prepared, pd, n_queries, res, d, list.n, d, res_dots, list.n);
      for (int64_t r = 0; r < n_queries; ++r) {
        for (int64_t i = 0; i < list.n; ++i) scores[r * ld + list.at[i]] += res_dots[r * list.n + i];
      }
    }
  }
  const int64_t e0 = std::max(j0, c_.rows_);
  if (e0 < j1)
    exact_.score(b, h, e0 - c_.rows_, j1 - c_.rows_, prepared, pd, n_queries, scores + (e0 - j0), ld, scratch);
}

void AnchorKvRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                   int64_t n_queries, int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t dk = key_dim(), dv = value_dim(), n_anchor = c_.anchors_, end = std::min(j1, c_.rows_);
  const int bits = c_.o_.anchorkv_residual_bits;
  if (j0 < end) {
    const int64_t n = end - j0;
    const bool table = n_anchor <= kMaxTableAnchors;
    // Scratch: per (query, anchor) the gathered weights w * c, the anchors' values, the tile's
    // residual value rows and their weights.
    const int64_t gathered_floats = n_queries * (table ? n_anchor : 1), anchor_floats = table ? 0 : dv;
    float* gathered = scratch.f32_second(
        static_cast<std::size_t>(gathered_floats + anchor_floats + n * dv + n_queries * n + n_queries * dv + 2 * n));
    float* av = gathered + gathered_floats;
    float* res = av + anchor_floats;
    float* res_w = res + n * dv;
    std::fill(gathered, gathered + gathered_floats, 0.0f);
    ResidualList list;
    int32_t anchor[attention::kTileRows];
    float coef[attention::kTileRows];
    read_records(c_.records_, b, h, j0, n, 1, anchor, coef, list);
    if (table && n_queries == 3) {
      // A decode step's GQA group: the three queries' sums in one pass over the rows, three
      // independent read-modify-writes per row instead of one dependent one (the same products
      // added to each sum in the same row order).
      float* g0 = gathered;
      float* g1 = g0 + n_anchor;
      float* g2 = g1 + n_anchor;
      const float* w0 = weights;
      const float* w1 = w0 + ld;
      const float* w2 = w1 + ld;
      for (int64_t j = 0; j < n; ++j) {
        const int32_t a = anchor[j];
        const float c = coef[j];
        const float p0 = w0[j] * c, p1 = w1[j] * c, p2 = w2[j] * c;
        g0[a] += p0;
        g1[a] += p1;
        g2[a] += p2;
      }
    } else if (table) {
      for (int64_t r = 0; r < n_queries; ++r) {
        const float* w = weights + r * ld;
        float* g = gathered + r * n_anchor;
        for (int64_t j = 0; j < n; ++j) g[anchor[j]] += w[j] * coef[j];
      }
    } else {  // each row's anchor value read for the whole query block
      for (int64_t j = 0; j < n; ++j) {
        for (int64_t r = 0; r < n_queries; ++r) gathered[r] = weights[r * ld + j] * coef[j];
        anchor_v_.widen(b, h, anchor[j], anchor[j] + 1, av);
        attention::kernels::accumulate_rows(gathered, 1, n_queries, av, dv, 1, dv, acc, dv);
      }
    }
    if (table) {  // sum_a (sum_{j -> a} w_j c_j) v_a: every anchor value read once per tile, in place
      attention::accumulate_plain_tile(anchor_v_, b, h, 0, n_anchor, {gathered, n_queries, n_anchor}, acc, scratch);
    }
    if (list.n > 0 && attention::CodeOrder::is_planar(bits, dv)) {
      // + sum_j w_j (lo_j + step_j c_j) = sum_j (w_j step_j) c_j + sum_j w_j lo_j: the codes unpacked
      // together in code order, accumulated there and put back in natural order once per query.
      const attention::CodeOrder& order = residual_order(bits, dv);
      const int64_t row_bytes = dv * bits / 8;
      float* sums = res_w + n_queries * list.n;
      float* lo = sums + n_queries * dv;
      float* step = lo + list.n;
      const uint8_t* rows[attention::kTileRows];
      residual_rows(c_.residual_codes_, c_.residual_params_, b, h, list, {dk * bits / 8, 2, row_bytes}, rows, lo, step);
      std::fill(sums, sums + n_queries * dv, 0.0f);
      for (int64_t r = 0; r < n_queries; ++r) {
        float bias = 0.0f;
        for (int64_t i = 0; i < list.n; ++i) {
          const float w = weights[r * ld + list.at[i]];
          res_w[r * list.n + i] = w * step[i];
          bias += w * lo[i];
        }
        float* out = acc + r * dv;
        for (int64_t e = 0; e < dv; ++e) out[e] += bias;
      }
      accumulate_residual_codes(rows, list.n, row_bytes, bits, res_w, list.n, n_queries, sums, dv, res);
      for (int64_t r = 0; r < n_queries; ++r) order.add_to_natural(sums + r * dv, acc + r * dv);
    } else if (list.n > 0) {  // + sum_j w_j r_j over the residual rows, decoded together
      decode_residuals(c_.residual_codes_, c_.residual_params_, b, h, list, dk * bits / 8, 2, dv, bits, res);
      for (int64_t r = 0; r < n_queries; ++r) {
        for (int64_t i = 0; i < list.n; ++i) res_w[r * list.n + i] = weights[r * ld + list.at[i]];
      }
      attention::kernels::accumulate_rows(res_w, list.n, n_queries, res, dv, list.n, dv, acc, dv);
    }
  }
  const int64_t e0 = std::max(j0, c_.rows_);
  if (e0 < j1) exact_.accumulate(b, h, e0 - c_.rows_, j1 - c_.rows_, weights + (e0 - j0), n_queries, ld, acc, scratch);
}

}  // namespace veloxquant
