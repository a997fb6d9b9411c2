#include "lm/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "lm/kernels/elementwise.h"
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

Geometry check_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMask& mask) {
  if (q.ndim() != 4 || k.ndim() != 4 || v.ndim() != 4) {
    throw base::InvalidArgument("attention expects 4-D queries/keys/values, got " + shape_text(q.shape()) + ", " +
                                shape_text(k.shape()) + ", " + shape_text(v.shape()));
  }
  if (q.dtype() != DType::F32) throw base::InvalidArgument("attention queries must be f32, got " + std::string(dtype_name(q.dtype())));
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
  if (g.n > g.t && mask.kind != AttentionMask::Kind::kExplicit) {
    throw base::InvalidArgument("attention: " + std::to_string(g.n) + " queries but only " + std::to_string(g.t) + " keys");
  }
  if (mask.kind == AttentionMask::Kind::kExplicit) {
    const Tensor& m = mask.explicit_mask;
    if (!m.defined() || m.ndim() != 4 || m.dtype() != DType::U8 || (m.dim(0) != 1 && m.dim(0) != g.batch) ||
        m.dim(2) != g.n || m.dim(3) != g.t) {
      throw base::InvalidArgument("attention: explicit mask " + (m.defined() ? shape_text(m.shape()) : std::string("(undefined)")) +
                                  " does not match [B, 1, " + std::to_string(g.n) + ", " + std::to_string(g.t) + "] u8");
    }
  }
  return g;
}

template <DType kType>
inline float load(const std::byte* base_ptr, int64_t index) {
  if constexpr (kType == DType::F32) return reinterpret_cast<const float*>(base_ptr)[index];
  if constexpr (kType == DType::F16) return base::f16_to_f32(reinterpret_cast<const uint16_t*>(base_ptr)[index]);
  if constexpr (kType == DType::BF16) return base::bf16_to_f32(reinterpret_cast<const uint16_t*>(base_ptr)[index]);
  return 0.0f;
}

// q · key row, reading the stored dtype in place: SIMD when the row is contiguous (it is
// for every cache in this project), element-wise through the stride otherwise.
template <DType kType>
inline float dot_row(const float* q, const std::byte* row, int64_t stride, int64_t d) {
  if (stride == 1) {
    if constexpr (kType == DType::F32) return simd::dot_f32(reinterpret_cast<const float*>(row), q, d);
    if constexpr (kType == DType::F16) return simd::dot_f16(reinterpret_cast<const uint16_t*>(row), q, d);
    if constexpr (kType == DType::BF16) return simd::dot_bf16(reinterpret_cast<const uint16_t*>(row), q, d);
  }
  float s = 0.0f;
  for (int64_t e = 0; e < d; ++e) s += q[e] * load<kType>(row, e * stride);
  return s;
}

// out += p * value row.
template <DType kType>
inline void axpy_row(float p, const std::byte* row, int64_t stride, float* out, int64_t d) {
  if (stride == 1) {
    if constexpr (kType == DType::F32) return simd::axpy_f32(p, reinterpret_cast<const float*>(row), out, d);
    if constexpr (kType == DType::F16) return simd::axpy_f16(p, reinterpret_cast<const uint16_t*>(row), out, d);
    if constexpr (kType == DType::BF16) return simd::axpy_bf16(p, reinterpret_cast<const uint16_t*>(row), out, d);
  }
  for (int64_t e = 0; e < d; ++e) out[e] += p * load<kType>(row, e * stride);
}

