#include "veloxquant/caches/nsnquant_rows.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/half.h"
#include "lm/kernels/attention_tiles.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

NsnQuantRows::NsnQuantRows(const quant::NsnTransform& key_transform, const quant::NsnTransform& value_transform,
                           const lm::Tensor& key_codes, const lm::Tensor& value_codes, const lm::Tensor& key_scales,
                           const lm::Tensor& value_scales, const lm::Tensor& key_means, const lm::Tensor& value_means,
                           const lm::Tensor& tail_keys, const lm::Tensor& tail_values, int64_t frontier, int64_t rows,
                           int64_t chunk)
    : kt_(key_transform),
      vt_(value_transform),
      key_codes_(key_codes),
      value_codes_(value_codes),
      key_scales_(key_scales),
      value_scales_(value_scales),
      key_means_(key_means),
      value_means_(value_means),
      tail_keys_(attention::PlainRows::of(tail_keys)),
      tail_values_(attention::PlainRows::of(tail_values)),
      frontier_(frontier),
      rows_(rows),
      chunk_(chunk),
      dk_(key_transform.dim()),
      dv_(value_transform.dim()),
      lut_size_(key_transform.codes_per_row() * key_transform.codebook().entries()) {}

namespace {
// Row `row` of head (b, h) of a contiguous [B, H, cap, W] tensor, from a base pointer and strides
// read once per tile (row_ptr's accessor calls per row showed in the instruction counts).
struct HeadRows {
  const std::byte* base;
  int64_t stride;  // bytes between rows
  template <class T>
  const T* row(int64_t j) const {
    return reinterpret_cast<const T*>(base + j * stride);
  }
};
template <class T>
HeadRows head_rows(const lm::Tensor& t, int64_t b, int64_t h) {
  return {reinterpret_cast<const std::byte*>(row_ptr<T>(t, b, h, 0)), t.strides()[2] * static_cast<int64_t>(sizeof(T))};
}
}  // namespace

void NsnQuantRows::prepare_query(const float* query, float* prepared) const {
  std::memcpy(prepared, query, sizeof(float) * static_cast<std::size_t>(dk_));
  float* rotated = prepared + dk_;
  kt_.rotate(query, rotated);
  const quant::NsnCodebook& book = kt_.codebook();
  const int sub = book.dim(), stages = book.stages(), entries = book.entries();
  float* lut = prepared + 2 * dk_;
  // LUT[t][k] = sum_e q'[e] c_k[e]; coordinate-major over the transposed
  // codebook so the inner loop runs over contiguous codewords.
  for (int64_t t = 0; t < kt_.codes_per_row(); ++t) {
    const float* q = rotated + (t / stages) * sub;
    const float* ct = book.transposed(static_cast<int>(t % stages));
    float* row = lut + t * entries;
    std::fill(row, row + entries, 0.0f);
    // row += sum_e q[e] * (coordinate e of every codeword): the host's SIMD accumulate loop with the
    // sub-vector's coordinates as weights (the scalar loop it replaces cost 22% of a decode step).
    lm::kernels::tiles::accumulate_rows(q, sub, 1, ct, entries, sub, entries, row, entries);
  }
}

void NsnQuantRows::score_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* prepared, int64_t n_queries,
                              float* scores, int64_t ld, attention::TileScratch& scratch) const {
  const int64_t pd = prepared_dim(), per_row = kt_.codes_per_row(), entries = kt_.codebook().entries();
  thread_local std::vector<float> mean, query_mean;
  const int64_t quantized_end = std::min(j1, frontier_);
  if (j0 < quantized_end) {
    const HeadRows codes = head_rows<uint8_t>(key_codes_, b, h), ab = head_rows<uint16_t>(key_scales_, b, h);
    query_mean.resize(static_cast<std::size_t>(n_queries));
    mean.resize(static_cast<std::size_t>(dk_));
    for (int64_t a = j0; a < quantized_end;) {
      const int64_t c = a / chunk_, end = std::min(quantized_end, (c + 1) * chunk_);
      lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(key_means_, b, h, c), mean.data(), dk_);
      for (int64_t r = 0; r < n_queries; ++r) {  // <q', mu_c>, once per chunk
        const float* q = prepared + r * pd + dk_;
        float s = 0.0f;
        for (int64_t e = 0; e < dk_; ++e) s += q[e] * mean[static_cast<std::size_t>(e)];
        query_mean[static_cast<std::size_t>(r)] = s;
      }
      const float* qm = query_mean.data();
      const float* lut_base = prepared + 2 * dk_;
      for (int64_t j = a; j < end; ++j) {
        const uint8_t* code = codes.row<uint8_t>(j);
        const uint16_t* pair = ab.row<uint16_t>(j);
        const float sa = base::f16_to_f32(pair[0]), sb = base::f16_to_f32(pair[1]);
        // Up to four queries per pass over the row's codes: each code byte is read once and its
        // slot looked up in four tables (a missing query reads the first table, unused).
        for (int64_t r0 = 0; r0 < n_queries; r0 += 4) {
          const int64_t nr = std::min<int64_t>(4, n_queries - r0);
          const float* l0 = lut_base + r0 * pd;
          const float* l1 = nr > 1 ? l0 + pd : l0;
          const float* l2 = nr > 2 ? l0 + 2 * pd : l0;
          const float* l3 = nr > 3 ? l0 + 3 * pd : l0;
          float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
          int64_t slot = 0;
          for (int64_t t = 0; t < per_row; ++t, slot += entries) {
            const int64_t k = slot + code[t];
            s0 += l0[k];
            s1 += l1[k];
            s2 += l2[k];
            s3 += l3[k];
          }
          const float part[4] = {s0, s1, s2, s3};
          for (int64_t i = 0; i < nr; ++i) {
            scores[(r0 + i) * ld + (j - j0)] = sa * part[i] + sb * qm[r0 + i];
          }
        }
      }
      a = end;
    }
  }
  if (j1 > frontier_) {  // the residual rows, from `frontier_` on in their own buffer, scored with the raw query
    const int64_t t0 = std::max(j0, frontier_), n = j1 - t0;
    float* tile = scratch.f32(static_cast<std::size_t>(n * dk_));
    tail_keys_.widen(b, h, t0 - frontier_, j1 - frontier_, tile);
    lm::kernels::tiles::score_rows(prepared, pd, n_queries, tile, dk_, n, dk_, scores + (t0 - j0), ld);
  }
}

