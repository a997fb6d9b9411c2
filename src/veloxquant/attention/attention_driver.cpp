#include "veloxquant/attention/attention_driver.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/tile_kernels.h"

namespace veloxquant::attention {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
// Decode: rows per split-K range (a range of fewer rows costs more in merging than it saves)
// and the most ranges per (batch, kv head).
constexpr int64_t kRowsPerSplit = 256;
constexpr int64_t kMaxSplits = 64;
// Below these sizes the driver's small steps run on the calling thread (see prepare_queries and
// merge_splits): query rows to prepare, floats of partial accumulators to merge.
constexpr int64_t kMinParallelQueryRows = 64;
constexpr int64_t kMinParallelMergeFloats = int64_t{1} << 16;

template <class T>
T* grown(std::vector<T>& buffer, std::size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

struct Geometry {
  int64_t group = 0, key_dim = 0, value_dim = 0, prepared_dim = 0;
  int n_segments = 0;
};

Geometry check_call(const AttentionCall& call, const RowSource* const* segments, int n_segments) {
  if (n_segments < 1 || n_segments > kMaxSegments) {
    throw base::InvalidArgument("attention driver: 1.." + std::to_string(kMaxSegments) + " segments, got " +
                                std::to_string(n_segments));
  }
  if (!call.queries || !call.out) throw base::InvalidArgument("attention driver: queries and out are required");
  if (call.batch < 1 || call.kv_heads < 1 || call.q_heads < 1 || call.n_queries < 1 ||
      call.q_heads % call.kv_heads != 0) {
    throw base::InvalidArgument("attention driver: batch " + std::to_string(call.batch) + ", query heads " +
                                std::to_string(call.q_heads) + ", kv heads " + std::to_string(call.kv_heads) +
                                ", queries " + std::to_string(call.n_queries) +
                                " (query heads must be a positive multiple of kv heads)");
  }
  if (call.window && *call.window < 1) {
    throw base::InvalidArgument("attention driver: window must be >= 1, got " + std::to_string(*call.window));
  }
  Geometry g;
  g.group = call.q_heads / call.kv_heads;
  g.n_segments = n_segments;
  for (int s = 0; s < n_segments; ++s) {
    const RowSource* src = segments[s];
    if (!src) throw base::InvalidArgument("attention driver: segment " + std::to_string(s) + " is null");
    if (s == 0) {
      g.key_dim = src->key_dim();
      g.value_dim = src->value_dim();
      g.prepared_dim = src->prepared_dim();
    } else if (src->key_dim() != g.key_dim || src->value_dim() != g.value_dim ||
               src->prepared_dim() != g.prepared_dim) {
      throw base::InvalidArgument("attention driver: segment " + std::to_string(s) + " has key/value dims " +
                                  std::to_string(src->key_dim()) + "/" + std::to_string(src->value_dim()) +
                                  ", segment 0 has " + std::to_string(g.key_dim) + "/" + std::to_string(g.value_dim));
    }
  }
  return g;
}

// The visible rows of one tile for one query position, as a row-index interval when the
// segment's positions are contiguous.
struct Visibility {
  const int32_t* positions;  // nullptr: row j at base + j
  int64_t base;
  std::optional<int64_t> window;
  bool visible(int64_t j, int64_t query_position) const {
    const int64_t p = positions ? positions[j] : base + j;
    return p <= query_position && (!window || query_position - p < *window);
  }
};

// Rows [lo, hi) of (segment, b, h) that some query with position in [q_first, q_last] can
// see: the causal and window limits cut whole tiles before anything is read.
void visible_range(const Visibility& vis, int64_t rows, int64_t q_first, int64_t q_last, int64_t& lo, int64_t& hi) {
  lo = 0;
  hi = rows;
  if (vis.positions) {
    // Ascending positions: binary search the first row past q_last and the first row inside
    // the window of q_first.
    hi = std::upper_bound(vis.positions, vis.positions + rows, q_last) - vis.positions;
    if (vis.window) lo = std::upper_bound(vis.positions, vis.positions + rows, q_first - *vis.window) - vis.positions;
  } else {
    hi = std::clamp<int64_t>(q_last - vis.base + 1, 0, rows);
    if (vis.window) lo = std::clamp<int64_t>(q_first - *vis.window + 1 - vis.base, 0, rows);
  }
  lo = std::min(lo, hi);
}

// One unit of work: (b, kv head h, queries [i0, i1)), rows [row_lo, row_hi) of the
// concatenated segments.
struct Unit {
  int64_t b, h, i0, i1, row_lo, row_hi;
};

struct UnitState {
  float* m;    // [rows]
  float* l;    // [rows]
  float* acc;  // [rows * value_dim]
};

// The scaled scores of the main pass, kept when the call wants row weights so that the weights
// are the same scores' softmax, without a second scoring pass. Segment s's entry for (b, kv
// head h), group head k, query i and row j is at
//   base[s] + ((b * kv_heads + h) * group * n_queries + k * n_queries + i) * row_stride[s] + j;
// rows no query could see keep -inf (weight 0).
struct ScoreLog {
  std::array<float*, kMaxSegments> base{};
  std::array<int64_t, kMaxSegments> row_stride{};
  bool enabled = false;
};

struct Scratch {
  TileScratch tile;
  std::vector<float> queries, scores, m, l, acc;
};

// The unit's queries in segment si's form, side by side (row r = group head r / nq, query
// i0 + r % nq). When the unit holds all of the call's queries (every decode step) those rows
// already lie side by side in `prepared` and are read in place (gathered == nullptr); otherwise
// they are gathered into `gathered`.
const float* unit_queries(const AttentionCall& call, const Geometry& g, const float* prepared, const Unit& u, int si,
                          float* gathered) {
  const int64_t nq = u.i1 - u.i0, rows = g.group * nq;
  const float* segment = prepared + si * call.batch * call.q_heads * call.n_queries * g.prepared_dim;
  if (gathered == nullptr) return segment + (u.b * call.q_heads + u.h * g.group) * call.n_queries * g.prepared_dim;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = u.h * g.group + r / nq, i = u.i0 + r % nq;
    std::copy_n(segment + ((u.b * call.q_heads + head) * call.n_queries + i) * g.prepared_dim, g.prepared_dim,
                gathered + r * g.prepared_dim);
  }
  return gathered;
}

// One tile's raw scores, [query row][kTileRows], for rows [j0, j0 + n) of a segment.
struct ScoredTile {
  float* scores;
  int64_t j0, n;
  bool all_visible;  // every query of the unit sees every row of the tile
};

// One query row's scores scaled, rows it cannot see set to -inf; returns their max.
float scale_and_mask(float* row, const ScoredTile& tile, const Visibility& vis, float scale, int64_t query_position) {
  if (tile.all_visible) return kernels::scale_and_max(row, tile.n, scale);
  float tile_max = kNegInf;
  for (int64_t jj = 0; jj < tile.n; ++jj) {
    row[jj] = vis.visible(tile.j0 + jj, query_position) ? row[jj] * scale : kNegInf;
    tile_max = std::max(tile_max, row[jj]);
  }
  return tile_max;
}

// Folds a scored tile into the unit's online softmax: scores scaled and masked (and logged when
// the call keeps them for row weights), (m, l) updated and acc rescaled to the new max. The
// scores become the tile's unnormalised weights (0 where a query row sees no row of the tile).
// Returns whether any query row saw any row, i.e. whether the values need accumulating.
bool fold_tile(const AttentionCall& call, const Geometry& g, const Unit& u, const Visibility& vis,
               const ScoredTile& tile, const ScoreLog& log, int si, UnitState st) {
  const int64_t nq = u.i1 - u.i0, rows = g.group * nq;
  bool any = false;
  for (int64_t r = 0; r < rows; ++r) {
    float* sr = tile.scores + r * kTileRows;
    const float tile_max = scale_and_mask(sr, tile, vis, call.scale, call.first_position + u.i0 + r % nq);
    if (log.base[si] != nullptr) {
      const int64_t k = r / nq, i = u.i0 + r % nq;
      std::copy_n(sr, tile.n,
                  log.base[si] +
                      (((u.b * call.kv_heads + u.h) * g.group + k) * call.n_queries + i) * log.row_stride[si] +
                      tile.j0);
    }
    if (tile_max == kNegInf) {
      std::fill(sr, sr + tile.n, 0.0f);  // weight 0 for a row of this tile no query of r sees
      continue;
    }
    any = true;
    const float m_new = std::max(st.m[r], tile_max);
    if (st.m[r] != kNegInf && m_new != st.m[r]) {
      const float correction = std::exp(st.m[r] - m_new);
      st.l[r] *= correction;
      float* a = st.acc + r * g.value_dim;
      for (int64_t e = 0; e < g.value_dim; ++e) a[e] *= correction;
    }
    st.m[r] = m_new;
    st.l[r] += lm::kernels::simd::exp_shifted_sum(sr, tile.n, m_new);
  }
  return any;
}

// Rows [from, to) of a segment a unit owns in the score log, of which it scores [lo, hi).
struct OwnedRows {
  int64_t from, lo, hi, to;
};

// The unit's log entries of rows it owns but scores none of its queries can see: -inf (weight 0).
// Each unit marks its own rows, so the log is never cleared as a whole (at H2O's 2,580 rows that
// was a 93 KB fill per layer and decode step, the scored rows then written again).
void mark_unscored(const AttentionCall& call, const Geometry& g, const Unit& u, const ScoreLog& log, int si,
                   OwnedRows owned) {
  if (owned.from == owned.lo && owned.hi == owned.to) return;  // every owned row scored: a decode step
  const int64_t nq = u.i1 - u.i0, rows = g.group * nq;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t k = r / nq, i = u.i0 + r % nq;
    float* row = log.base[si] + (((u.b * call.kv_heads + u.h) * g.group + k) * call.n_queries + i) * log.row_stride[si];
    std::fill(row + owned.from, row + owned.lo, kNegInf);
    std::fill(row + owned.hi, row + owned.to, kNegInf);
  }
}