// One (batch, query head, query) row: scores over visible keys, softmax, weighted values.
template <DType kType>
void attend_row(const float* q, const Tensor& k, const Tensor& v, int64_t b, int64_t kv_head, const Geometry& g,
                const AttentionMask& mask, std::optional<int64_t> window, int64_t query, float scale,
                std::vector<float>& scores, float* out) {
  const std::byte* kbase = k.raw_data();
  const std::byte* vbase = v.raw_data();
  const std::size_t es = k.element_size();
  const auto& ks = k.strides();
  const auto& vs = v.strides();
  const int64_t k_off = b * ks[0] + kv_head * ks[1];
  const int64_t v_off = b * vs[0] + kv_head * vs[1];
  const int64_t pos = g.t - g.n + query;
  const uint8_t* mrow = nullptr;
  if (mask.kind == AttentionMask::Kind::kExplicit) {
    const Tensor& m = mask.explicit_mask;
    const auto& ms = m.strides();
    mrow = m.data<uint8_t>() + (m.dim(0) == 1 ? 0 : b * ms[0]) + query * ms[2];
  }
  const int64_t mstride = mrow ? mask.explicit_mask.strides()[3] : 0;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  scores.resize(static_cast<std::size_t>(g.t));
  bool any = false;
  for (int64_t j = 0; j < g.t; ++j) {
    bool visible = true;
    if (mask.kind == AttentionMask::Kind::kCausal) {
      visible = j <= pos && (!window || pos - j < *window);
    } else if (mrow) {
      visible = mrow[j * mstride] != 0;
    }
    if (!visible) {
      scores[j] = neg_inf;
      continue;
    }
    any = true;
    const std::byte* krow = kbase + (k_off + j * ks[2]) * static_cast<int64_t>(es);
    scores[j] = dot_row<kType>(q, krow, ks[3], g.d) * scale;
  }
  for (int64_t e = 0; e < g.d; ++e) out[e] = 0.0f;
  if (!any) return;
  softmax(scores.data(), g.t);
  for (int64_t j = 0; j < g.t; ++j) {
    const float p = scores[j];
    if (p == 0.0f) continue;
    const std::byte* vrow = vbase + (v_off + j * vs[2]) * static_cast<int64_t>(es);
    axpy_row<kType>(p, vrow, vs[3], out, g.d);
  }
}

// ---- Tiled path for prefill-sized query blocks -------------------------------------------
//
// All query heads that share a kv head (the GQA group) and a block of consecutive queries
// walk the keys together, one tile of keys at a time: the tile's keys and values are widened
// to f32 once and reused by every row of the block, scores come from the 4-row dot kernel,
// and softmax is computed online (running max and sum, rescaling the accumulator when the
// max grows), so nothing of size T is materialised per row.

constexpr int64_t kTiledFromQueries = 8;
constexpr int64_t kQueryTile = 16;
constexpr int64_t kKeyTile = 64;

// Rows [j0, j1) of head (b, h) of a [B, H, T, D] tensor, widened to f32 into dst.
void load_rows_f32(const Tensor& t, int64_t b, int64_t h, int64_t j0, int64_t j1, int64_t d, float* dst) {
  const auto& s = t.strides();
  const std::size_t es = t.element_size();
  const std::byte* base_ptr = t.raw_data();
  for (int64_t j = j0; j < j1; ++j, dst += d) {
    const std::byte* row = base_ptr + (b * s[0] + h * s[1] + j * s[2]) * static_cast<int64_t>(es);
    if (s[3] == 1 && t.dtype() == DType::F16) {
      simd::f16_to_f32(reinterpret_cast<const uint16_t*>(row), dst, d);
    } else if (s[3] == 1 && t.dtype() == DType::BF16) {
      simd::bf16_to_f32(reinterpret_cast<const uint16_t*>(row), dst, d);
    } else {
      for (int64_t e = 0; e < d; ++e) dst[e] = load_as_f32(row + e * s[3] * static_cast<int64_t>(es), t.dtype());
    }
  }
}

