#include "lm/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "lm/kernels/attention_tiles.h"
#include "lm/kernels/elementwise.h"
#include "lm/kernels/kv_block_simd.h"
#include "lm/kernels/simd_dot.h"

namespace lm::kernels {

namespace {

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

struct Geometry {
  int64_t batch, h_q, h_kv, n, t, d;
};

// Where attention reads keys or values: a float tensor [B, H, T, D] (any strides), or a
// block-type buffer [B, H, capacity, row bytes] (BlockRows).
struct RowSource {
  const Tensor& t;
  bool blocks = false;
  KVCacheType type = KVCacheType::F32;
};

struct Geometry;
void check_mask(const AttentionMask& mask, const Geometry& g);

Geometry check_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4) {
    throw base::InvalidArgument("attention expects 4-D queries/keys/values, got " + shape_text(q.shape()) + ", " +
                                shape_text(k.shape()) + ", " + shape_text(v.shape()));
  }
  if (q.dtype() != DType::F32)
    throw base::InvalidArgument("attention queries must be f32, got " + std::string(dtype_name(q.dtype())));
  for (const Tensor* kv : {&k, &v}) {
    const DType dt = kv->dtype();
    if (dt != DType::F32 && dt != DType::F16 && dt != DType::BF16) {
      throw base::InvalidArgument("attention keys/values must be f32, f16 or bf16, got " + std::string(dtype_name(dt)));
    }
  }
  Geometry g{q.dim(0), q.dim(1), k.dim(1), q.dim(2), k.dim(2), q.dim(3)};
  if (k.shape() != v.shape() || k.dim(0) != g.batch || k.dim(3) != g.d) {
    throw base::InvalidArgument("attention shapes disagree: queries " + shape_text(q.shape()) + ", keys " +
                                shape_text(k.shape()) + ", values " + shape_text(v.shape()));
  }
  if (g.h_kv <= 0 || g.h_q % g.h_kv != 0) {
    throw base::InvalidArgument("attention: query heads " + std::to_string(g.h_q) + " not a multiple of kv heads " +
                                std::to_string(g.h_kv));
  }
  check_mask(mask, g);
  return g;
}

// The query count against the key count, and an explicit mask's shape.
void check_mask(const AttentionMask& mask, const Geometry& g) {
  if (g.n > g.t && mask.kind != AttentionMask::Kind::kExplicit) {
    throw base::InvalidArgument("attention: " + std::to_string(g.n) + " queries but only " + std::to_string(g.t) +
                                " keys");
  }
  if (mask.kind == AttentionMask::Kind::kExplicit) {
    const Tensor& m = mask.explicit_mask;
    if (!m.defined() || m.ndim() != 4 || m.dtype() != DType::U8 || (m.dim(0) != 1 && m.dim(0) != g.batch) ||
        m.dim(2) != g.n || m.dim(3) != g.t) {
      throw base::InvalidArgument(
          "attention: explicit mask " + (m.defined() ? shape_text(m.shape()) : std::string("(undefined)")) +
          " does not match [B, 1, " + std::to_string(g.n) + ", " + std::to_string(g.t) + "] u8");
    }
  }
}

void check_softcap(float softcap) {
  if (!(softcap >= 0.0f) || !std::isfinite(softcap)) {
    throw base::InvalidArgument("attention: logit soft-cap must be a finite number >= 0 (0 = none), got " +
                                std::to_string(softcap));
  }
}

// ---- The fast path ---------------------------------------------------------------------
//
// Work unit = (batch, kv head, block of up to 16 consecutive queries, range of keys). All
// query heads of the GQA group and all queries of the block walk the unit's keys together,
// one 64-key tile at a time: the tile's keys and values are widened to f32 once and reused
// by every row, and softmax is online (running max m, running sum l, accumulator rescaled
// when m grows), so nothing of size T is materialised per row. Prefill has many query blocks
// and gives each unit all keys; decode (a handful of queries) splits the keys into ranges
// instead ("split-K", as flash-decoding does) so long contexts still spread over threads,
// and the ranges' (m, l, acc) are merged at the end.

constexpr int64_t kQueryBlock = 16;
constexpr int64_t kKeyTile = 64;
constexpr int64_t kKeysPerSplit = 256;  // decode: keys per unit
constexpr int64_t kMaxSplits = 64;
// From this many rows per tile (a prefill block) a transposed key tile (lane-parallel scores)
// pays for the transpose; below it (decode) tiles::score_rows reads the key rows as they are.
constexpr int64_t kTransposeFromRows = 8;
// Decode over f16 rows in place prefetches keys and values this many rows ahead (see there).
constexpr int64_t kPrefetchRows = tiles::kDecodePrefetchRows;