// Attends the unit's prepared queries over its rows; leaves the unnormalised (m, l, acc).
void attend_unit(const AttentionCall& call, const RowSource* const* segments, const Geometry& g, const float* prepared,
                 const Unit& u, UnitState st, const ScoreLog& log, Scratch& scratch) {
  const int64_t nq = u.i1 - u.i0, rows = g.group * nq;
  std::fill(st.m, st.m + rows, kNegInf);
  std::fill(st.l, st.l + rows, 0.0f);
  std::fill(st.acc, st.acc + rows * g.value_dim, 0.0f);
  const bool in_place = u.i0 == 0 && u.i1 == call.n_queries;
  float* gathered = in_place ? nullptr : grown(scratch.queries, static_cast<std::size_t>(rows * g.prepared_dim));
  float* s = grown(scratch.scores, static_cast<std::size_t>(rows * kTileRows));
  const int64_t q_first = call.first_position + u.i0, q_last = call.first_position + u.i1 - 1;
  int64_t seg_start = 0;  // index of the segment's first row in the concatenation
  for (int si = 0; si < g.n_segments; ++si) {
    const RowSource& src = *segments[si];
    const int64_t seg_rows = src.rows(u.b, u.h);
    const int64_t from = std::max<int64_t>(u.row_lo - seg_start, 0), to = std::min(u.row_hi - seg_start, seg_rows);
    seg_start += seg_rows;
    if (from >= to) continue;
    const float* q = unit_queries(call, g, prepared, u, si, gathered);
    const Visibility vis{src.positions(u.b, u.h), src.position_base(), call.window};
    int64_t lo = 0, hi = 0;
    visible_range(vis, seg_rows, q_first, q_last, lo, hi);
    lo = std::max(lo, from);
    hi = std::max(lo, std::min(hi, to));
    if (log.base[si] != nullptr) mark_unscored(call, g, u, log, si, {from, lo, hi, to});
    // Rows every query of the unit sees (the window's limit from the last query, the causal
    // limit from the first): a tile inside them needs no per-row test.
    int64_t lo_all = 0, hi_all = 0;
    visible_range(vis, seg_rows, q_last, q_first, lo_all, hi_all);
    for (int64_t j0 = lo; j0 < hi; j0 += kTileRows) {
      const int64_t j1 = std::min(j0 + kTileRows, hi);
      if (j1 < hi) src.prefetch_tile(u.b, u.h, j1, std::min(j1 + kTileRows, hi));
      src.score_tile(u.b, u.h, j0, j1, q, rows, s, kTileRows, scratch.tile);
      const ScoredTile tile{s, j0, j1 - j0, lo_all <= j0 && j1 <= hi_all};
      if (fold_tile(call, g, u, vis, tile, log, si, st)) {
        src.accumulate_tile(u.b, u.h, j0, j1, s, rows, kTileRows, st.acc, scratch.tile);
      }
    }
  }
}

