#pragma once
// comm_vq (CommVQ, Li et al., "CommVQ: Commutative Vector Quantization for KV Cache Compression",
// ICML 2025, arXiv 2506.18879; spec §3.2 "CommVQ", §6 row 44).
//
// Keys only, as the original's serving cache: each post-RoPE key of head_dim D is cut into
// comm_vq_n_codebooks sub-vectors of D / n coordinates and each is replaced by one
// comm_vq_bits-bit code of its own codebook (defaults: 4 codes of 8 bits = 4 bytes per key, 64x
// smaller than f16 at D = 128, 32x at D = 64). The codebooks are trained by hard EM (seeded
// k-means, comm_vq_n_em_iters Lloyd iterations) on the keys of the first call, every head of the
// layer, and fixed afterwards; every later key is coded as it arrives. Values stay in the input
// dtype. Attention scores keys through per-query lookup tables LUT[t][k] = <q_t, c_k> (n * 2^bits
// floats: 4 x 256 = 16 K MACs to build, then 4 lookups per row), see caches/product_vq_rows.h.
//
// Storage (all counted by nbytes()), rows allocated in 256-row steps:
//   key_codes  U8 [B, H, rows, ceil(n * bits / 8)]
//   values     input dtype [B, H, rows, Dv]
//   codebooks  f32 [n][2^bits][D / n]
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/caches/product_vq.h"
#include "veloxquant/caches/product_vq_rows.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "CommVQ").
struct CommVqOptions {
  int comm_vq_bits = 8;
  int comm_vq_n_codebooks = 4;
  int comm_vq_n_em_iters = 20;
};

class CommVqCache : public lm::KVCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  // Training sub-vectors per codebook entry (an even stride over the first call's keys).
  static constexpr int64_t kPointsPerEntry = 16;
  // The first call trains on its leading whole blocks of this many rows (all of it when shorter).
  static constexpr int64_t kTrainBlock = 256;

  CommVqCache(int bits, int n_codebooks, int em_iters, int seed);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // Trimmable: rows are coded one at a time, so dropping the last n is exact; the codebooks stay,
  // which equals a cache fed only the kept tokens while those include the training rows
  // (trimming to empty drops them, and the next call trains again).
  bool is_trimmable() const override { return true; }
  int64_t trim(int64_t n) override;
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "CommVqCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  const pvq::ProductCodebook* codebook() const { return book_.get(); }
  const lm::Tensor& key_codes() const { return key_codes_; }
  void set_lut_choice(LutChoice c) { lut_ = c; }

 private:
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_rows(int64_t rows);
  lm::KeysValues fetch(lm::DType dtype) const;

  int bits_, n_books_, iters_, seed_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, capacity_ = 0;
  lm::Tensor key_codes_, values_;
  std::shared_ptr<const pvq::ProductCodebook> book_;  // immutable once trained; a clone copies it
  // The encoder's tables for encoder_book_ (held, so its address cannot be reused by a later
  // book): built once per book, not per step (a decode step allocates nothing).
  std::shared_ptr<const pvq::ProductCodebook> encoder_book_;
  std::shared_ptr<const pvq::Encoder> encoder_;
  LutChoice lut_ = LutChoice::automatic;
};

void validate_comm_vq_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_comm_vq_cache(const KVCacheConfig& config);
MethodDescriptor comm_vq_method();

}  // namespace veloxquant