// Rows [j0, j1) of head (b, h) of a [B, H, T, D] tensor, widened to f32 into dst.
void load_rows_f32(const RowSource& src, int64_t b, int64_t h, int64_t j0, int64_t j1, int64_t d, float* dst) {
  const Tensor& t = src.t;
  const auto& s = t.strides();
  if (src.blocks) {
    simd::dequantize_kv_rows(src.type, t.raw_data() + b * s[0] + h * s[1] + j0 * s[2], s[2], j1 - j0, d, dst);
    return;
  }
  const std::size_t es = t.element_size();
  const std::byte* base_ptr = t.raw_data();
  if (s[3] == 1 && s[2] == d && t.dtype() != DType::F32) {
    // Rows of a head lie back to back (a cache's [B, H, T, D] buffer): one conversion call
    // for the whole tile instead of one dispatch per row.
    const auto* first =
        reinterpret_cast<const uint16_t*>(base_ptr + (b * s[0] + h * s[1] + j0 * s[2]) * static_cast<int64_t>(es));
    if (t.dtype() == DType::F16) {
      simd::f16_to_f32(first, dst, (j1 - j0) * d);
    } else {
      simd::bf16_to_f32(first, dst, (j1 - j0) * d);
    }
    return;
  }
  for (int64_t j = j0; j < j1; ++j, dst += d) {
    const std::byte* row = base_ptr + (b * s[0] + h * s[1] + j * s[2]) * static_cast<int64_t>(es);
    if (s[3] == 1 && t.dtype() == DType::F16) {
      simd::f16_to_f32(reinterpret_cast<const uint16_t*>(row), dst, d);
    } else if (s[3] == 1 && t.dtype() == DType::BF16) {
      simd::bf16_to_f32(reinterpret_cast<const uint16_t*>(row), dst, d);
    } else if (s[3] == 1) {
      std::copy_n(reinterpret_cast<const float*>(row), d, dst);
    } else {
      for (int64_t e = 0; e < d; ++e) dst[e] = load_as_f32(row + e * s[3] * static_cast<int64_t>(es), t.dtype());
    }
  }
}