// Total rows of (b, h) over all segments.
int64_t total_rows(const RowSource* const* segments, int n_segments, int64_t b, int64_t h) {
  int64_t n = 0;
  for (int s = 0; s < n_segments; ++s) n += segments[s]->rows(b, h);
  return n;
}

// Per-call buffers of the calling thread: grow-only, so a decode step allocates nothing once
// the context's shape has been seen.
struct CallBuffers {
  std::vector<float> prepared, part_m, part_l, part_acc, final_m, final_l, logits;
};

// The queries' final softmax state, [(b * q_heads + head) * n_queries + i].
struct FinalState {
  const float* m;
  const float* l;
};

// Row weights of segment si for (b, kv head h) from its logged scores: each row's softmax weight
// with the query's final (m, l), averaged over the group heads and summed over queries (exp in
// place, then one axpy per query row) into out [n rows].
void add_logged_weights(const AttentionCall& call, const Geometry& g, const ScoreLog& log, int si, int64_t bh,
                        FinalState final, float* out, int64_t n) {
  const int64_t b = bh / call.kv_heads, h = bh % call.kv_heads, nq = call.n_queries;
  for (int64_t k = 0; k < g.group; ++k) {
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t at = (b * call.q_heads + h * g.group + k) * nq + i;
      if (final.l[at] <= 0.0f) continue;
      float* scores = log.base[si] + ((bh * g.group + k) * nq + i) * log.row_stride[si];
      lm::kernels::simd::exp_shifted_sum(scores, n, final.m[at]);
      lm::kernels::simd::axpy_f32(1.0f / (final.l[at] * static_cast<float>(g.group)), scores, out, n);
    }
  }
}

