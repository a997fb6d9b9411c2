#include "veloxquant/caches/palu_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/half.h"
#include "lm/kernels/simd_dot.h"
#include "veloxquant/attention/affine_part_rows.h"
#include "veloxquant/caches/latent_cache.h"
#include "veloxquant/caches/quantized_blocks_tail.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/group_quant.h"
#include "veloxquant/core/linalg.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

namespace {
constexpr const char* kTypeName = "PaluCache";

void check_options(const PaluOptions& o) {
  if (o.palu_rank && *o.palu_rank < 1) {
    throw QuantizerConfigError("palu_rank must be >= 1 or None, got " + std::to_string(*o.palu_rank));
  }
  if (!(o.palu_energy_threshold > 0.0 && o.palu_energy_threshold <= 1.0)) {
    throw QuantizerConfigError("palu_energy_threshold must lie in (0, 1], got " +
                               std::to_string(o.palu_energy_threshold));
  }
  if (o.palu_n_head_groups < 1) {
    throw QuantizerConfigError("palu_n_head_groups must be >= 1, got " + std::to_string(o.palu_n_head_groups));
  }
  for (auto [name, bits] : {std::pair{"palu_hi_bit", o.palu_hi_bit}, std::pair{"palu_lo_bit", o.palu_lo_bit}}) {
    if (bits < 1 || bits > 8)
      throw QuantizerConfigError(std::string(name) + " must lie in [1, 8], got " + std::to_string(bits));
  }
  if (!(o.palu_hi_fraction >= 0.0 && o.palu_hi_fraction <= 1.0)) {
    throw QuantizerConfigError("palu_hi_fraction must lie in [0, 1], got " + std::to_string(o.palu_hi_fraction));
  }
  if (o.palu_group_size < 1 || o.palu_group_size > 4096) {
    throw QuantizerConfigError("palu_group_size must lie in [1, 4096], got " + std::to_string(o.palu_group_size));
  }
}

// One quantized part of a row: components [first, first + count) at `bits`, in groups (the row
// layout attention/affine_part_rows.h decodes).
using Part = attention::kernels::AffinePart;
using attention::kernels::AffinePlaneLayout;

std::vector<Part> parts_of(const PaluOptions& o, int64_t rank) {
  const int64_t hi =
      std::min<int64_t>(rank, static_cast<int64_t>(std::ceil(o.palu_hi_fraction * static_cast<double>(rank) - 1e-9)));
  std::vector<Part> parts;
  for (Part whole : {Part{0, hi, o.palu_hi_bit}, Part{hi, rank - hi, o.palu_lo_bit}}) {
    for (int64_t at = 0; at < whole.count; at += o.palu_group_size) {
      parts.push_back({whole.first + at, std::min<int64_t>(o.palu_group_size, whole.count - at), whole.bits});
    }
  }
  return parts;
}

class PaluCodec final : public LatentCodec {
 public:
  PaluCodec(const PaluOptions& o, bool values) : o_(o), values_(values) {}
  std::unique_ptr<LatentCodec> clone() const override {
    auto c = std::make_unique<PaluCodec>(*this);
    c->ranks_ = ranks_.defined() ? ranks_.clone() : lm::Tensor();
    return c;
  }
  void allocate(int64_t batch, int64_t groups, int64_t) override {
    groups_ = groups;
    ranks_ = lm::Tensor({batch, groups, 1, 1}, lm::DType::I32);
    parts_.assign(static_cast<std::size_t>(batch * groups), {});
    layouts_.assign(static_cast<std::size_t>(batch * groups), {});
  }
  int64_t choose_rank(int64_t b, int64_t g, const std::vector<double>& variance) override {
    const int64_t width = static_cast<int64_t>(variance.size());
    const int64_t r = o_.palu_rank ? std::min<int64_t>(*o_.palu_rank, width)
                                   : std::max<int64_t>(1, linalg::energy_rank_of(variance, o_.palu_energy_threshold));
    set_rank(b, g, r);
    return r;
  }
  void fit(int64_t, int64_t, const float*, int64_t, int64_t) override {}
  int64_t row_bytes(int64_t b, int64_t g) const override { return palu_row_bytes(o_, rank(b, g), values_); }
  void encode(int64_t b, int64_t g, const float* latent, uint8_t* row) const override {
    if (plain()) {
      for (int64_t i = 0; i < rank(b, g); ++i) {
        const uint16_t h = base::f32_to_f16(latent[i]);
        std::memcpy(row + 2 * i, &h, 2);
      }
      return;
    }
    uint8_t codes[4096];
    for (const Part& p : parts_[at(b, g)]) {
      const core::GroupParams params =
          core::quantize_group(latent + p.first, static_cast<std::size_t>(p.count), 1, p.bits, codes);
      std::memcpy(row, &params, 4);
      core::pack_dense(codes, static_cast<std::size_t>(p.count), p.bits, row + 4);
      row += 4 + core::dense_bytes(static_cast<std::size_t>(p.count), p.bits);
    }
  }
  void decode_rows(int64_t b, int64_t g, const uint8_t* first, int64_t stride, int64_t n, float* out) const override {
    const int64_t r = rank(b, g);
    if (plain()) {  // f16 latents (palu_quantize_values = false)
      for (int64_t j = 0; j < n; ++j) {
        lm::kernels::simd::f16_to_f32(reinterpret_cast<const uint16_t*>(first + j * stride), out + j * r, r);
      }
      return;
    }
    // Every part of every row of the tile in one SIMD pass (the same multiply and add as
    // core::dequantize_group).
    const std::vector<Part>& parts = parts_[at(b, g)];
    attention::kernels::decode_affine_part_rows(first, stride, n, parts.data(), static_cast<int64_t>(parts.size()), out,
                                                r);
  }
  bool plane_rows(int64_t b, int64_t g, PlaneRows* out) const override {
    if (plain()) return false;
    const AffinePlaneLayout& layout = layouts_[at(b, g)];
    if (!layout.usable) return false;
    const std::vector<Part>& parts = parts_[at(b, g)];
    *out = {parts.data(), static_cast<int64_t>(parts.size()), &layout};
    return true;
  }
  std::vector<lm::Tensor> state() const override { return {ranks_}; }
  void restore(const std::vector<lm::Tensor>& t) override {
    if (t.size() != 1 || t[0].shape() != ranks_.shape() || t[0].dtype() != lm::DType::I32) {
      throw base::FormatError("PaluCache::from_state: bad codec ranks");
    }
    for (int64_t b = 0; b < ranks_.dim(0); ++b) {
      for (int64_t g = 0; g < groups_; ++g) {
        const int64_t r = cache_rows::row_ptr<int32_t>(t[0], b, g, 0)[0];
        if (r < 1 || r > 4096) throw base::FormatError("PaluCache::from_state: bad rank " + std::to_string(r));
        set_rank(b, g, r);
      }
    }
  }
  std::size_t nbytes() const override { return ranks_.storage_bytes(); }
  std::vector<std::string> meta() const override {
    return {o_.palu_rank ? std::to_string(*o_.palu_rank) : std::string("None"),
            blocks_tail::exact_double(o_.palu_energy_threshold),
            std::to_string(o_.palu_n_head_groups),
            std::to_string(o_.palu_hi_bit),
            std::to_string(o_.palu_lo_bit),
            blocks_tail::exact_double(o_.palu_hi_fraction),
            std::to_string(o_.palu_group_size),
            std::to_string(o_.palu_quantize_values ? 1 : 0)};
  }
  std::size_t meta_size() const override { return 8; }
  void set_meta(const std::vector<std::string>& m) override {
    const char* who = "PaluCache::from_state";
    PaluOptions o;
    if (m[0] != "None") o.palu_rank = static_cast<int>(cache_rows::parse_meta_int(m[0], who, "rank"));
    o.palu_energy_threshold = blocks_tail::parse_meta_double(m[1], who, "energy threshold");
    o.palu_n_head_groups = static_cast<int>(cache_rows::parse_meta_int(m[2], who, "head groups"));
    o.palu_hi_bit = static_cast<int>(cache_rows::parse_meta_int(m[3], who, "hi bit"));
    o.palu_lo_bit = static_cast<int>(cache_rows::parse_meta_int(m[4], who, "lo bit"));
    o.palu_hi_fraction = blocks_tail::parse_meta_double(m[5], who, "hi fraction");
    o.palu_group_size = static_cast<int>(cache_rows::parse_meta_int(m[6], who, "group size"));
    o.palu_quantize_values = cache_rows::parse_meta_int(m[7], who, "quantize values") != 0;
    try {
      check_options(o);
    } catch (const QuantizerConfigError& e) {
      throw base::FormatError(std::string(who) + ": " + e.what());
    }
    o_ = o;
  }