float* sized(std::vector<float>& buffer, std::size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

struct Unit {
  int64_t b, kv_head, i0, i1, j_lo, j_hi;
};

// How scores become logits: the mask (with the causal window) and the scale and soft-cap
// applied before the softmax. One struct so the kernels below take it as one argument.
struct ScoreRule {
  const AttentionMask& mask;
  std::optional<int64_t> window;
  float scale;
  float softcap;
};

// The mask of one unit, resolved once: causal (with its window) or an explicit [.., n, t] u8
// mask of the unit's batch (mbase), or neither.
struct UnitMask {
  bool causal = false;
  std::optional<int64_t> window;
  const uint8_t* mbase = nullptr;
  int64_t ms2 = 0, ms3 = 0;

  // Whether query i (sequence position pos) sees key j.
  bool visible(int64_t i, int64_t pos, int64_t j) const {
    if (causal) return j <= pos && (!window || pos - j < *window);
    if (mbase) return mbase[i * ms2 + j * ms3] != 0;
    return true;
  }
};

// Online-softmax state of a unit's rows (row r = group head r / nq, query i0 + r % nq):
// m[r], l[r], acc[r * d ..]. Returned unnormalised so split ranges can be merged.
void attend_unit(const float* qdata, const RowSource& k, const RowSource& v, const Geometry& g, const ScoreRule& rule,
                 const Unit& u, float* m, float* l, float* acc) {
  const AttentionMask& mask = rule.mask;
  const std::optional<int64_t> window = rule.window;
  const float scale = rule.scale, softcap = rule.softcap;
  const int64_t group = g.h_q / g.h_kv, nq = u.i1 - u.i0, rows = group * nq, d = g.d;
  const bool transpose = rows >= kTransposeFromRows;
  thread_local std::vector<float> krows, kt, vt, s;
  krows.resize(static_cast<std::size_t>(kKeyTile * d));
  kt.resize(krows.size());
  vt.resize(krows.size());
  s.resize(static_cast<std::size_t>(group * kQueryBlock * kKeyTile));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::fill(m, m + rows, neg_inf);
  std::fill(l, l + rows, 0.0f);
  std::fill(acc, acc + rows * d, 0.0f);

  const bool causal = mask.kind == AttentionMask::Kind::kCausal;
  UnitMask unit_mask;
  unit_mask.causal = causal;
  unit_mask.window = window;
  if (mask.kind == AttentionMask::Kind::kExplicit) {
    const Tensor& mt = mask.explicit_mask;
    unit_mask.mbase = mt.data<uint8_t>() + (mt.dim(0) == 1 ? 0 : u.b * mt.strides()[0]);
    unit_mask.ms2 = mt.strides()[2];
    unit_mask.ms3 = mt.strides()[3];
  }
  // Keys no query of the unit can see are never loaded.
  int64_t j_begin = u.j_lo, j_end = u.j_hi;
  if (causal) {
    j_end = std::min(j_end, g.t - g.n + u.i1);
    if (window) j_begin = std::max<int64_t>(j_begin, g.t - g.n + u.i0 - *window + 1);
  }
  // Query row r of the unit is group head r / nq, query i0 + r % nq: the nq queries of one
  // head are contiguous in `qdata`, so each head's block goes to the tile kernels whole.
  const float* q_head0 = qdata + ((u.b * g.h_q + u.kv_head * group) * g.n + u.i0) * d;
  const int64_t q_head_stride = g.n * d;
  // Positions of the first and last query: a tile every query sees whole needs no per-key test.
  const int64_t pos_first = g.t - g.n + u.i0, pos_last = g.t - g.n + u.i1 - 1;
  // f16 keys in place (the host's own cache): decode scores them straight from the buffer, each
  // row widened in registers once for the whole GQA group (no f32 copy of the tile).
  const auto& ks = k.t.strides();
  const uint16_t* k_f16 = !transpose && !k.blocks && k.t.dtype() == DType::F16 && ks[3] == 1
                              ? reinterpret_cast<const uint16_t*>(k.t.raw_data()) + u.b * ks[0] + u.kv_head * ks[1]
                              : nullptr;
  for (int64_t j0 = j_begin; j0 < j_end; j0 += kKeyTile) {
    const int64_t j1 = std::min(j0 + kKeyTile, j_end), nk = j1 - j0;
    if (k_f16 && nq == 1) {
      // One query per head (decode): the group's heads are queries q_head_stride apart, and
      // their score rows kKeyTile apart.
      tiles::score_rows_f16(q_head0, q_head_stride, group, k_f16 + j0 * ks[2], ks[2], nk, d, s.data(), kKeyTile,
                            kPrefetchRows);
    } else if (k_f16) {
      for (int64_t head = 0; head < group; ++head) {
        tiles::score_rows_f16(q_head0 + head * q_head_stride, d, nq, k_f16 + j0 * ks[2], ks[2], nk, d,
                              s.data() + head * nq * kKeyTile, kKeyTile);
      }
    } else if (transpose) {
      load_rows_f32(k, u.b, u.kv_head, j0, j1, d, krows.data());
      // kt = key tile transposed, [d][kKeyTile], zero-padded past the last key.
      for (int64_t e = 0; e < d; ++e) {
        float* col = kt.data() + e * kKeyTile;
        for (int64_t jj = 0; jj < nk; ++jj) col[jj] = krows[jj * d + e];
        for (int64_t jj = nk; jj < kKeyTile; ++jj) col[jj] = 0.0f;
      }
      for (int64_t r = 0; r < rows; ++r) {
        const float* q = q_head0 + (r / nq) * q_head_stride + (r % nq) * d;
        simd::scores_transposed(q, kt.data(), kKeyTile, d, kKeyTile, s.data() + r * kKeyTile);
      }
    } else {
      load_rows_f32(k, u.b, u.kv_head, j0, j1, d, krows.data());
      for (int64_t head = 0; head < group; ++head) {
        tiles::score_rows(q_head0 + head * q_head_stride, d, nq, krows.data(), d, nk, d,
                          s.data() + head * nq * kKeyTile, kKeyTile);
      }
    }
    const bool whole_tile =
        unit_mask.mbase == nullptr && (!causal || (j1 - 1 <= pos_first && (!window || pos_last - j0 < *window)));
    for (int64_t r = 0; r < rows; ++r) {
      float* sr = s.data() + r * kKeyTile;
      float tile_max = neg_inf;
      if (softcap > 0.0f) {
        // Gemma 2's soft-capping: cap * tanh(score / cap), on the scaled score, before the
        // mask and the softmax. Rare enough (one family) for a plain loop.
        const int64_t i = u.i0 + r % nq, pos = g.t - g.n + i;
        for (int64_t jj = 0; jj < nk; ++jj) {
          const bool visible = whole_tile || unit_mask.visible(i, pos, j0 + jj);
          sr[jj] = visible ? softcap * std::tanh(sr[jj] * scale / softcap) : neg_inf;
          tile_max = std::max(tile_max, sr[jj]);
        }
      } else if (whole_tile) {
        tile_max = tiles::scale_and_max(sr, nk, scale);
      } else {
        const int64_t i = u.i0 + r % nq, pos = g.t - g.n + i;
        for (int64_t jj = 0; jj < nk; ++jj) {
          sr[jj] = unit_mask.visible(i, pos, j0 + jj) ? sr[jj] * scale : neg_inf;
          tile_max = std::max(tile_max, sr[jj]);
        }
      }
      if (tile_max == neg_inf) {
        // Nothing visible in this tile: zero weights leave the accumulator as it is.
        std::fill(sr, sr + nk, 0.0f);
        continue;
      }
      float* a = acc + r * d;
      const float m_new = std::max(m[r], tile_max);
      if (m[r] != neg_inf && m_new != m[r]) {
        const float correction = std::exp(m[r] - m_new);
        l[r] *= correction;
        for (int64_t e = 0; e < d; ++e) a[e] *= correction;
      }
      m[r] = m_new;
      // Scores become probabilities in place (masked ones exp(-inf) = 0, skipped by the
      // row sum).
      l[r] += simd::exp_shifted_sum(sr, nk, m_new);
    }
    // Every row's weights for the tile at once: each value row is loaded once per block of
    // three query rows; f16 rows in place are widened in registers, anything else first into
    // an f32 tile.
    const auto& vs = v.t.strides();
    if (!v.blocks && v.t.dtype() == DType::F16 && vs[3] == 1) {
      const auto* first =
          reinterpret_cast<const uint16_t*>(v.t.raw_data()) + u.b * vs[0] + u.kv_head * vs[1] + j0 * vs[2];
      tiles::accumulate_rows_f16(s.data(), kKeyTile, rows, first, vs[2], nk, d, acc, d, k_f16 ? kPrefetchRows : 0);
    } else {
      load_rows_f32(v, u.b, u.kv_head, j0, j1, d, vt.data());
      tiles::accumulate_rows(s.data(), kKeyTile, rows, vt.data(), d, nk, d, acc, d);
    }
  }
}

// The driver behind attention() and attention_blocks(), on validated shapes.
void attend(const Tensor& queries, const RowSource& keys, const RowSource& values, const Geometry& g,
            const ScoreRule& rule, Tensor& out, base::ThreadPool* pool) {
  const Shape out_shape{g.batch, g.h_q, g.n, g.d};
  if (!out.defined() || out.shape() != out_shape || out.dtype() != DType::F32 || !out.is_contiguous()) {
    out = Tensor(out_shape, DType::F32);
  }
  // The host's queries are already contiguous: read them in place (a contiguous() copy of
  // the Tensor object alone costs heap allocations every decode step).
  Tensor q_copy;
  if (!queries.is_contiguous()) q_copy = queries.contiguous();
  const float* qdata = (q_copy.defined() ? q_copy : queries).data<float>();
  float* odata = out.data<float>();
  const int64_t group = g.h_q / g.h_kv, d = g.d;
  const int64_t blocks = (g.n + kQueryBlock - 1) / kQueryBlock, heads = g.batch * g.h_kv;
  // Split the keys only when there are too few query blocks to keep threads busy.
  const int64_t splits = blocks > 1 ? 1 : std::clamp<int64_t>((g.t + kKeysPerSplit - 1) / kKeysPerSplit, 1, kMaxSplits);
  const int64_t keys_per_split = (g.t + splits - 1) / splits;
  const int64_t n_units = blocks * heads * splits;
  const auto unit_at = [&](int64_t index) {
    // Causal blocks late in the sequence see more keys, so blocks are visited in zig-zag
    // order (first, last, second, ...) and a contiguous share of units mixes cheap and
    // expensive ones.
    const int64_t split = index % splits, rest = index / splits;
    const int64_t head = rest % heads, k = rest / heads;
    const int64_t block = k % 2 == 0 ? k / 2 : blocks - 1 - k / 2;
    Unit u;
    u.b = head / g.h_kv;
    u.kv_head = head % g.h_kv;
    u.i0 = block * kQueryBlock;
    u.i1 = std::min(g.n, u.i0 + kQueryBlock);
    u.j_lo = std::min(g.t, split * keys_per_split);
    u.j_hi = std::min(g.t, u.j_lo + keys_per_split);
    return u;
  };
  const int64_t max_rows = group * std::min(g.n, kQueryBlock);
  // Per-unit partial states when keys are split: [unit][rows] m and l, [unit][rows][d] acc.
  // Grow-only per-thread buffers: no allocation per decode step once the context's split
  // count has been seen.
  // (Pointers, not the thread_local vectors, go into the body: inside a lambda a thread_local
  // names the running thread's own instance.)
  thread_local std::vector<float> part_m_buffer, part_l_buffer, part_acc_buffer;
  float *part_m = nullptr, *part_l = nullptr, *part_acc = nullptr;
  if (splits > 1) {
    const std::size_t need = static_cast<std::size_t>(n_units * max_rows);
    part_m = sized(part_m_buffer, need);
    part_l = sized(part_l_buffer, need);
    part_acc = sized(part_acc_buffer, need * static_cast<std::size_t>(d));
  }
  const auto body = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> m, l, acc;
    for (int64_t index = begin; index < end; ++index) {
      const Unit u = unit_at(index);
      const int64_t nq = u.i1 - u.i0, rows = group * nq;
      if (splits > 1) {
        attend_unit(qdata, keys, values, g, rule, u, part_m + index * max_rows, part_l + index * max_rows,
                    part_acc + index * max_rows * d);
        continue;
      }
      m.resize(static_cast<std::size_t>(rows));
      l.resize(m.size());
      acc.resize(m.size() * static_cast<std::size_t>(d));
      attend_unit(qdata, keys, values, g, rule, u, m.data(), l.data(), acc.data());
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t h = u.kv_head * group + r / nq, i = u.i0 + r % nq;
        float* o = odata + ((u.b * g.h_q + h) * g.n + i) * d;
        const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;  // a row that saw no key stays 0
        for (int64_t e = 0; e < d; ++e) o[e] = acc[r * d + e] * inv;
      }
    }
  };
  if (pool) {
    pool->parallel_for(n_units, body, 1);
  } else {
    body(0, n_units);
  }
  if (splits == 1) return;
  // Merge the key ranges of each (batch, kv head): with M = max m_s, out = sum_s acc_s *
  // e^(m_s - M) / sum_s l_s * e^(m_s - M).
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t head = 0; head < heads; ++head) {
    const Unit u0 = unit_at(head * splits);
    const int64_t nq = u0.i1 - u0.i0, rows = group * nq;
    for (int64_t r = 0; r < rows; ++r) {
      float big = neg_inf;
      for (int64_t sp = 0; sp < splits; ++sp) big = std::max(big, part_m[(head * splits + sp) * max_rows + r]);
      const int64_t h = u0.kv_head * group + r / nq, i = u0.i0 + r % nq;
      float* o = odata + ((u0.b * g.h_q + h) * g.n + i) * d;
      std::fill(o, o + d, 0.0f);
      if (big == neg_inf) continue;
      float total = 0.0f;
      for (int64_t sp = 0; sp < splits; ++sp) {
        const int64_t unit = head * splits + sp;
        const float mu = part_m[unit * max_rows + r];
        if (mu == neg_inf) continue;
        const float w = std::exp(mu - big);
        total += w * part_l[unit * max_rows + r];
        simd::axpy_f32(w, part_acc + (unit * max_rows + r) * d, o, d);
      }
      const float inv = 1.0f / total;
      for (int64_t e = 0; e < d; ++e) o[e] *= inv;
    }
  }
}

}  // namespace