// Row weights from the logged scores (add_logged_weights), every segment that asks for them.
void write_logged_row_weights(const AttentionCall& call, const RowSource* const* segments, const Geometry& g,
                              const ScoreLog& log, FinalState final, base::ThreadPool* pool) {
  const int64_t heads = call.batch * call.kv_heads;
  const auto body = [&](int64_t begin, int64_t end) {
    for (int64_t bh = begin; bh < end; ++bh) {
      for (int si = 0; si < g.n_segments; ++si) {
        float* out = call.row_weights[static_cast<std::size_t>(si)];
        if (!out) continue;
        const int64_t n = segments[si]->rows(bh / call.kv_heads, bh % call.kv_heads);
        out += bh * call.row_weight_stride[static_cast<std::size_t>(si)];
        std::fill(out, out + n, 0.0f);
        add_logged_weights(call, g, log, si, bh, final, out, n);
      }
    }
  };
  if (pool) {
    pool->parallel_for(heads, body, 1);
  } else {
    body(0, heads);
  }
}

// Row weights of one segment for (b, kv head h), recomputed from score_tile: for each row, the
// softmax weight with the query's final (m, l), averaged over the group's query heads and summed
// over queries, into out [rows]. q: every query of the group's heads, row k * nq + i being (head
// h * group + k, query i), where `prepared` already holds it.
void add_scored_weights(const AttentionCall& call, const Geometry& g, const RowSource& src, const float* q, int64_t bh,
                        FinalState final, float* out, Scratch& scratch) {
  const int64_t b = bh / call.kv_heads, h = bh % call.kv_heads, nq = call.n_queries, rows = g.group * nq;
  float* s = grown(scratch.scores, static_cast<std::size_t>(rows * kTileRows));
  const int64_t n = src.rows(b, h);
  const Visibility vis{src.positions(b, h), src.position_base(), call.window};
  for (int64_t j0 = 0; j0 < n; j0 += kTileRows) {
    const int64_t j1 = std::min(j0 + kTileRows, n);
    src.score_tile(b, h, j0, j1, q, rows, s, kTileRows, scratch.tile);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t head = h * g.group + r / nq, i = r % nq;
      const int64_t at = (b * call.q_heads + head) * nq + i;
      if (final.l[at] <= 0.0f) continue;
      const float inv = 1.0f / (final.l[at] * static_cast<float>(g.group));
      for (int64_t j = j0; j < j1; ++j) {
        if (vis.visible(j, call.first_position + i)) {
          out[j] += std::exp(s[r * kTileRows + (j - j0)] * call.scale - final.m[at]) * inv;
        }
      }
    }
  }
}

