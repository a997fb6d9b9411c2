#pragma once
// turboquant_block's query-aware key split (key_split=..., docs/methods/turboquant_block.md;
// the offline study is docs/frontier.md, "q3: query-aware key split"): per kv head the D key
// channels are cut into groups by a calibrated weight, each group rotated by its own seeded
// Hadamard transform and coded at its own width, one block (one scale) per group.
//
// Why. One rotation of the whole head gives every coordinate the same error, but a score error
// is sum_c q_c e_c: what counts per channel is E[q_c^2] times the error there. Within a group
// the rotation still makes the error isotropic (sigma_g^2 per coordinate), so the expected
// score error is sum_g sigma_g^2 sum_{c in g} E[q_c^2] and bits pay most where the queries look
// *and* the keys vary: channels sorted by w_c = E[q_c^2] E[(k_c - mu_c)^2] go, in that order,
// to the groups as written (the widest first, by convention).
//
// The transform T_h of head h is a permutation (group 0's channels ascending, then group 1's,
// ...) followed by block-diagonal rotations Pi_g: orthogonal, so <T q, T k> = <q, k> and
// attention runs in the transformed basis as turboquant_block does in its rotated one. Each
// head stores its grouping as 2-bit labels per channel (up to 4 groups; D / 4 bytes per head).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "veloxquant/core/rotation.h"
#include "veloxquant/quant/block_lloyd_quant.h"

namespace veloxquant {

struct KeySplitGroup {
  int channels = 0;
  int bits = 0;
};

// "32:4,16:3,16:2" (channels:bits per group, widest first by convention). Throws
// QuantizerConfigError naming the problem: not channels:bits, channels not a positive multiple of
// 8 (whole 8-code chunks, whole bytes per group), bits outside 1..4, more than 4 groups.
std::vector<KeySplitGroup> parse_key_split(const std::string& text);

class SplitKeyCoder {
 public:
  static constexpr int kMaxGroups = 4;
  static constexpr uint64_t kGroupSeedSalt = 0x5bd1e995u;

  // Throws QuantizerConfigError when the groups' channels do not add up to head_dim.
  SplitKeyCoder(std::vector<KeySplitGroup> groups, int head_dim, uint64_t seed);

  int head_dim() const { return head_dim_; }
  int groups() const { return static_cast<int>(groups_.size()); }
  const KeySplitGroup& group(int g) const { return groups_[static_cast<std::size_t>(g)]; }
  // First transformed coordinate of group g, and its first code byte within a row.
  int offset(int g) const { return offsets_[static_cast<std::size_t>(g)]; }
  int code_offset(int g) const { return code_offsets_[static_cast<std::size_t>(g)]; }
  int code_bytes() const { return code_bytes_; }           // codes of one row
  int label_bytes() const { return (head_dim_ + 3) / 4; }  // 2-bit labels of one head
  // Group g's levels (Gaussian blocks of 32 divided by their absmax, as turboquant_block's).
  const quant::BlockLloydQuantizer& quantizer(int g) const { return *quantizers_[static_cast<std::size_t>(g)]; }

  // labels[c] = the group of channel c: channels by descending weight (ties: lower channel first)
  // fill group 0, then group 1, ...
  void labels_from_weights(const double* weights, uint8_t* labels) const;
  // Labels minimising the expected squared score error of the split model,
  //   J = sum_g mse_g * (sum_{c in g} E[q_c^2]) * (sum_{c in g} E[(k_c - mu_c)^2]) / channels_g
  // (within a group the rotation spreads the group's key variance evenly and the code's error is
  // mse_g of it per coordinate): started from labels_from_weights of the products, then channel
  // swaps between groups while one lowers J. Sorting by the product alone is J's optimum only
  // when E[q_c^2] or the variance is the same for every channel.
  void labels_from_statistics(const double* query_power, const double* key_variance, uint8_t* labels) const;
  // Group g's relative MSE per coordinate (encode_block_log8 on seeded Gaussian blocks).
  double group_mse(int g) const { return mse_[static_cast<std::size_t>(g)]; }
  void pack_labels(const uint8_t* labels, uint8_t* packed) const;
  // false when a label is out of range or a group's count is wrong (a corrupt state).
  bool unpack_labels(const uint8_t* packed, uint8_t* labels) const;
  // perm[p] = the channel at transformed position p (group by group, channels ascending).
  void permutation(const uint8_t* labels, int32_t* perm) const;

  // y = T x and x = T^T y for the head whose permutation is perm (D floats each; x != y).
  void forward(const int32_t* perm, const float* x, float* y) const;
  void inverse(const int32_t* perm, const float* y, float* x) const;
  // A transformed row (mean already removed): codes (code_bytes()) and one log8 scale per group.
  void encode(const float* y, uint8_t* codes, uint8_t* scales) const;
  void decode(const uint8_t* codes, const uint8_t* scales, float* y) const;

 private:
  std::vector<KeySplitGroup> groups_;
  int head_dim_;
  std::vector<int> offsets_, code_offsets_;
  int code_bytes_ = 0;
  std::vector<std::shared_ptr<const quant::BlockLloydQuantizer>> quantizers_;
  std::vector<std::shared_ptr<const core::Rotation>> rotations_;
  std::vector<double> mse_;
};

}  // namespace veloxquant
