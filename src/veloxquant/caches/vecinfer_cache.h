#pragma once
// vecinfer (VecInfer, Yao et al., "Efficient LLM Inference with Low-Bit KV Cache via
// Outlier-Suppressed Vector Quantization", arXiv 2510.06175; spec §3.2 "VecInfer", §6 #6).
//
// Keys: per-channel smoothing (divide channel c by s_c = sqrt(max |k_c|) over the training rows)
// then the orthonormal Walsh-Hadamard rotation spread the outlier channels over all coordinates,
// so one codebook of 2^key_codebook_bits key_sub_dim-wide codewords serves every sub-vector
// position; values: product VQ of value_sub_dim-wide sub-vectors, one codebook of
// 2^value_codebook_bits entries per position. Codebooks (and the smoothing factors) are trained
// by seeded k-means on the rows of the first flush (the prefill when there is one) and fixed
// afterwards. The newest tokens wait in the input dtype in a residual window of residual_length
// rows, as in KIVI; a full window is coded at once, so frontier = floor(offset / R) * R.
//
// Storage (all counted by nbytes()), coded rows allocated in 256-row steps:
//   key_codes    U8 [B, H, rows, ceil(D / key_sub_dim * key_codebook_bits / 8)]   (default: 24 bytes at D 64)
//   value_codes  U8 [B, H, rows, ceil(D / value_sub_dim * value_codebook_bits / 8)] (default: 8 bytes)
//   tail_k/v     input dtype [B, H, R, D]
//   codebooks    f32: keys 2^kb * key_sub_dim, values (D / value_sub_dim) * 2^vb * value_sub_dim
//   smoothing    f32 [D]
// Attention runs on the codes through the shared driver (caches/product_vq_rows.h): queries are
// smoothed and rotated once per step; at the default geometry keys are scored and values
// accumulated straight from their codewords (attention/codeword_rows.h), otherwise tiles are
// decoded (or keys looked up in per-query tables past 2^bits coded rows).
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/caches/product_vq.h"
#include "veloxquant/caches/product_vq_rows.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "VecInfer"). residual_length (default 128) is
// shared with KIVI in the original and here too: it is KIVIOptions::residual_length
// (config.kivi), borrowed. The array fields smooth_factors, key_codebook and value_codebook are
// not options here: they are trained at the first flush.
struct VecInferOptions {
  int key_sub_dim = 4;
  int value_sub_dim = 8;
  int key_codebook_bits = 12;
  int value_codebook_bits = 8;
};

// Smoothing + normalized Hadamard: keys k' = H(k / s) / sqrt(D), queries q' = H(q * s) / sqrt(D).
class VecInferBasis final : public KeyBasis {
 public:
  explicit VecInferBasis(std::span<const float> smooth);
  void to_code_basis(const float* query, float* out) const override;
  void key_to_code_basis(const float* key, float* out) const;
  void key_from_code_basis(const float* coded, float* out) const;
  const pvq::FloatArray& smooth() const { return smooth_; }

 private:
  pvq::FloatArray smooth_;
  int m_ = 1;
  std::size_t n_ = 1;
  float norm_ = 1.0f;
};

// What the first flush trains; immutable afterwards (a clone copies it: nbytes() counts it).
struct VecInferCodec {
  VecInferBasis basis;
  pvq::ProductCodebook keys, values;
};

class VecInferCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  // k-means budget: Lloyd iterations and training sub-vectors per codebook entry.
  static constexpr int kTrainIterations = 10;
  static constexpr int64_t kKeyPointsPerEntry = 4;
  static constexpr int64_t kValuePointsPerEntry = 16;

  // Throws QuantizerConfigError naming the field for unsupported settings. residual_length 0
  // codes every row at once (as 1).
  VecInferCache(int key_sub_dim, int value_sub_dim, int key_bits, int value_bits, int residual_length, int seed);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // Trimmable: the frontier snaps down to the window edge at or below the new offset; a reopened
  // window comes back decoded from its codes. Codebooks stay (they were trained on the first
  // flush); trimming to empty drops them.
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "VecInferCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  int64_t frontier() const { return frontier_; }
  const VecInferCodec* codec() const { return codec_.get(); }
  const lm::Tensor& key_codes() const { return key_codes_; }
  const lm::Tensor& value_codes() const { return value_codes_; }
  // Tests: force or forbid the key lookup tables in fused attention.
  void set_lut_choice(LutChoice c) { lut_ = c; }

 private:
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_rows(int64_t rows);
  void train(const std::vector<float>& pending_k, const std::vector<float>& pending_v, int64_t pending, int64_t coded);
  // Rows [begin, end) of (b, h) decoded into f32 [end - begin, D] in the model's basis.
  void decode_rows(bool keys, int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const;
  lm::KeysValues fetch(lm::DType dtype) const;

  int key_sub_, value_sub_, key_bits_, value_bits_, window_, seed_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, frontier_ = 0, capacity_ = 0;
  lm::Tensor key_codes_, value_codes_, tail_k_, tail_v_;
  std::shared_ptr<const VecInferCodec> codec_;
  LutChoice lut_ = LutChoice::automatic;
};

void validate_vecinfer_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_vecinfer_cache(const KVCacheConfig& config);
MethodDescriptor vecinfer_method();

}  // namespace veloxquant