// Row weights recomputed from score_tile (add_scored_weights), every segment that asks for them.
void write_row_weights(const AttentionCall& call, const RowSource* const* segments, const Geometry& g,
                       const float* prepared, FinalState final, base::ThreadPool* pool) {
  const int64_t heads = call.batch * call.kv_heads, nq = call.n_queries;
  const auto body = [&](int64_t begin, int64_t end) {
    thread_local Scratch scratch;
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / call.kv_heads, h = bh % call.kv_heads;
      const int64_t segment_stride = call.batch * call.q_heads * nq * g.prepared_dim;
      for (int si = 0; si < g.n_segments; ++si) {
        float* out = call.row_weights[static_cast<std::size_t>(si)];
        if (!out) continue;
        const float* q = prepared + si * segment_stride + (b * call.q_heads + h * g.group) * nq * g.prepared_dim;
        out += bh * call.row_weight_stride[static_cast<std::size_t>(si)];
        std::fill(out, out + segments[si]->rows(b, h), 0.0f);
        add_scored_weights(call, g, *segments[si], q, bh, final, out, scratch);
      }
    }
  };
  if (pool) {
    pool->parallel_for(heads, body, 1);
  } else {
    body(0, heads);
  }
}

// Every query prepared once per call and segment (a rotation into the segment's basis, a
// permutation into its code order), shared by every unit: [segment][query row][prepared].
float* prepare_queries(const AttentionCall& call, const RowSource* const* segments, int n_segments, const Geometry& g,
                       CallBuffers& buffers, base::ThreadPool* pool) {
  const int64_t n_query_rows = call.batch * call.q_heads * call.n_queries;
  float* prepared = grown(buffers.prepared, static_cast<std::size_t>(n_segments * n_query_rows * g.prepared_dim));
  const auto prepare = [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t seg = k / n_query_rows, row = k % n_query_rows;
      segments[seg]->prepare_query(call.queries + row * g.key_dim, prepared + k * g.prepared_dim);
    }
  };
  // A decode step's few query rows are prepared on the calling thread: a pool dispatch (a
  // hand-off, then the workers' spin or yield) costs more than a copy, a permutation or a 64 x 64
  // rotation of 9-18 rows. With the merge below also kept off the pool, kivi 4-bit decoded at
  // 0.98 / 0.94x native at 4k against 0.91 / 0.88x (two alternating rounds, same text).
  if (pool && n_query_rows * n_segments >= kMinParallelQueryRows) {
    pool->parallel_for(n_query_rows * n_segments, prepare, 8);
  } else {
    prepare(0, n_query_rows * n_segments);
  }
  return prepared;
}

// How a call is cut into units: query blocks x (b, kv head) x split-K row ranges.
struct Plan {
  int64_t kv_heads = 0, heads = 0, n_queries = 0;  // heads: batch * kv_heads
  int64_t max_rows = 0, blocks = 0, splits = 1, rows_per_split = 0;
  int64_t n_units = 0, unit_rows = 0;  // unit_rows: query rows of a full unit (group x block)

  Unit unit_at(int64_t index) const {
    // Causal blocks late in the sequence see more rows: zig-zag order (first, last, second,
    // ...) so a contiguous share of units mixes cheap and expensive ones.
    const int64_t split = index % splits, rest = index / splits;
    const int64_t head = rest % heads, k = rest / heads;
    const int64_t block = k % 2 == 0 ? k / 2 : blocks - 1 - k / 2;
    Unit u{};
    u.b = head / kv_heads;
    u.h = head % kv_heads;
    u.i0 = block * kQueryBlock;
    u.i1 = std::min(n_queries, u.i0 + kQueryBlock);
    u.row_lo = std::min(max_rows, split * rows_per_split);
    u.row_hi = std::min(max_rows, u.row_lo + rows_per_split);
    if (splits == 1) u.row_hi = std::numeric_limits<int64_t>::max();
    return u;
  }
};

Plan plan_units(const AttentionCall& call, const RowSource* const* segments, int n_segments, const Geometry& g) {
  Plan p;
  p.kv_heads = call.kv_heads;
  p.heads = call.batch * call.kv_heads;
  p.n_queries = call.n_queries;
  for (int64_t bh = 0; bh < p.heads; ++bh) {
    p.max_rows = std::max(p.max_rows, total_rows(segments, n_segments, bh / call.kv_heads, bh % call.kv_heads));
  }
  p.blocks = (call.n_queries + kQueryBlock - 1) / kQueryBlock;
  // Split the rows only when there are too few query blocks to keep threads busy.
  p.splits = p.blocks > 1 ? 1 : std::clamp<int64_t>((p.max_rows + kRowsPerSplit - 1) / kRowsPerSplit, 1, kMaxSplits);
  // Whole tiles per split: every tile then starts on a multiple of kTileRows, so a source's
  // row groups (KIVI's key groups of 32 rows, a fold of the query each) are never cut in two.
  p.rows_per_split =
      std::max<int64_t>(1, ((p.max_rows + p.splits - 1) / p.splits + kTileRows - 1) / kTileRows * kTileRows);
  p.n_units = p.blocks * p.heads * p.splits;
  p.unit_rows = g.group * std::min(call.n_queries, kQueryBlock);
  return p;
}

