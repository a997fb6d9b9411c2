#pragma once
// a2ats (A²ATS, He et al., "Retrieval-Based KV Cache Reduction via Windowed Rotary Position
// Embedding and Query-Aware Vector Quantization", ACL 2025 Findings, arXiv 2502.12665; spec §6
// row 40). Every key outside a recent window is product-vector-quantized: one codebook index per
// a2ats_sub_dim-wide sub-vector, 2^a2ats_codebook_bits centroids per sub-vector position, trained
// by k-means (core/kmeans.h) on the rows in hand when the first row leaves the window (the prefill
// in normal use), query-aware: each training point weighted by (1 - beta) + beta * n * (its share
// of the key-as-query attention mass, caches/kaq_mass.h). At each attention call the codes score
// every far row through per-query lookup tables (the paper's approximate attention scores), the
// max(ceil(a2ats_retrieval_fraction * far rows), a2ats_window) with the most approximate attention mass (summed over
// the kv head's query heads and the call's queries) are retrieved, and attention runs over them,
// the exact window and the call's own rows.
//
// The paper keeps the codes on the GPU and offloads the exact keys and values to the host; one
// memory here, so what the retrieval reads must be resident: the values are kept exact (input
// dtype), the exact far keys are not kept (the retrieved rows are scored from their codes).
//
// Storage (all counted by nbytes()), far rows allocated in 256-row steps:
//   codebook      F16 [D / sub, sub, 2^bits]   one per layer (all batch rows and kv heads), held
//                                              transposed (the lookup tables' and the encoder's
//                                              layout); state() saves it as [D / sub, 2^bits, sub]
//   codes         U8  [B, H, far, D / sub]     far row j = position j
//   far_values    input dtype [B, H, far, Dv]
//   tail_k/tail_v input dtype [B, H, window, D]  positions [far, offset)
// update_and_fetch() returns every row (far keys decoded from the codes): the retrieval happens
// in fused_attention, the path the host takes.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "A2ATS"). The three None fields are strings
// ("" = None): only None is supported.
struct A2atsOptions {
  int a2ats_codebook_bits = 8;
  int a2ats_sub_dim = 8;
  int a2ats_window = 128;
  int a2ats_b = 2048;
  bool a2ats_use_query_aware = true;
  double a2ats_beta = 0.5;
  double a2ats_retrieval_fraction = 0.20;
  double a2ats_rope_base = 10000.0;
  std::string a2ats_rope_scaling;
  std::string a2ats_query_h;
  std::string a2ats_codebook;
};

struct A2atsParams {
  int codebook_bits = 8, sub_dim = 8, window = 128;
  bool query_aware = true;
  double beta = 0.5, retrieval_fraction = 0.2;
  int64_t seed = 42;
};

class A2atsCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  static constexpr int64_t kMaxTrainingPoints = 2048;
  static constexpr int kKMeansIterations = 16;
  // Throws QuantizerConfigError naming the field for unsupported settings.
  explicit A2atsCache(const A2atsParams& params);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  bool is_trimmable() const override { return false; }  // dropped rows cannot come back
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "A2atsCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  // Far rows a call retrieves out of `far`: max(ceil(retrieval_fraction * far), window), at most far.
  int64_t retrieved_rows(int64_t far) const;
  int64_t far_rows() const { return far_rows_; }
  int64_t tail_rows() const { return offset_ - tail_start_; }
  bool trained() const { return codebook_.defined(); }
  // Centroid c of sub-vector m (sub_dim floats, decoded from f16); requires trained().
  std::vector<float> centroid(int64_t m, int64_t c) const;
  // Codes of far row j of (b, h) (D / sub bytes).
  const uint8_t* codes(int64_t b, int64_t h, int64_t j) const;
  // The positions the last fused call attended over, per (b, h) ascending: the retrieved far
  // rows, then the tail and the call's rows (empty before any call).
  const std::vector<int32_t>& last_positions(int64_t b, int64_t h) const;

 private:
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_far_rows(int64_t rows);
  void train(const std::vector<std::vector<float>>& pending_keys, int64_t n);
  // Key row j of (b, h) decoded from its codes, f32 [D].
  void decode_key(int64_t b, int64_t h, int64_t j, float* out) const;
  std::byte* far_value_row(int64_t b, int64_t h, int64_t j) const;
  // Chooses retrieved_; returns whether `far_dots` holds every far row's dot product per query
  // row (A2atsCallRows::far_dots), which the call's attention then reads.
  bool retrieve(const attention::AttentionCall& call, const float* centroids, std::vector<float>& far_dots);
  lm::KeysValues fetch_with(const lm::Tensor& keys, const lm::Tensor& values) const;

  A2atsParams p_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0, subs_ = 0, entries_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, tail_start_ = 0, far_rows_ = 0, far_capacity_ = 0;
  lm::Tensor codebook_, codes_, far_values_, tail_k_, tail_v_;
  // Per-call positions read ([B * H] lists, the driver's row positions; K + tail + s int32 per head).
  std::vector<std::vector<int32_t>> retrieved_;
};

A2atsParams a2ats_params(const KVCacheConfig& config);
// QuantizerConfigError naming the field and value.
void validate_a2ats_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_a2ats_cache(const KVCacheConfig& config);
MethodDescriptor a2ats_method();

}  // namespace veloxquant
