#include "veloxquant/eviction/row_codec.h"

#include <cstring>
#include <vector>

#include "veloxquant/attention/affine_word_rows.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/rows/group_affine_codes.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/turboquant_rvq.h"

namespace veloxquant::eviction {
namespace {

class DtypeCodec final : public RowCodec {
 public:
  DtypeCodec(int dim, lm::DType dtype) : dim_(dim), dtype_(dtype) {}
  std::size_t row_bytes() const override { return static_cast<std::size_t>(dim_) * lm::dtype_size(dtype_); }
  void encode(const float* x, std::byte* row) const override {
    cache_rows::store_f32(x, static_cast<std::size_t>(dim_), row, dtype_);
  }
  void decode(const std::byte* row, float* x) const override {
    cache_rows::load_f32(row, dtype_, static_cast<std::size_t>(dim_), x);
  }
  bool exact() const override { return true; }

 private:
  int dim_;
  lm::DType dtype_;
};

class RvqCodec final : public RowCodec {
 public:
  RvqCodec(int dim, int bits, int64_t seed, quant::RvqStage2Scale stage2)
      : quantizer_(dim, bits, static_cast<uint64_t>(seed), stage2) {}
  std::size_t row_bytes() const override { return quantizer_.code_bytes(); }
  void encode(const float* x, std::byte* row) const override {
    quantizer_.encode(x, 1, reinterpret_cast<uint8_t*>(row));
  }
  void decode(const std::byte* row, float* x) const override {
    quantizer_.decode(reinterpret_cast<const uint8_t*>(row), 1, x);
  }
  bool exact() const override { return false; }
  const quant::TurboQuantRvq* rvq_quantizer() const override { return &quantizer_; }

 private:
  quant::TurboQuantRvq quantizer_;
};

// [words: packed_words(dim, bits) u32 | params: token_groups(dim, group) x (scale, min) f16].
// Rows sit at arbitrary byte offsets, so words and params go through aligned scratch.
class GroupAffineCodec final : public RowCodec {
 public:
  GroupAffineCodec(int dim, int bits, int group)
      : dim_(dim),
        bits_(bits),
        group_(group),
        words_(core::packed_words(static_cast<std::size_t>(dim), bits)),
        groups_(token_groups(dim, group)) {}
  std::size_t row_bytes() const override { return words_ * sizeof(uint32_t) + groups_ * sizeof(GroupParams16); }
  void encode(const float* x, std::byte* row) const override {
    thread_local std::vector<uint32_t> words;
    thread_local std::vector<GroupParams16> params;
    words.assign(words_, 0u);
    params.resize(groups_);
    encode_token_row(x, dim_, group_, bits_, words.data(), params.data());
    std::memcpy(row, words.data(), words_ * sizeof(uint32_t));
    std::memcpy(row + words_ * sizeof(uint32_t), params.data(), groups_ * sizeof(GroupParams16));
  }
  void decode(const std::byte* row, float* x) const override {
    thread_local std::vector<uint32_t> words;
    thread_local std::vector<GroupParams16> params;
    words.resize(words_);
    params.resize(groups_);
    std::memcpy(words.data(), row, words_ * sizeof(uint32_t));
    std::memcpy(params.data(), row + words_ * sizeof(uint32_t), groups_ * sizeof(GroupParams16));
    decode_token_row(words.data(), params.data(), dim_, group_, bits_, x);
  }
  void decode_rows(const std::byte* first_row, int64_t row_bytes, int64_t n_rows, int dim, float* out) const override {
    attention::kernels::AffineWordRows rows;
    rows.first_row = first_row;
    rows.row_bytes = row_bytes;
    rows.params_offset = static_cast<int64_t>(words_ * sizeof(uint32_t));
    rows.n_rows = n_rows;
    rows.dim = dim;
    rows.bits = bits_;
    rows.group = group_;
    attention::kernels::decode_affine_word_rows(rows, out);
  }
  bool exact() const override { return false; }

 private:
  int dim_, bits_, group_;
  std::size_t words_, groups_;
};

}  // namespace

void RowCodec::decode_rows(const std::byte* first_row, int64_t row_bytes, int64_t n_rows, int dim, float* out) const {
  for (int64_t j = 0; j < n_rows; ++j) decode(first_row + j * row_bytes, out + j * dim);
}

std::shared_ptr<const RowCodec> make_dtype_codec(int dim, lm::DType dtype) {
  return std::make_shared<DtypeCodec>(dim, dtype);
}

std::shared_ptr<const RowCodec> make_rvq_codec(int dim, int bits, int64_t seed, const std::string& stage2_scale) {
  return std::make_shared<RvqCodec>(dim, bits, seed, quant::parse_rvq_stage2_scale(stage2_scale));
}

std::shared_ptr<const RowCodec> make_group_affine_codec(int dim, int bits, int group) {
  return std::make_shared<GroupAffineCodec>(dim, bits, group);
}

StorageKind parse_storage_kind(const std::string& name) {
  if (name == "dtype") return StorageKind::kDtype;
  if (name == "turboquant_rvq") return StorageKind::kTurboQuantRvq;
  if (name == "kivi") return StorageKind::kKivi;
  throw QuantizerConfigError("eviction_storage must be 'dtype', 'turboquant_rvq' or 'kivi', got '" + name + "'");
}

const char* storage_kind_name(StorageKind kind) {
  switch (kind) {
    case StorageKind::kDtype:
      return "dtype";
    case StorageKind::kTurboQuantRvq:
      return "turboquant_rvq";
    case StorageKind::kKivi:
      return "kivi";
  }
  return "dtype";
}

StorageSpec storage_spec_from(const KVCacheConfig& config) {
  StorageSpec spec;
  spec.kind = parse_storage_kind(config.eviction.eviction_storage);
  spec.bits = config.bit_width_inlier.scalar();
  spec.group = config.kivi.kivi_group_size;
  spec.rvq_value_bits = config.turboquant_rvq.rvq_value_bits;
  spec.seed = config.seed;
  spec.rvq_stage2_scale = config.turboquant_rvq.rvq_stage2_scale;
  return spec;
}

std::shared_ptr<const RowCodec> make_key_codec(const StorageSpec& spec, int dim, lm::DType dtype) {
  switch (spec.kind) {
    case StorageKind::kDtype:
      return make_dtype_codec(dim, dtype);
    case StorageKind::kTurboQuantRvq:
      return make_rvq_codec(dim, spec.bits, spec.seed, spec.rvq_stage2_scale);
    case StorageKind::kKivi:
      return make_group_affine_codec(dim, spec.bits, spec.group);
  }
  return make_dtype_codec(dim, dtype);
}

std::shared_ptr<const RowCodec> make_value_codec(const StorageSpec& spec, int dim, lm::DType dtype) {
  switch (spec.kind) {
    case StorageKind::kDtype:
      return make_dtype_codec(dim, dtype);
    case StorageKind::kTurboQuantRvq:
      // The RVQ cache's value rule: the dtype, or group-affine per token in groups of 32.
      if (spec.rvq_value_bits == 0) return make_dtype_codec(dim, dtype);
      return make_group_affine_codec(dim, spec.rvq_value_bits, 32);
    case StorageKind::kKivi:
      return make_group_affine_codec(dim, spec.bits, spec.group);
  }
  return make_dtype_codec(dim, dtype);
}

}  // namespace veloxquant::eviction