// The log of the main pass's scores when the call wants row weights and they fit
// call.max_logged_scores (else disabled: the weights are recomputed from score_tile).
ScoreLog make_score_log(const AttentionCall& call, const RowSource* const* segments, int n_segments,
                        CallBuffers& buffers) {
  ScoreLog log;
  const int64_t heads = call.batch * call.kv_heads, n_query_rows = call.batch * call.q_heads * call.n_queries;
  std::array<int64_t, kMaxSegments> seg_rows{};
  int64_t total = 0;
  for (int si = 0; si < n_segments; ++si) {
    if (!call.row_weights[static_cast<std::size_t>(si)]) continue;
    for (int64_t bh = 0; bh < heads; ++bh) {
      seg_rows[static_cast<std::size_t>(si)] =
          std::max(seg_rows[static_cast<std::size_t>(si)], segments[si]->rows(bh / call.kv_heads, bh % call.kv_heads));
    }
    total += n_query_rows * seg_rows[static_cast<std::size_t>(si)];
  }
  if (total > call.max_logged_scores) return log;
  // Not cleared: every entry add_logged_weights reads is a row some unit owns, which writes its
  // score or -inf (mark_unscored).
  float* at = grown(buffers.logits, static_cast<std::size_t>(std::max<int64_t>(total, 1)));
  for (int si = 0; si < n_segments; ++si) {
    if (!call.row_weights[static_cast<std::size_t>(si)]) continue;
    log.base[static_cast<std::size_t>(si)] = at;
    log.row_stride[static_cast<std::size_t>(si)] = seg_rows[static_cast<std::size_t>(si)];
    at += n_query_rows * seg_rows[static_cast<std::size_t>(si)];
  }
  log.enabled = true;
  return log;
}

// Normalises one finished query row of a unit into the call's output (and keeps its final
// (m, l) when the call wants row weights).
struct Finisher {
  const AttentionCall& call;
  const Geometry& g;
  const RowSource& first;
  float* final_m;  // nullptr: no row weights
  float* final_l;

  void operator()(const Unit& u, int64_t r, const float* acc, float m, float l) const {
    const int64_t nq = u.i1 - u.i0;
    const int64_t head = u.h * g.group + r / nq, i = u.i0 + r % nq;
    const int64_t at = (u.b * call.q_heads + head) * call.n_queries + i;
    float* o = call.out + at * g.value_dim;
    if (final_m) {
      final_m[at] = m;
      final_l[at] = l;
    }
    if (l <= 0.0f) {  // a query that saw no row
      std::fill(o, o + g.value_dim, 0.0f);
      return;
    }
    const float inv = 1.0f / l;
    for (int64_t e = 0; e < g.value_dim; ++e) o[e] = acc[e] * inv;
    first.finish_row(o);
  }
};

// Split-K partial states, [unit][query row] (acc: [unit][query row][value_dim]).
struct SplitParts {
  float* m;
  float* l;
  float* acc;
};

// Merges query row r of the split row ranges of kv head `head`: with M = max m_s,
// acc = sum_s acc_s e^(m_s - M), l = sum_s l_s e^(m_s - M), written into the first range's
// state, then finished.
void merge_split_row(const Plan& plan, const SplitParts& parts, const Finisher& finish, int64_t head, int64_t r) {
  const Unit u0 = plan.unit_at(head * plan.splits);
  const int64_t value_dim = finish.g.value_dim, unit_rows = plan.unit_rows;
  float big = kNegInf;
  for (int64_t sp = 0; sp < plan.splits; ++sp) big = std::max(big, parts.m[(head * plan.splits + sp) * unit_rows + r]);
  float* acc0 = parts.acc + (head * plan.splits * unit_rows + r) * value_dim;
  if (big == kNegInf) {
    finish(u0, r, acc0, big, 0.0f);
    return;
  }
  float total = 0.0f;
  for (int64_t sp = 0; sp < plan.splits; ++sp) {
    const int64_t unit = head * plan.splits + sp;
    const float mu = parts.m[unit * unit_rows + r];
    const float w = mu == kNegInf ? 0.0f : std::exp(mu - big);
    total += w * parts.l[unit * unit_rows + r];
    const float* a = parts.acc + (unit * unit_rows + r) * value_dim;
    if (sp == 0) {
      for (int64_t e = 0; e < value_dim; ++e) acc0[e] = a[e] * w;
    } else if (w != 0.0f) {
      lm::kernels::simd::axpy_f32(w, a, acc0, value_dim);
    }
  }
  finish(u0, r, acc0, big, total);
}

