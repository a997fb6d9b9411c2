#include "veloxquant/attention/code_rows.h"

#include <vector>

#include "veloxquant/attention/tile_kernels.h"
#include "veloxquant/core/bit_packing.h"

namespace veloxquant::attention {

CodeOrder::CodeOrder(int bits, int64_t n, int64_t group)
    : bits_(bits),
      n_(n),
      planar_(is_planar(bits, n)),
      words_(static_cast<int64_t>(core::packed_words(static_cast<std::size_t>(n), bits))) {
  natural_.resize(static_cast<std::size_t>(n));
  const int64_t per_byte = 8 / bits, plane = n * bits / 8;
  for (int64_t e = 0; e < n; ++e) {
    natural_[static_cast<std::size_t>(e)] = static_cast<int32_t>(planar_ ? (e % plane) * per_byte + e / plane : e);
  }
  if (group <= 0) return;
  const int64_t step = planar_ ? per_byte : 1;
  for (int64_t e = 0; e < n;) {
    int64_t end = e + 1;
    while (end < n && natural(end) / group == natural(e) / group && natural(end) == natural(end - 1) + step) ++end;
    runs_.push_back({e, end - e, natural(e) / group});
    e = end;
  }
}

void CodeOrder::unpack_rows(const uint32_t* first_row, int64_t row_stride_words, int64_t n_rows, float* out) const {
  if (planar_) {
    const int64_t plane = n_ * bits_ / 8;
    kernels::unpack_planes(reinterpret_cast<const uint8_t*>(first_row), row_stride_words * 4, n_rows, plane, bits_,
                           out);
    return;
  }
  thread_local std::vector<uint8_t> codes;
  codes.resize(static_cast<std::size_t>(n_));
  for (int64_t j = 0; j < n_rows; ++j) {
    core::unpack_words(first_row + j * row_stride_words, static_cast<std::size_t>(n_), bits_, codes.data());
    for (int64_t e = 0; e < n_; ++e) out[j * n_ + e] = static_cast<float>(codes[static_cast<std::size_t>(e)]);
  }
}

void CodeOrder::permute(const float* natural_order, float* code_order) const {
  for (int64_t e = 0; e < n_; ++e) code_order[e] = natural_order[natural_[static_cast<std::size_t>(e)]];
}

void CodeOrder::add_to_natural(const float* code_order, float* natural_order) const {
  if (planar_ && bits_ == 1) {
    // Eight planes: no interleaving kernel; scalar scatter.
    for (int64_t e = 0; e < n_; ++e) natural_order[natural_[static_cast<std::size_t>(e)]] += code_order[e];
    return;
  }
  const int per_byte = planar_ ? 8 / bits_ : 1;
  kernels::add_planes_interleaved(code_order, n_ / per_byte, per_byte, natural_order);
}

}  // namespace veloxquant::attention