void NsnQuantRows::accumulate_tile(int64_t b, int64_t h, int64_t j0, int64_t j1, const float* weights,
                                   int64_t n_queries, int64_t ld, float* acc, attention::TileScratch& scratch) const {
  const int64_t quantized_end = std::min(j1, frontier_);
  if (j0 < quantized_end) {
    // sum_j w_j (a_j z^_j + b_j mu_c) = sum_j (w_j a_j) z^_j + sum_c (sum_{j in c} w_j b_j) mu_c:
    // the tile's z^ decoded once (codeword sums), the weights folded with a, the means added
    // once per chunk — all in the rotated basis, rotated back once per query.
    const int64_t n = quantized_end - j0;
    const quant::NsnCodebook& book = vt_.codebook();
    const int sub = book.dim(), stages = book.stages();
    const int64_t nsub = vt_.subvectors();
    const HeadRows codes = head_rows<uint8_t>(value_codes_, b, h), ab = head_rows<uint16_t>(value_scales_, b, h);
    thread_local std::vector<float> mean, folded, scale_a, scale_b;
    float* tile = scratch.f32(static_cast<std::size_t>(n * dv_));
    scale_a.resize(static_cast<std::size_t>(n));
    scale_b.resize(static_cast<std::size_t>(n));
    const float* words = book.codeword(0, 0);
    const int64_t stage_stride = static_cast<int64_t>(book.entries()) * sub;
    for (int64_t j = j0; j < quantized_end; ++j) {
      const uint8_t* code = codes.row<uint8_t>(j);
      float* out = tile + (j - j0) * dv_;
      if (sub == 8) {  // the default width: each sub-vector's stage sum in two vector registers
        for (int64_t s = 0; s < nsub; ++s) {
          const uint8_t* cs = code + s * stages;
          float v[8];
          const float* c = words + cs[0] * 8;
          for (int e = 0; e < 8; ++e) v[e] = c[e];
          for (int st = 1; st < stages; ++st) {
            c = words + st * stage_stride + cs[st] * 8;
            for (int e = 0; e < 8; ++e) v[e] += c[e];
          }
          for (int e = 0; e < 8; ++e) out[s * 8 + e] = v[e];
        }
      } else {
        for (int64_t s = 0; s < nsub; ++s) {
          const uint8_t* cs = code + s * stages;
          float* o = out + s * sub;
          const float* c = words + cs[0] * sub;
          for (int e = 0; e < sub; ++e) o[e] = c[e];
          for (int st = 1; st < stages; ++st) {
            c = words + st * stage_stride + cs[st] * sub;
            for (int e = 0; e < sub; ++e) o[e] += c[e];
          }
        }
      }
      const uint16_t* pair = ab.row<uint16_t>(j);
      scale_a[static_cast<std::size_t>(j - j0)] = base::f16_to_f32(pair[0]);
      scale_b[static_cast<std::size_t>(j - j0)] = base::f16_to_f32(pair[1]);
    }
    folded.resize(static_cast<std::size_t>(n_queries * n));
    for (int64_t r = 0; r < n_queries; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        folded[static_cast<std::size_t>(r * n + j)] = weights[r * ld + j] * scale_a[static_cast<std::size_t>(j)];
      }
    }
    float* sums = scratch.f32_second(static_cast<std::size_t>(n_queries * dv_));
    std::fill(sums, sums + n_queries * dv_, 0.0f);
    lm::kernels::tiles::accumulate_rows(folded.data(), n, n_queries, tile, dv_, n, dv_, sums, dv_);
    mean.resize(static_cast<std::size_t>(dv_));
    for (int64_t a = j0; a < quantized_end;) {
      const int64_t c = a / chunk_, end = std::min(quantized_end, (c + 1) * chunk_);
      lm::kernels::simd::f16_to_f32(row_ptr<uint16_t>(value_means_, b, h, c), mean.data(), dv_);
      for (int64_t r = 0; r < n_queries; ++r) {
        float wb = 0.0f;
        for (int64_t j = a; j < end; ++j) wb += weights[r * ld + (j - j0)] * scale_b[static_cast<std::size_t>(j - j0)];
        float* s = sums + r * dv_;
        for (int64_t e = 0; e < dv_; ++e) s[e] += wb * mean[static_cast<std::size_t>(e)];
      }
      a = end;
    }
    for (int64_t r = 0; r < n_queries; ++r) {
      float* s = sums + r * dv_;
      vt_.unrotate(s, s);
      float* out = acc + r * dv_;
      for (int64_t e = 0; e < dv_; ++e) out[e] += s[e];
    }
  }
  if (j1 > frontier_) {
    const int64_t t0 = std::max(j0, frontier_);
    attention::accumulate_plain_tile(tail_values_, b, h, t0 - frontier_, j1 - frontier_, weights + (t0 - j0), n_queries,
                                     ld, acc, scratch);
  }
}

}  // namespace veloxquant
