#include "veloxquant/eviction/eviction_row_source.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "lm/kernels/attention_tiles.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/eviction/codec_tiles.h"
#include "veloxquant/quant/turboquant_rvq.h"

namespace veloxquant::eviction {

namespace {

// f16 rows are scored and accumulated with the rows this many ahead hinted into the cache, the
// host's own decode's distance (lm::kernels::tiles::kDecodePrefetchRows): a decode step streams
// the kept rows of 30 layers from DRAM, and the hardware prefetchers restart at every 4 KiB page.
// Without the hints h2o's 2,580 f16 rows cost ~15% more CPU per row than the native cache's
// (bench/compressed_attention rows/). A hint past a run's end (the next slots of the ring) is
// only a wasted line; it changes no result.
constexpr int64_t kPrefetchRows = lm::kernels::tiles::kDecodePrefetchRows;

// A head's rows of an exact (dtype) codec as the plain rows the dtype kernels read in place.
attention::PlainRows plain_head(const std::byte* head_base, lm::DType dtype, int64_t row_bytes, int64_t dim) {
  attention::PlainRows p;
  p.prefetch_rows = kPrefetchRows;
  p.data = head_base;
  p.dtype = dtype;
  p.row_bytes = row_bytes;
  p.dim = dim;
  return p;
}

}  // namespace

void EvictionRowSource::prepare_query(const float* query, float* prepared) const {
  if (!rvq_order_) {
    std::copy_n(query, key_dim(), prepared);
    return;
  }
  thread_local std::vector<float> rotated;
  rotated.resize(static_cast<std::size_t>(key_dim()));
  rows_.key_codec().rvq_quantizer()->rotation().forward(query, rotated.data());
  rvq_order_->permute(rotated.data(), prepared);
}

void EvictionRowSource::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared,
                                   int64_t n_queries, float* scores, int64_t ld,
                                   attention::TileScratch& scratch) const {
  // A head's rows lie in a ring (eviction_rows.h): one piece per run of back-to-back rows.
  for (int64_t j = j0; j < j1;) {
    const int64_t n = std::min(j1 - j, rows_.contiguous_rows(b, h, j));
    score_piece(rows_.key_row(b, h, j), n, prepared, n_queries, scores + (j - j0), ld, scratch);
    j += n;
  }
}

void EvictionRowSource::score_piece(const std::byte* first_row, int64_t n, const float* prepared, int64_t n_queries,
                                    float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t d = key_dim(), row_bytes = rows_.key_row_bytes();
  if (rvq_order_) {
    float* tile = scratch.f32(static_cast<std::size_t>(n * d));
    // [stage1 | stage2 | bf16 norm] rows: centroid sums in the rotated basis, scaled by the norm.
    const quant::TurboQuantRvq& q = *rows_.key_codec().rvq_quantizer();
    const int64_t stream = static_cast<int64_t>(q.stream_bytes());
    const auto* first = reinterpret_cast<const uint8_t*>(first_row);
    attention::kernels::centroid_planes(first, first + stream, row_bytes, n, stream, q.bits(),
                                        q.stage1_codebook().centroids.data(), q.stage2_codebook().centroids.data(),
                                        tile);
    attention::kernels::score_rows(prepared, d, n_queries, tile, d, n, d, scores, ld);
    for (int64_t j = 0; j < n; ++j) {
      uint16_t norm_bits;
      std::memcpy(&norm_bits, first + j * row_bytes + 2 * stream, sizeof norm_bits);
      const float norm = base::bf16_to_f32(norm_bits);
      for (int64_t r = 0; r < n_queries; ++r) scores[r * ld + j] *= norm;
    }
    return;
  }
  if (rows_.key_codec().exact()) {
    attention::score_plain_tile(plain_head(first_row, rows_.dtype(), row_bytes, d), 0, 0, 0, n, prepared, n_queries,
                                scores, ld, scratch);
    return;
  }
  // Coded rows: decoded once per tile (codec_tiles.h); exact rows never get here.
  score_coded_tile({rows_.key_codec(), first_row, row_bytes, d}, 0, n, prepared, n_queries, scores, ld, scratch);
}

void EvictionRowSource::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                        int64_t n_queries, int64_t ld, float* acc,
                                        attention::TileScratch& scratch) const {
  const int64_t d = value_dim(), row_bytes = rows_.value_row_bytes();
  for (int64_t j = j0; j < j1;) {
    const int64_t n = std::min(j1 - j, rows_.contiguous_rows(b, h, j));
    const std::byte* first_row = rows_.value_row(b, h, j);
    const float* w = weights + (j - j0);
    if (rows_.value_codec().exact()) {
      // f16 values accumulate from the stored rows in registers (no f32 tile), as the host does.
      attention::accumulate_plain_tile(plain_head(first_row, rows_.dtype(), row_bytes, d), 0, 0, 0, n,
                                       {w, n_queries, ld}, acc, scratch, kPrefetchRows);
    } else {
      accumulate_coded_tile({rows_.value_codec(), first_row, row_bytes, d}, 0, n, w, n_queries, ld, acc, scratch);
    }
    j += n;
  }
}

}  // namespace veloxquant::eviction