void merge_splits(const Plan& plan, const SplitParts& parts, const Finisher& finish, base::ThreadPool* pool) {
  const auto merge = [&](int64_t begin, int64_t end) {
    for (int64_t head = begin; head < end; ++head) {
      const Unit u0 = plan.unit_at(head * plan.splits);
      const int64_t rows = finish.g.group * (u0.i1 - u0.i0);
      for (int64_t r = 0; r < rows; ++r) merge_split_row(plan, parts, finish, head, r);
    }
  };
  // A decode step's merge (a few query rows per head, a value row per split) is cheaper than a
  // pool dispatch: run it on the calling thread; prefill never splits.
  const int64_t merge_floats = plan.heads * plan.splits * plan.unit_rows * finish.g.value_dim;
  if (pool && plan.heads > 1 && merge_floats >= kMinParallelMergeFloats) {
    pool->parallel_for(plan.heads, merge, 1);
  } else {
    merge(0, plan.heads);
  }
}

}  // namespace

void attend(const AttentionCall& call, const RowSource* const* segments, int n_segments, base::ThreadPool* pool) {
  const Geometry g = check_call(call, segments, n_segments);
  thread_local CallBuffers buffers;
  const float* prepared = prepare_queries(call, segments, n_segments, g, buffers, pool);
  const Plan plan = plan_units(call, segments, n_segments, g);
  SplitParts parts{nullptr, nullptr, nullptr};
  if (plan.splits > 1) {
    const std::size_t need = static_cast<std::size_t>(plan.n_units * plan.unit_rows);
    parts = {grown(buffers.part_m, need), grown(buffers.part_l, need),
             grown(buffers.part_acc, need * static_cast<std::size_t>(g.value_dim))};
  }
  const bool want_weights = std::any_of(call.row_weights.begin(), call.row_weights.end(), [](float* p) { return p; });
  const int64_t n_query_rows = call.batch * call.q_heads * call.n_queries;
  Finisher finish{call, g, *segments[0], nullptr, nullptr};
  ScoreLog log;
  if (want_weights) {
    finish.final_m = grown(buffers.final_m, static_cast<std::size_t>(n_query_rows));
    finish.final_l = grown(buffers.final_l, static_cast<std::size_t>(n_query_rows));
    log = make_score_log(call, segments, n_segments, buffers);
  }
  const auto body = [&](int64_t begin, int64_t end) {
    thread_local Scratch scratch;
    for (int64_t index = begin; index < end; ++index) {
      const Unit u = plan.unit_at(index);
      const int64_t rows = g.group * (u.i1 - u.i0);
      if (plan.splits > 1) {
        const int64_t at = index * plan.unit_rows;
        attend_unit(call, segments, g, prepared, u, {parts.m + at, parts.l + at, parts.acc + at * g.value_dim}, log,
                    scratch);
        continue;
      }
      UnitState st{grown(scratch.m, static_cast<std::size_t>(rows)), grown(scratch.l, static_cast<std::size_t>(rows)),
                   grown(scratch.acc, static_cast<std::size_t>(rows * g.value_dim))};
      attend_unit(call, segments, g, prepared, u, st, log, scratch);
      for (int64_t r = 0; r < rows; ++r) finish(u, r, st.acc + r * g.value_dim, st.m[r], st.l[r]);
    }
  };
  if (pool) {
    pool->parallel_for(plan.n_units, body, 1);
  } else {
    body(0, plan.n_units);
  }
  if (plan.splits > 1) merge_splits(plan, parts, finish, pool);
  if (want_weights) {
    if (log.enabled) {
      write_logged_row_weights(call, segments, g, log, {finish.final_m, finish.final_l}, pool);
    } else {
      write_row_weights(call, segments, g, prepared, {finish.final_m, finish.final_l}, pool);
    }
  }
}