void attend_block(const float* qdata, float* odata, const Tensor& k, const Tensor& v, const Geometry& g,
                  const AttentionMask& mask, std::optional<int64_t> window, float scale, int64_t b, int64_t kv_head,
                  int64_t i0, int64_t i1) {
  const int64_t group = g.h_q / g.h_kv, nq = i1 - i0, rows = group * nq, d = g.d;
  // kt: the key tile transposed ([d][kKeyTile], zero-padded past the last key) so scores are
  // lane-parallel; vt: the value tile as rows.
  thread_local std::vector<float> krows, kt, vt, m, l, acc, s;
  krows.resize(static_cast<std::size_t>(kKeyTile * d));
  kt.resize(static_cast<std::size_t>(kKeyTile * d));
  vt.resize(kt.size());
  s.resize(kKeyTile);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  m.assign(static_cast<std::size_t>(rows), neg_inf);
  l.assign(static_cast<std::size_t>(rows), 0.0f);
  acc.assign(static_cast<std::size_t>(rows * d), 0.0f);

  const bool causal = mask.kind == AttentionMask::Kind::kCausal;
  const uint8_t* mbase = nullptr;
  int64_t ms2 = 0, ms3 = 0;
  if (mask.kind == AttentionMask::Kind::kExplicit) {
    const Tensor& mt = mask.explicit_mask;
    mbase = mt.data<uint8_t>() + (mt.dim(0) == 1 ? 0 : b * mt.strides()[0]);
    ms2 = mt.strides()[2];
    ms3 = mt.strides()[3];
  }
  // Keys no query of the block can see are never loaded.
  int64_t j_begin = 0, j_end = g.t;
  if (causal) {
    j_end = std::min(g.t, g.t - g.n + i1);
    if (window) j_begin = std::max<int64_t>(0, g.t - g.n + i0 - *window + 1);
  }
  for (int64_t j0 = j_begin; j0 < j_end; j0 += kKeyTile) {
    const int64_t j1 = std::min(j0 + kKeyTile, j_end), nk = j1 - j0;
    load_rows_f32(k, b, kv_head, j0, j1, d, krows.data());
    for (int64_t e = 0; e < d; ++e) {
      float* col = kt.data() + e * kKeyTile;
      for (int64_t jj = 0; jj < nk; ++jj) col[jj] = krows[jj * d + e];
      for (int64_t jj = nk; jj < kKeyTile; ++jj) col[jj] = 0.0f;
    }
    load_rows_f32(v, b, kv_head, j0, j1, d, vt.data());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t h = kv_head * group + r / nq, i = i0 + r % nq, pos = g.t - g.n + i;
      const float* q = qdata + ((b * g.h_q + h) * g.n + i) * d;
      simd::scores_transposed(q, kt.data(), kKeyTile, d, kKeyTile, s.data());
      float tile_max = neg_inf;
      for (int64_t jj = 0; jj < nk; ++jj) {
        const int64_t j = j0 + jj;
        bool visible = true;
        if (causal) {
          visible = j <= pos && (!window || pos - j < *window);
        } else if (mbase) {
          visible = mbase[i * ms2 + j * ms3] != 0;
        }
        s[jj] = visible ? s[jj] * scale : neg_inf;
        tile_max = std::max(tile_max, s[jj]);
      }
      if (tile_max == neg_inf) continue;
      float* a = acc.data() + r * d;
      const float m_new = std::max(m[r], tile_max);
      if (m[r] != neg_inf && m_new != m[r]) {
        const float correction = std::exp(m[r] - m_new);
        l[r] *= correction;
        for (int64_t e = 0; e < d; ++e) a[e] *= correction;
      }
      m[r] = m_new;
      // Scores become probabilities in place (masked ones 0, skipped by the row sum).
      for (int64_t jj = 0; jj < nk; ++jj) {
        s[jj] = s[jj] == neg_inf ? 0.0f : std::exp(s[jj] - m_new);
        l[r] += s[jj];
      }
      simd::weighted_row_sum(s.data(), vt.data(), nk, d, a);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t h = kv_head * group + r / nq, i = i0 + r % nq;
    float* o = odata + ((b * g.h_q + h) * g.n + i) * d;
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    for (int64_t e = 0; e < d; ++e) o[e] = acc[r * d + e] * inv;
  }
}

}  // namespace