 private:
  bool plain() const { return values_ && !o_.palu_quantize_values; }
  std::size_t at(int64_t b, int64_t g) const { return static_cast<std::size_t>(b * groups_ + g); }
  int64_t rank(int64_t b, int64_t g) const { return cache_rows::row_ptr<int32_t>(ranks_, b, g, 0)[0]; }
  void set_rank(int64_t b, int64_t g, int64_t r) {
    cache_rows::row_ptr<int32_t>(ranks_, b, g, 0)[0] = static_cast<int32_t>(r);
    parts_[at(b, g)] = parts_of(o_, r);
    const std::vector<Part>& parts = parts_[at(b, g)];
    layouts_[at(b, g)] = attention::kernels::affine_plane_layout(parts.data(), static_cast<int64_t>(parts.size()));
  }

  PaluOptions o_;
  bool values_;
  int64_t groups_ = 0;
  lm::Tensor ranks_;
  std::vector<std::vector<Part>> parts_;
  std::vector<AffinePlaneLayout> layouts_;  // per (b, g), with parts_
};

const PaluOptions& checked(const PaluOptions& o) {
  check_options(o);
  return o;
}
}  // namespace

int64_t palu_row_bytes(const PaluOptions& o, int64_t rank, bool values) {
  if (values && !o.palu_quantize_values) return 2 * rank;
  int64_t bytes = 0;
  for (const Part& p : parts_of(o, rank))
    bytes += 4 + static_cast<int64_t>(core::dense_bytes(static_cast<std::size_t>(p.count), p.bits));
  return std::max<int64_t>(bytes, 1);
}