namespace {

// attend_reference's walk: one query row at a time, in double, through single-row tiles.
class ReferenceAttention {
 public:
  ReferenceAttention(const AttentionCall& call, const RowSource* const* segments, int n_segments)
      : call_(call),
        segments_(segments),
        n_segments_(n_segments),
        g_(check_call(call, segments, n_segments)),
        prepared_(static_cast<std::size_t>(g_.prepared_dim)),
        acc_(static_cast<std::size_t>(g_.value_dim)),
        value_acc_(static_cast<std::size_t>(g_.value_dim)) {}

  void run() {
    clear_row_weights();
    for (int64_t b = 0; b < call_.batch; ++b) {
      for (int64_t head = 0; head < call_.q_heads; ++head) {
        for (int64_t i = 0; i < call_.n_queries; ++i) query(b, head, i);
      }
    }
  }

 private:
  void clear_row_weights() const {
    for (int s = 0; s < n_segments_; ++s) {
      float* rw = call_.row_weights[static_cast<std::size_t>(s)];
      if (!rw) continue;
      const int64_t stride = call_.row_weight_stride[static_cast<std::size_t>(s)];
      for (int64_t bh = 0; bh < call_.batch * call_.kv_heads; ++bh) {
        std::fill(rw + bh * stride, rw + bh * stride + segments_[s]->rows(bh / call_.kv_heads, bh % call_.kv_heads),
                  0.0f);
      }
    }
  }

  // Scores of every row query (b, head, i) sees, segment by segment, scaled, in double.
  void score_visible_rows(int64_t b, int64_t head, int64_t i) {
    const int64_t h = head / g_.group, at = (b * call_.q_heads + head) * call_.n_queries + i;
    const int64_t qpos = call_.first_position + i;
    scores_.clear();
    where_.clear();
    float score = 0.0f;
    for (int s = 0; s < n_segments_; ++s) {
      const RowSource& src = *segments_[s];
      const Visibility vis{src.positions(b, h), src.position_base(), call_.window};
      src.prepare_query(call_.queries + at * g_.key_dim, prepared_.data());
      for (int64_t j = 0; j < src.rows(b, h); ++j) {
        if (!vis.visible(j, qpos)) continue;
        src.score_tile(b, h, j, j + 1, prepared_.data(), 1, &score, 1, tile_);
        scores_.push_back(static_cast<double>(score) * call_.scale);
        where_.emplace_back(s, j);
      }
    }
  }

  void query(int64_t b, int64_t head, int64_t i) {
    const int64_t h = head / g_.group, at = (b * call_.q_heads + head) * call_.n_queries + i;
    score_visible_rows(b, head, i);
    float* o = call_.out + at * g_.value_dim;
    if (scores_.empty()) {
      std::fill(o, o + g_.value_dim, 0.0f);
      return;
    }
    const double big = *std::max_element(scores_.begin(), scores_.end());
    double total = 0.0;
    for (double& x : scores_) total += (x = std::exp(x - big));
    std::fill(acc_.begin(), acc_.end(), 0.0);
    for (std::size_t k = 0; k < scores_.size(); ++k) {
      const auto [s, j] = where_[k];
      const float weight = static_cast<float>(scores_[k] / total);
      std::fill(value_acc_.begin(), value_acc_.end(), 0.0f);
      segments_[s]->accumulate_tile(b, h, j, j + 1, &weight, 1, 1, value_acc_.data(), tile_);
      for (int64_t e = 0; e < g_.value_dim; ++e) {
        acc_[static_cast<std::size_t>(e)] += value_acc_[static_cast<std::size_t>(e)];
      }
      if (float* rw = call_.row_weights[static_cast<std::size_t>(s)]) {
        rw[(b * call_.kv_heads + h) * call_.row_weight_stride[static_cast<std::size_t>(s)] + j] +=
            weight / static_cast<float>(g_.group);
      }
    }
    for (int64_t e = 0; e < g_.value_dim; ++e) o[e] = static_cast<float>(acc_[static_cast<std::size_t>(e)]);
    segments_[0]->finish_row(o);
  }

  const AttentionCall& call_;
  const RowSource* const* segments_;
  int n_segments_;
  Geometry g_;
  TileScratch tile_;
  std::vector<float> prepared_;
  std::vector<double> acc_;
  std::vector<float> value_acc_;
  std::vector<double> scores_;
  std::vector<std::pair<int, int64_t>> where_;
};

}  // namespace

void attend_reference(const AttentionCall& call, const RowSource* const* segments, int n_segments) {
  ReferenceAttention(call, segments, n_segments).run();
}

void RowSource::prepare_query(const float* query, float* prepared) const { std::copy_n(query, key_dim(), prepared); }

}  // namespace veloxquant::attention
