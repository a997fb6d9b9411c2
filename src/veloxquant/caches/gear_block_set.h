#pragma once
// One set of gear's blocks coded alike (caches/gear_cache.h): KIVI's group code at one bit width
// plus the sparse outliers, block after block in the set's own order. gear holds two: the base
// code (gear_bits, corrected by low-rank factors kept beside it) and the re-coded blocks (a finer
// code, no factors) that its energy rule moves there when the factors would cost more bytes than
// the finer code and approximate no better.
//
// Storage (all counted by nbytes()), allocated in 256-token steps:
//   key_codes    U32 [B, H, blocks * G, words(Dk, b)]   value_codes  U32 [B, H, blocks * G, words(Dv, b)]
//   key_params   F16 [B, H, blocks, 2 * Dk]              value_params F16 [B, H, blocks * G, 2 * ceil(Dv / G)]
//   outliers     (sparse_outliers.h) u32 index + f32 delta per outlier, fixed count per block
#include <cstdint>
#include <memory>
#include <vector>

#include "lm/tensor.h"
#include "veloxquant/attention/code_rows.h"
#include "veloxquant/caches/sparse_outliers.h"

namespace veloxquant {

class GearBlockSet {
 public:
  static constexpr int64_t kGrowthStep = 256;
  GearBlockSet() = default;
  GearBlockSet(int bits, int group, double sparse_fraction) : bits_(bits), group_(group), outliers_(sparse_fraction) {}

  // Empty storage for heads of dk / dv channels.
  void allocate(int64_t batch, int64_t heads, int64_t dk, int64_t dv);
  // Room for `blocks` blocks (whole 256-token steps); the first blocks() kept.
  void reserve(int64_t blocks);
  int64_t blocks() const { return blocks_; }
  int64_t capacity() const { return capacity_; }
  void set_blocks(int64_t blocks) { blocks_ = blocks; }
  int bits() const { return bits_; }

  // One part's rows with its outliers taken out (they replaced by their group's median): the same
  // for every bit width, so gear isolates once and codes the result at both widths.
  struct Isolated {
    std::vector<float> x;         // [G, D]
    std::vector<uint32_t> index;  // the outliers' positions (row * D + channel), ascending
    std::vector<float> exact;     // their values
  };
  void isolate(int which, const float* src, Isolated& out) const;
  // Codes an isolated part `which` (0 keys, 1 values) of (b, h) into block `index` (< capacity()):
  // the rest group-coded, the outliers' deltas recorded against the stored codes. decoded [G, D]:
  // what a reader gets back (codes plus outliers).
  void code_isolated(int64_t index, int64_t b, int64_t h, int which, const Isolated& part, float* decoded);
  // isolate, then code_isolated.
  void code_part(int64_t index, int64_t b, int64_t h, int which, const float* src, float* decoded);
  // Block `index` of (b, h) decoded into f32 [G, D]: the codes, plus the outliers' deltas if
  // with_outliers.
  void decode_part(bool keys, int64_t b, int64_t h, int64_t index, bool with_outliers, float* out) const;
  // Block `from` of `source` (a set of the same bits and shape; may be *this) copied to block `to`.
  void copy_block(const GearBlockSet& source, int64_t from, int64_t to);

  std::size_t nbytes() const;
  // (key codes, key params, value codes, value params, [4 outlier tensors]) of the first blocks().
  std::vector<lm::Tensor> state() const;
  std::size_t state_size() const { return outliers_.enabled() ? 8 : 4; }
  // Restores blocks() = `blocks` from state[first, first + state_size()) after allocate().
  void from_state(const std::vector<lm::Tensor>& state, std::size_t first, int64_t blocks, const char* who);
  GearBlockSet deep_copy() const;

  const lm::Tensor& key_codes() const { return key_codes_; }
  const lm::Tensor& key_params() const { return key_params_; }
  const lm::Tensor& value_codes() const { return value_codes_; }
  const lm::Tensor& value_params() const { return value_params_; }
  const SparseOutliers& outliers() const { return outliers_; }
  const attention::CodeOrder& key_order() const { return *key_order_; }
  const attention::CodeOrder& value_order() const { return *value_order_; }
  // Natural key channel -> its code-order position (what DenseAndSparseRows looks outliers up by).
  const std::vector<int32_t>& key_position() const { return *key_position_; }

 private:
  int bits_ = 2, group_ = 32;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0, blocks_ = 0, capacity_ = 0;
  lm::Tensor key_codes_, key_params_, value_codes_, value_params_;
  SparseOutliers outliers_;
  std::shared_ptr<const attention::CodeOrder> key_order_, value_order_;
  std::shared_ptr<const std::vector<int32_t>> key_position_;
};

}  // namespace veloxquant