void attention(const Tensor& queries, const Tensor& keys, const Tensor& values, const AttentionMask& mask,
               std::optional<int64_t> window, float scale, Tensor& out, base::ThreadPool* pool, float softcap) {
  const Geometry g = check_shapes(queries, keys, values, mask);
  if (keys.dtype() != values.dtype()) {
    throw base::InvalidArgument("attention: keys are " + std::string(dtype_name(keys.dtype())) + " but values are " +
                                std::string(dtype_name(values.dtype())));
  }
  check_softcap(softcap);
  attend(queries, RowSource{keys}, RowSource{values}, g, ScoreRule{mask, window, scale, softcap}, out, pool);
}

void attention_blocks(const Tensor& queries, const BlockRows& keys, const BlockRows& values, const AttentionMask& mask,
                      std::optional<int64_t> window, float scale, Tensor& out, base::ThreadPool* pool) {
  if (queries.ndim() != 4 || queries.dtype() != DType::F32) {
    throw base::InvalidArgument("attention_blocks: queries must be 4-D f32, got " + shape_text(queries.shape()) + " " +
                                std::string(dtype_name(queries.dtype())));
  }
  for (const BlockRows* rows : {&keys, &values}) {
    const Tensor* t = rows->blocks;
    if (t == nullptr || !t->defined() || t->ndim() != 4 || t->dtype() != DType::U8 || !is_block_kv_type(rows->type) ||
        t->strides()[3] != 1 || t->dim(0) != queries.dim(0) || rows->dim != queries.dim(3) || rows->rows < 0 ||
        rows->rows > t->dim(2) || static_cast<std::size_t>(t->dim(3)) != kv_row_bytes(rows->type, rows->dim)) {
      throw base::InvalidArgument(
          "attention_blocks: block rows " + (t && t->defined() ? shape_text(t->shape()) : std::string("(undefined)")) +
          " of type " + std::string(kv_cache_type_name(rows->type)) + " (" + std::to_string(rows->rows) + " rows of " +
          std::to_string(rows->dim) + ") do not fit queries " + shape_text(queries.shape()));
    }
  }
  if (keys.rows != values.rows || keys.blocks->dim(1) != values.blocks->dim(1)) {
    throw base::InvalidArgument("attention_blocks: keys " + shape_text(keys.blocks->shape()) + " and values " +
                                shape_text(values.blocks->shape()) + " disagree");
  }
  const Geometry g{queries.dim(0), queries.dim(1), keys.blocks->dim(1), queries.dim(2), keys.rows, queries.dim(3)};
  if (g.h_kv <= 0 || g.h_q % g.h_kv != 0) {
    throw base::InvalidArgument("attention_blocks: query heads " + std::to_string(g.h_q) +
                                " not a multiple of kv heads " + std::to_string(g.h_kv));
  }
  check_mask(mask, g);
  attend(queries, RowSource{*keys.blocks, true, keys.type}, RowSource{*values.blocks, true, values.type}, g,
         ScoreRule{mask, window, scale, 0.0f}, out, pool);
}