void attention(const Tensor& queries, const Tensor& keys, const Tensor& values, const AttentionMask& mask,
               std::optional<int64_t> window, float scale, Tensor& out, base::ThreadPool* pool) {
  const Geometry g = check_shapes(queries, keys, values, mask);
  if (keys.dtype() != values.dtype()) {
    throw base::InvalidArgument("attention: keys are " + std::string(dtype_name(keys.dtype())) + " but values are " +
                                std::string(dtype_name(values.dtype())));
  }
  const Shape out_shape{g.batch, g.h_q, g.n, g.d};
  if (!out.defined() || out.shape() != out_shape || out.dtype() != DType::F32 || !out.is_contiguous()) {
    out = Tensor(out_shape, DType::F32);
  }
  const Tensor q = queries.contiguous();
  const float* qdata = q.data<float>();
  float* odata = out.data<float>();
  if (g.n >= kTiledFromQueries) {
    // Units: (query block, batch, kv head). Causal blocks late in the sequence see more keys,
    // so blocks are visited in zig-zag order (first, last, second, second-to-last, ...) and a
    // contiguous share of units holds a mix of cheap and expensive ones.
    const int64_t blocks = (g.n + kQueryTile - 1) / kQueryTile, heads = g.batch * g.h_kv;
    const auto tiled = [&](int64_t begin, int64_t end) {
      for (int64_t u = begin; u < end; ++u) {
        const int64_t k = u / heads, rest = u % heads;
        const int64_t block = k % 2 == 0 ? k / 2 : blocks - 1 - k / 2;
        const int64_t i0 = block * kQueryTile, i1 = std::min(g.n, i0 + kQueryTile);
        attend_block(qdata, odata, keys, values, g, mask, window, scale, rest / g.h_kv, rest % g.h_kv, i0, i1);
      }
    };
    if (pool) {
      pool->parallel_for(blocks * heads, tiled, 1);
    } else {
      tiled(0, blocks * heads);
    }
    return;
  }
  const int64_t group = g.h_q / g.h_kv;
  const int64_t rows = g.batch * g.h_q * g.n;
  const DType dt = keys.dtype();
  const auto body = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores;
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (g.h_q * g.n);
      const int64_t h = (r / g.n) % g.h_q;
      const int64_t i = r % g.n;
      const float* qrow = qdata + r * g.d;
      float* orow = odata + r * g.d;
      if (dt == DType::F16) {
        attend_row<DType::F16>(qrow, keys, values, b, h / group, g, mask, window, i, scale, scores, orow);
      } else if (dt == DType::BF16) {
        attend_row<DType::BF16>(qrow, keys, values, b, h / group, g, mask, window, i, scale, scores, orow);
      } else {
        attend_row<DType::F32>(qrow, keys, values, b, h / group, g, mask, window, i, scale, scores, orow);
      }
    }
  };
  if (pool) {
    pool->parallel_for(rows, body, 1);
  } else {
    body(0, rows);
  }
}

void attention_reference(const Tensor& queries, const Tensor& keys, const Tensor& values,
                         const AttentionMask& mask, std::optional<int64_t> window, float scale, Tensor& out) {
  const Geometry g = check_shapes(queries, keys, values, mask);
  out = Tensor({g.batch, g.h_q, g.n, g.d}, DType::F32);
  const int64_t group = g.h_q / g.h_kv;
  std::vector<double> p(static_cast<std::size_t>(g.t));
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t h = 0; h < g.h_q; ++h) {
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
          for (int64_t e = 0; e < g.d; ++e) s += static_cast<double>(queries.get({b, h, i, e})) * keys.get({b, h / group, j, e});
          p[j] = s * scale;
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
}

}  // namespace lm::kernels