std::unique_ptr<LatentCodec> make_palu_codec(const PaluOptions& options, bool values) {
  return std::make_unique<PaluCodec>(checked(options), values);
}

void validate_palu_options(const KVCacheConfig& config) { check_options(config.options<PaluOptions>()); }

std::shared_ptr<lm::KVCache> make_palu_cache(const PaluOptions& o) {
  check_options(o);
  return std::make_shared<LatentCache>(kTypeName, o.palu_n_head_groups, make_palu_codec(o, false),
                                       make_palu_codec(o, true));
}

std::shared_ptr<lm::KVCache> make_palu_cache(const KVCacheConfig& config) {
  validate_palu_options(config);
  return make_palu_cache(config.options<PaluOptions>());
}

MethodDescriptor palu_method() {
  MethodDescriptor m;
  m.name = "palu";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "K and V kept only as low-rank latents of a PCA fitted per head group on the prompt, quantized per token "
      "at mixed widths (leading palu_hi_fraction at palu_hi_bit, the rest at palu_lo_bit); attention scored and "
      "values summed in the latent space";
  m.paper = "Palu: KV-Cache Compression with Low-Rank Projection (Chang et al., ICLR 2025, arXiv 2407.21118)";
  m.deviations =
      "The projection is a PCA of the cached K/V of the first 64+ tokens (the prompt), per batch and head "
      "group, instead of an SVD of the projection weights on calibration data; no Walsh-Hadamard "
      "transform before quantization; rows before the fit stay in the input dtype; head groups = the "
      "largest divisor of the kv heads <= palu_n_head_groups.";
  m.docs = "docs/methods/palu.md";
  m.fields = {
      option_field("palu_rank", &PaluOptions::palu_rank,
                   "Latent components kept (None: palu_energy_threshold decides)"),
      option_field("palu_energy_threshold", &PaluOptions::palu_energy_threshold,
                   "Without palu_rank: keep the fewest components holding this share of the variance, (0, 1]"),
      option_field("palu_n_head_groups", &PaluOptions::palu_n_head_groups,
                   "Head groups sharing one latent (the largest divisor of the kv heads <= this)", 1),
      option_field("palu_hi_bit", &PaluOptions::palu_hi_bit, "Bits of the leading latent components", 1, 8),
      option_field("palu_lo_bit", &PaluOptions::palu_lo_bit, "Bits of the other latent components", 1, 8),
      option_field("palu_hi_fraction", &PaluOptions::palu_hi_fraction,
                   "Share of the latent components quantized at palu_hi_bit, [0, 1]"),
      option_field("palu_group_size", &PaluOptions::palu_group_size, "Latent components per (scale, min) group", 1,
                   4096),
      option_field("palu_quantize_values", &PaluOptions::palu_quantize_values,
                   "Quantize the value latents too (false: fp16 value latents)"),
  };
  m.validate = validate_palu_options;
  m.make_serving = [](const KVCacheConfig& c) { return make_palu_cache(c); };
  m.cache_type_name = kTypeName;
  m.make_restorable = [] { return make_palu_cache(PaluOptions{}); };
  return m;
}

}  // namespace veloxquant
