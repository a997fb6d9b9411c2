#pragma once
// nsnquant (NSNQuant, Son, Choi & Yoo, NeurIPS 2025, arXiv 2505.18231; spec §6 #29): keys and
// values both go through Normalize-Shift-Normalize and a randomized Hadamard rotation so that
// every token's coordinates follow N(0, 1) (quant/nsn_transform.h), then residual vector
// quantization of nsn_subvector_dim-wide sub-vectors against one codebook built from synthetic
// Gaussian data (quant/nsn_codebook.h): calibration-free, one codebook for every layer and head.
// nsn_bits bits per element = stages * log2(nsn_codebook_size) / nsn_subvector_dim (2 bits =
// two stages of 256 codewords over 8 coordinates). The newest tokens wait in full precision in a
// residual buffer of nsn_residual_length rows; when it is full the whole chunk is quantized at
// once (its tokens are the Shift step's population), so the frontier is always a multiple of
// the chunk: frontier = floor(offset / R) * R.
//
// Storage (all counted by nbytes()), quantized rows allocated in 256-token steps (whole chunks):
//   key_codes / value_codes    U8  [B, H, rows, (D / sub) * stages]  sub-vector-major, stages inner
//   key_scales / value_scales  F16 [B, H, rows, 2]                   (a, b) = (n1 n2 / D, n1 / sqrt(D))
//   key_means / value_means    F16 [B, H, chunks, D]                 the chunk's Shift mean
//   tail_k / tail_v            input dtype [B, H, R, D]              the residual buffer
// The codebook is shared by the whole process (quant/nsn_codebook.h) and not counted here.
// Fused attention reads it all as one segment of the shared driver (caches/nsnquant_rows.h).
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/quant/nsn_transform.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "NSNQuant"), except nsn_bits: 0 (the default)
// follows bit_width_inlier, whose default 2 is the original's nsn_bits default — so `--bits` and
// per-layer bit lists reach this method as every other quantizer.
struct NsnQuantOptions {
  int nsn_bits = 0;
  int nsn_residual_length = 64;
  int nsn_codebook_size = 256;
  int nsn_subvector_dim = 8;
  int nsn_seed = 1234;
  int nsn_max_ctx = 8192;
};

class NsnQuantCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  // Throws QuantizerConfigError naming the field for unsupported settings (validate_nsnquant_options).
  NsnQuantCache(int bits, int residual_length, int codebook_size, int subvector_dim, int seed);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // Trimmable: the frontier snaps down to the chunk edge at or below the new offset (what a cache
  // fed only the kept tokens has). A chunk that reopens comes back to the residual buffer decoded
  // from its codes (the exact rows are not kept — that would cost the memory saved); an aligned
  // trim, or one that reopens no chunk, is exact.
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "NsnQuantCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  int64_t frontier() const { return frontier_; }
  int stages() const { return stages_; }
  // The key / value transforms (built at the first update; null before).
  const quant::NsnTransform* key_transform() const { return kt_.get(); }
  const quant::NsnTransform* value_transform() const { return vt_.get(); }

 private:
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_rows(int64_t rows);
  // Rows [begin, end) of (b, h) decoded into f32 [end - begin, D], model basis.
  void decode_rows(bool keys, int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const;
  lm::KeysValues fetch(lm::DType dtype) const;

  int bits_, chunk_, entries_, sub_, seed_, stages_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, frontier_ = 0, capacity_ = 0;  // capacity_: quantized rows, a multiple of the chunk
  lm::Tensor key_codes_, value_codes_, key_scales_, value_scales_, key_means_, value_means_, tail_k_, tail_v_;
  // Immutable, shared by clones (the codebook inside is shared by the whole process).
  std::shared_ptr<const quant::NsnTransform> kt_, vt_;
};

// nsn_bits, or bit_width_inlier when nsn_bits is 0; QuantizerConfigError naming the field otherwise.
int resolved_nsn_bits(const KVCacheConfig& config);
// QuantizerConfigError naming the field and value.
void validate_nsnquant_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_nsnquant_cache(const KVCacheConfig& config);
// The registration (registry/method_table.cpp lists it).
MethodDescriptor nsnquant_method();

}  // namespace veloxquant
