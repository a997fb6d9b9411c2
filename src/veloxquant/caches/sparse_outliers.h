#pragma once
// The sparse half of dense-and-sparse quantization (KVQuant, Hooper et al., NeurIPS 2024, arXiv
// 2401.18079, §3.4): a small fraction of elements is kept out of the quantizer so that the group
// ranges — and with them every other element's step — are set by the ordinary values.
//
// Per key group block (G tokens of one head, flushed together by a KIVI-layout cache), k_K =
// round(fraction * G * Dk) key elements and k_V = round(fraction * G * Dv) value elements are
// isolated: the ones farthest from their quantization group's median in units of that group's
// median absolute deviation (keys: a group is one channel over the G tokens; values: `group`
// channels of one token). A fixed count per block keeps the storage row-indexable. Each isolated
// element is replaced by its group's median before the (min, max) are taken, and after encoding
// its correction delta = exact - decoded is stored in f32, so decoded + delta gives the input back
// (exactly, up to f32 rounding of one addition).
//
// Storage (counted in nbytes): per K and V, indices u32 [B, H, groups, k] (row-in-block * D +
// channel, ascending) and deltas f32 [B, H, groups, k]: 8 bytes per outlier; the group capacity
// grows with the cache's quantized capacity.
#include <cstdint>
#include <vector>

#include "lm/tensor.h"

namespace veloxquant {

// Picks `k` outliers of a block x [rows, dim] (per_channel: a quantization group is one channel
// over all rows; else `group` consecutive channels of one row) by robust distance
// |x - median| / MAD of the element's group (ties to the lower index; rows with excluded[row] != 0
// are picked last). Writes their indices (row * dim + channel, ascending) and exact values, and
// replaces them in x by their group's median.
void isolate_outliers(float* x, int64_t rows, int64_t dim, bool per_channel, int64_t group, const uint8_t* excluded,
                      int64_t k, uint32_t* indices, float* exact);

class SparseOutliers {
 public:
  SparseOutliers() = default;
  explicit SparseOutliers(double fraction) : fraction_(fraction) {}

  bool enabled() const { return fraction_ > 0.0; }
  double fraction() const { return fraction_; }
  // Sizes k for blocks of `group` rows and allocates empty storage.
  void allocate(int64_t batch, int64_t heads, int64_t group, int64_t key_dim, int64_t value_dim);
  int64_t per_block(bool keys) const { return keys ? k_keys_ : k_values_; }
  // Grows to `capacity` blocks keeping the first `filled`.
  void reserve(int64_t filled, int64_t capacity);

  // Block `block` of (b, h): stores delta = exact - decoded[index] for its k outliers
  // (decoded: the block's rows [G, D] as the dense codes give them back).
  void record(bool keys, int64_t b, int64_t h, int64_t block, const uint32_t* indices, const float* exact,
              const float* decoded);
  // Block `from` of `source` (same shape; may be *this) copied to block `to`, every head (gear
  // closes up its block sets after choosing each block's format).
  void copy_block(const SparseOutliers& source, int64_t from, int64_t to);
  // Adds the stored deltas of rows [begin, end) of (b, h) into out[(row - begin) * D].
  void apply(bool keys, int64_t b, int64_t h, int64_t begin, int64_t end, float* out) const;
  // f(row, channel, delta) for every stored outlier of rows [begin, end) of (b, h).
  template <class F>
  void for_each(bool keys, int64_t b, int64_t h, int64_t begin, int64_t end, F&& f) const {
    if (!enabled() || begin >= end) return;
    const int64_t k = per_block(keys), dim = keys ? key_dim_ : value_dim_;
    // Head sizes are powers of two: a shift and a mask split an index, not a division.
    const bool pow2 = (dim & (dim - 1)) == 0;
    const int shift = pow2 ? __builtin_ctzll(static_cast<unsigned long long>(dim)) : 0;
    const uint32_t low = static_cast<uint32_t>(dim - 1);
    // The head's first block and the block strides once per call: row_ptr per block was a
    // non-inline Tensor::raw_data call each (~3 instructions per kv row at ctx 1024).
    const uint32_t* idx0 = indices(keys, b, h, 0);
    const float* delta0 = deltas(keys, b, h, 0);
    const int64_t idx_stride = (keys ? key_index_ : value_index_).strides()[2];
    const int64_t delta_stride = (keys ? key_delta_ : value_delta_).strides()[2];
    for (int64_t block = begin / group_; block * group_ < end; ++block) {
      const uint32_t* idx = idx0 + block * idx_stride;
      const float* delta = delta0 + block * delta_stride;
      const int64_t first = block * group_;
      if (pow2 && first >= begin && first + group_ <= end) {  // the whole block: no range test
        for (int64_t i = 0; i < k; ++i) f(first + (idx[i] >> shift), static_cast<int64_t>(idx[i] & low), delta[i]);
        continue;
      }
      for (int64_t i = 0; i < k; ++i) {
        const int64_t row = first + idx[i] / dim;
        if (row >= begin && row < end) f(row, static_cast<int64_t>(idx[i] % dim), delta[i]);
      }
    }
  }
  // The outliers of (b, h) block by block, for loops that split the index themselves (the fused
  // attention's per-tile corrections, caches/dense_and_sparse_rows.cpp): block g's k indices at
  // index + g * index_stride, its deltas at delta + g * delta_stride; an index is
  // (row-in-block << shift) | channel when dim is a power of two (shift < 0 otherwise).
  struct HeadBlocks {
    const uint32_t* index;
    const float* delta;
    int64_t index_stride, delta_stride, k, group, dim;
    int shift;
  };
  HeadBlocks head_blocks(bool keys, int64_t b, int64_t h) const {
    const int64_t dim = keys ? key_dim_ : value_dim_;
    const bool pow2 = dim > 0 && (dim & (dim - 1)) == 0;
    return {indices(keys, b, h, 0),
            deltas(keys, b, h, 0),
            (keys ? key_index_ : value_index_).strides()[2],
            (keys ? key_delta_ : value_delta_).strides()[2],
            per_block(keys),
            group_,
            dim,
            pow2 ? __builtin_ctzll(static_cast<unsigned long long>(dim)) : -1};
  }
  const uint32_t* indices(bool keys, int64_t b, int64_t h, int64_t block) const;
  const float* deltas(bool keys, int64_t b, int64_t h, int64_t block) const;
  int64_t group() const { return group_; }

  std::size_t nbytes() const;
  // (key indices, key deltas, value indices, value deltas) of the first `blocks` blocks.
  std::vector<lm::Tensor> state(int64_t blocks) const;
  void from_state(const std::vector<lm::Tensor>& tensors, std::size_t first, int64_t blocks, const char* who);
  SparseOutliers deep_copy() const;

 private:
  double fraction_ = 0.0;
  int64_t group_ = 0, key_dim_ = 0, value_dim_ = 0, k_keys_ = 0, k_values_ = 0;
  lm::Tensor key_index_, key_delta_, value_index_, value_delta_;
};

}  // namespace veloxquant