void attention_reference(const Tensor& queries, const Tensor& keys, const Tensor& values, const AttentionMask& mask,
                         std::optional<int64_t> window, float scale, Tensor& out, float softcap) {
  const Geometry g = check_shapes(queries, keys, values, mask);
  check_softcap(softcap);
  out = Tensor({g.batch, g.h_q, g.n, g.d}, DType::F32);
  const int64_t group = g.h_q / g.h_kv;
  std::vector<double> p(static_cast<std::size_t>(g.t));
  // (batch, head) pairs in one loop, in the same order as two nested ones: one level less
  // nesting for the per-key mask test.
  for (int64_t bh = 0; bh < g.batch * g.h_q; ++bh) {
    const int64_t b = bh / g.h_q, h = bh % g.h_q;
    for (int64_t i = 0; i < g.n; ++i) {
      const int64_t pos = g.t - g.n + i;
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < g.t; ++j) {
        bool visible = true;
        if (mask.kind == AttentionMask::Kind::kCausal) visible = j <= pos && (!window || pos - j < *window);
        if (mask.kind == AttentionMask::Kind::kExplicit) {
          visible = mask.explicit_mask.get({mask.explicit_mask.dim(0) == 1 ? 0 : b, 0, i, j}) != 0.0f;
        }
        if (!visible) {
          p[j] = -std::numeric_limits<double>::infinity();
          continue;
        }
        double s = 0.0;
        for (int64_t e = 0; e < g.d; ++e)
          s += static_cast<double>(queries.get({b, h, i, e})) * keys.get({b, h / group, j, e});
        p[j] = s * scale;
        if (softcap > 0.0f) p[j] = softcap * std::tanh(p[j] / softcap);
        max = std::max(max, p[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < g.t; ++j) {
        p[j] = std::isinf(max) ? 0.0 : std::exp(p[j] - max);
        sum += p[j];
      }
      for (int64_t e = 0; e < g.d; ++e) {
        double acc = 0.0;
        for (int64_t j = 0; j < g.t; ++j) acc += p[j] * values.get({b, h / group, j, e});
        out.set({b, h, i, e}, sum > 0.0 ? static_cast<float>(acc / sum) : 0.0f);
      }
    }
  }
}

}  // namespace lm::kernels
