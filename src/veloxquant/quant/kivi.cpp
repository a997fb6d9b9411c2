#include "veloxquant/quant/kivi.h"

#include <string>
#include <vector>

#include "base/half.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/code_io.h"

namespace veloxquant::quant {

Kivi::Kivi(int dim, int bits, uint64_t /*seed: KIVI is deterministic*/, int group)
    : dim_((check_dim("kivi", dim), dim)), bits_((check_bits("kivi", bits, 1, 8), bits)), group_(group) {
  if (group < 1) throw QuantizerConfigError("kivi: group_size must be positive, got " + std::to_string(group));
  groups_ = core::groups_per_row(static_cast<std::size_t>(dim), static_cast<std::size_t>(group));
  code_index_bytes_ = core::dense_bytes(static_cast<std::size_t>(dim), bits);
}

void Kivi::encode(const float* x, std::size_t n, uint8_t* codes) const {
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<uint8_t> idx;
  thread_local std::vector<core::GroupParams> params;
  idx.resize(d);
  params.resize(groups_);
  for (std::size_t i = 0; i < n; ++i) {
    uint8_t* code = codes + i * code_bytes();
    core::quantize_per_token(x + i * d, 1, d, bits_, static_cast<std::size_t>(group_), idx.data(), params.data());
    core::pack_dense(idx.data(), d, bits_, code);
    for (std::size_t g = 0; g < groups_; ++g) {
      detail::write_u16(code + code_index_bytes_ + 4 * g, params[g].scale_f16);
      detail::write_u16(code + code_index_bytes_ + 4 * g + 2, params[g].min_f16);
    }
  }
}

void Kivi::decode(const uint8_t* codes, std::size_t n, float* out) const {
  const auto d = static_cast<std::size_t>(dim_);
  thread_local std::vector<uint8_t> idx;
  thread_local std::vector<core::GroupParams> params;
  idx.resize(d);
  params.resize(groups_);
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    core::unpack_dense(code, d, bits_, idx.data());
    for (std::size_t g = 0; g < groups_; ++g)
      params[g] = {detail::read_u16(code + code_index_bytes_ + 4 * g),
                   detail::read_u16(code + code_index_bytes_ + 4 * g + 2)};
    core::dequantize_per_token(idx.data(), 1, d, static_cast<std::size_t>(group_), params.data(), out + i * d);
  }
}

PreparedQuery Kivi::prepare_query(const float* query) const {
  PreparedQuery prepared;
  const auto d = static_cast<std::size_t>(dim_), g = static_cast<std::size_t>(group_);
  prepared.rotated.assign(query, query + d);
  prepared.lut.assign(groups_, 0.0f);  // per-group sums of the query
  for (std::size_t j = 0; j < d; ++j) prepared.lut[j / g] += query[j];
  return prepared;
}

void Kivi::score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const {
  const auto d = static_cast<std::size_t>(dim_), g = static_cast<std::size_t>(group_);
  thread_local std::vector<uint8_t> idx;
  idx.resize(d);
  for (std::size_t i = 0; i < n; ++i) {
    const uint8_t* code = codes + i * code_bytes();
    core::unpack_dense(code, d, bits_, idx.data());
    float total = 0.0f;
    for (std::size_t k = 0; k < groups_; ++k) {
      const std::size_t begin = k * g, end = begin + g < d ? begin + g : d;
      float dot = 0.0f;
      for (std::size_t j = begin; j < end; ++j) dot += query.rotated[j] * static_cast<float>(idx[j]);
      const float scale = base::f16_to_f32(detail::read_u16(code + code_index_bytes_ + 4 * k));
      const float lo = base::f16_to_f32(detail::read_u16(code + code_index_bytes_ + 4 * k + 2));
      total += scale * dot + lo * query.lut[k];
    }
    scores[i] = total;
  }
}

}  // namespace veloxquant::quant
