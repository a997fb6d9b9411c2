// Highway kernels for amc_latent_columns.h, compiled once per target and dispatched at run time.
// The multiply and the add must round apart, as the header says: contraction is off for this
// file (GCC would otherwise fuse them into an FMA on the FMA targets only).
#pragma GCC optimize("fp-contract=off")
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "veloxquant/caches/amc_latent_columns.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "veloxquant/caches/amc_latent_columns.h"

#include <cstring>
#include <vector>

#ifndef VQ_AMC_LATENT_COLUMNS_HELPERS
#define VQ_AMC_LATENT_COLUMNS_HELPERS
namespace veloxquant {
namespace {
// Code i of a row of dense LSB-first 8- or 4-bit codes.
inline int code_at(const uint8_t* row, int64_t i, int bits) {
  return bits == 8 ? row[i] : (row[i >> 1] >> ((i & 1) * 4)) & 15;
}
// Rows [j0, n) one code at a time (the scalar reference, and the SIMD loops' last rows).
inline void columns_one_by_one(const uint8_t* rows, int64_t row_stride, int64_t j0, int64_t n, int64_t r, int bits,
                               const float* pairs, float* out) {
  for (int64_t j = j0; j < n; ++j) {
    const uint8_t* row = rows + j * row_stride;
    const float scale = pairs[2 * j], min = pairs[2 * j + 1];
    for (int64_t i = 0; i < r; ++i) out[i * n + j] = static_cast<float>(code_at(row, i, bits)) * scale + min;
  }
}
}  // namespace
}  // namespace veloxquant
#endif  // VQ_AMC_LATENT_COLUMNS_HELPERS

HWY_BEFORE_NAMESPACE();
namespace veloxquant::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// padded: lanes * slot bytes of scratch (slot: a row's bytes rounded up to 4, plus 4, so a 4-byte
// gather at any code's byte stays inside the copy).
void LatentColumnsImpl(const uint8_t* rows, int64_t row_stride, int64_t n, int64_t r, int bits, const float* pairs,
                       float* out, uint8_t* padded, int64_t slot) {
  const hn::ScalableTag<float> df;
  const hn::RebindToSigned<decltype(df)> di;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t row_bytes = (r * bits + 7) / 8;
  const auto slots = hn::Mul(hn::Iota(di, 0), hn::Set(di, static_cast<int32_t>(slot)));
  const auto pair_index = hn::Add(hn::Iota(di, 0), hn::Iota(di, 0));  // 2 j
  const auto code_mask = hn::Set(di, bits == 8 ? 0xFF : 0x0F);
  int64_t j0 = 0;
  for (; j0 + lanes <= n; j0 += lanes) {
    for (int64_t k = 0; k < lanes; ++k) {
      std::memcpy(padded + k * slot, rows + (j0 + k) * row_stride, static_cast<std::size_t>(row_bytes));
    }
    const auto scale = hn::GatherIndex(df, pairs + 2 * j0, pair_index);
    const auto min = hn::GatherIndex(df, pairs + 2 * j0 + 1, pair_index);
    const auto* base = reinterpret_cast<const int32_t*>(padded);
    for (int64_t i = 0; i < r; ++i) {
      const int64_t byte = bits == 8 ? i : i >> 1;
      const auto word = hn::GatherOffset(di, base, hn::Add(slots, hn::Set(di, static_cast<int32_t>(byte))));
      const auto field = bits == 8 || (i & 1) == 0 ? word : hn::ShiftRight<4>(word);
      const auto code = hn::ConvertTo(df, hn::And(field, code_mask));
      hn::StoreU(hn::Add(hn::Mul(code, scale), min), df, out + i * n + j0);
    }
  }
  columns_one_by_one(rows, row_stride, j0, n, r, bits, pairs, out);
}

}  // namespace veloxquant::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace veloxquant {
HWY_EXPORT(LatentColumnsImpl);

void amc_latent_columns(const uint8_t* rows, int64_t row_stride, int64_t n, int64_t r, int bits, const float* pairs,
                        float* out) {
  // Grow-only per-thread copies of a vector of rows (zeroed once: the slack past a row's bytes is
  // read by the gathers and masked off).
  thread_local std::vector<uint8_t> padded;
  const int64_t slot = ((r * bits + 7) / 8 + 3) / 4 * 4 + 4;
  const auto need = static_cast<std::size_t>(64 * slot);  // 64 lanes: wider than any x86 vector of floats
  if (padded.size() < need) padded.assign(need, 0);
  HWY_DYNAMIC_DISPATCH(LatentColumnsImpl)(rows, row_stride, n, r, bits, pairs, out, padded.data(), slot);
}

namespace scalar {
void amc_latent_columns(const uint8_t* rows, int64_t row_stride, int64_t n, int64_t r, int bits, const float* pairs,
                        float* out) {
  columns_one_by_one(rows, row_stride, 0, n, r, bits, pairs, out);
}
}  // namespace scalar
}  // namespace veloxquant
#endif  // HWY_ONCE
