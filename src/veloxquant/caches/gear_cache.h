#pragma once
// gear (GEAR, Kang et al., arXiv 2403.05527; spec §6 #18): an ultra-low-bit quantizer whose error
// is corrected by two cheap terms, X ~ D + L + S:
//   D  uniform group quantization at gear_bits (KIVI's layout: keys per channel over a block of
//      gear_group_size tokens, values per token over channel groups of gear_group_size);
//   S  gear_sparse_fraction of each block's elements kept out of the quantizer and restored by an
//      exact f32 correction (caches/sparse_outliers.h, the robust-distance rule kvquant uses);
//   L  a low-rank approximation of what is left, R = X - D - S: the leading singular triplets of
//      each block's residual (caches/block_svd.h), gear_rank of them, or with gear_rank unset the
//      fewest that hold gear_energy_threshold of the residual's energy (the largest such count
//      over the block's heads, so every head reaches the threshold and all heads share one layout).
// Keys and values are compressed alike and separately. The incomplete last block (at most G - 1
// tokens) stays in the input dtype — GEAR's streaming buffer.
//
// Re-coded blocks (gear_recode, with the energy rule only; a deviation, docs/methods/gear.md): a
// block whose factors would take more bytes than coding it at the finer width recode_bits()
// (2 * gear_bits, at most 8) — and which that finer code approximates at least as well, squared
// error summed over the block's heads, keys and values apart — is stored at the finer width
// instead, with its outliers and no factors. A low-bit quantizer's residual is flat noise: the
// rule then keeps ~25 of 32 terms, factors larger than the dense block they approximate and
// slower to read than a finer code.
//
// Storage (all counted by nbytes()):
//   base_      GearBlockSet at gear_bits (caches/gear_block_set.h): codes, params, outliers
//   recoded_   GearBlockSet at recode_bits(), the re-coded blocks (empty without gear_recode)
//   block_format I32 [1, 1, blocks, 1]: 0 base + factors, 1 re-coded (in position order)
//   block_terms  I32 [1, 1, base blocks, 4]  (first key term, key rank, first value term, value rank)
//   key_left/value_left  F16 [B, H, terms, G]     sigma_i u_i over the block's rows
//   key_right            F16 [B, H, terms, Dk]    v_i in the key code order (attention/code_rows.h)
//   value_right          F16 [B, H, terms, Dv]    v_i in natural order
//   tail_k/tail_v        input dtype [B, H, G, D]
//   set positions        I32 [B, H, rows, 1] per set, only while both sets hold blocks (their rows
//                        interleave in position order)
// Fused attention: per set, the codes (KiviQuantizedRows), the outliers (DenseAndSparseRows) and,
// for the base set, the factors (LowRankRows) as one segment of the shared driver, the tail a
// last one; no dequantized copy.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/caches/block_svd.h"
#include "veloxquant/caches/gear_block_set.h"
#include "veloxquant/caches/sparse_outliers.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "GEAR").
struct GearOptions {
  int gear_bits = 2;
  std::optional<int> gear_rank;  // none: the energy rule
  double gear_energy_threshold = 0.90;
  double gear_sparse_fraction = 0.01;
  int gear_group_size = 32;
  bool gear_quantize_values = true;
  // Not in the original: energy-rule blocks whose factors cost more bytes than a finer code are
  // re-coded (false: the original's factors for every block).
  bool gear_recode = true;
};

// (clang-tidy 14 names the loop variable of the implicit copy assignment of its array members,
// '__i0', as this class's own reserved identifier: a false positive, hence the NOLINT.)
class GearCache : public lm::KVCache {  // NOLINT(bugprone-reserved-identifier)
 public:
  // rank: terms per block, or nullopt for the energy rule; recode: see the header comment.
  GearCache(int bits, int group_size, std::optional<int> rank, double energy_threshold, double sparse_fraction,
            bool recode = true);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // The original is accounting-only and not trimmable (spec §6 #18): trim removes nothing.
  bool is_trimmable() const override { return false; }
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "GearCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  int64_t frontier() const { return frontier_; }
  // Low-rank terms of block `block`: keys (which = 0) or values (1); 0 for a re-coded block.
  int64_t block_rank(int64_t block, int which) const;
  // Whether block `block` was re-coded at recode_bits() (then it has no factors).
  bool block_recoded(int64_t block) const;
  // The finer width re-coded blocks take: 2 * gear_bits, at most 8; re-coding is off (returns
  // gear_bits) without gear_recode, with a fixed gear_rank, or at 8 bits.
  int recode_bits() const { return recode_bits_; }
  // The original reports gear_bits as the average bits (the corrections are extra storage).
  double assigned_avg_bits() const { return bits_; }

 private:
  void allocate(const lm::Tensor& keys, const lm::Tensor& values);
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  void ensure_base_blocks(int64_t blocks);
  void ensure_terms(int which, int64_t terms);
  // Codes blocks [first_block, first_block + count) of every (b, h): block first_block + k's
  // f32 keys [G, Dk] at keys + (b * H + h) * key_head_stride + k * G * Dk, values likewise.
  void flush_blocks(int64_t first_block, int64_t count, const float* keys, int64_t key_head_stride, const float* values,
                    int64_t value_head_stride);
  // The base set's block `index` low-rank factors from every head's residual SVD, `rank` terms.
  void store_factors(int64_t index, const BlockSvd* key_svd, const BlockSvd* value_svd, const int64_t rank[2]);
  // Block `block` (position order) of (b, h) decoded into f32 [G, D]: codes, outliers and, for a
  // base block, the low-rank terms.
  void decode_block(bool keys, int64_t b, int64_t h, int64_t block, float* out) const;
  // Where a block lives: its set (0 base, 1 re-coded) and its index there (set_index_).
  void rebuild_block_index();
  lm::KeysValues fetch(lm::DType dtype) const;
  // Every complete block of every head decoded once (codes, outliers and the low-rank terms) into
  // f32 rows [B, H, >= frontier, D] of `keys` / `values` (grown as needed): the row source of a
  // call with many queries (prefill), where the fused per-block terms would be recomputed for
  // every block of 16 queries.
  void decode_blocks_f32(lm::Tensor& keys, lm::Tensor& values) const;

  int bits_, group_, recode_bits_;
  std::optional<int> rank_;
  double energy_, sparse_fraction_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0, frontier_ = 0;
  int64_t terms_used_[2] = {0, 0}, terms_capacity_[2] = {0, 0};
  GearBlockSet base_, recoded_;
  lm::Tensor block_format_, block_terms_, left_[2], right_[2];  // [0] keys, [1] values
  lm::Tensor tail_k_, tail_v_;
  lm::Tensor set_positions_[2];     // defined only while both sets hold blocks
  std::vector<int32_t> set_index_;  // per block: its index within its set (derived)
};

// Whether a block's factors (key_rank and value_rank f16 terms of G + D values each, per head) take
// more bytes than coding it at recode_bits instead of bits (per head: the extra code words of its G
// rows; the params are the same count at any width) — the re-coding rule's byte test.
bool gear_factors_cost_more(int64_t key_rank, int64_t value_rank, int64_t group, int64_t dk, int64_t dv, int bits,
                            int recode_bits);

// QuantizerConfigError naming the field and value; base::Unsupported for gear_quantize_values=false.
void validate_gear_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_gear_cache(const KVCacheConfig& config);
// The registration (registry/method_table.cpp lists it).
MethodDescriptor gear_method();

}  // namespace veloxquant
