#pragma once
// polar: PolarQuant (Han et al., arXiv 2502.02617). After the seeded rotation y = Pi x, each
// block of 16 coordinates goes through a recursive polar transform of 4 levels:
//   level 1: pairs (y_2i, y_2i+1)       -> radius, angle in [0, 2 pi)        (d/2 angles)
//   level l: pairs of level-(l-1) radii -> radius, angle in [0, pi/2]       (d/2^l angles)
// leaving one radius per 16 coordinates. Because the rotation makes coordinates ~ i.i.d.
// Gaussian, the angle densities are known and need no per-block normalisation: level 1 is
// uniform, level l >= 2 has f(psi) ~ (sin psi cos psi)^(n-1) with n = 2^(l-1); each level
// gets its Lloyd-Max codebook (lloyd_max.h). Bits per level: (b + 2, b, b, b) -- the paper's
// 4/2/2/2 at b = 2 -- and one bf16 radius per block: at b = 2, (32 + 8 + 4 + 2 + 16) bits per
// 16 coordinates = 3.875 bits per coordinate, the paper's figure.
// Code: the four levels' indices dense-packed one after the other, then d/16 bf16 radii
// (d = 128, b = 2: 46 + 16 = 62 bytes). Requires d divisible by 16.
// Deviation from the original's polar cache (spec §2.4): it keeps 4 bytes per angle and a
// norm; we store packed indices and per-block radii as the paper does.
// Scoring decodes in rotated space (table cos/sin of the centroids, O(d)) and dots with the
// once-rotated query; no key is ever inverse-rotated to be scored.
#include <vector>

#include "veloxquant/core/rotation.h"
#include "veloxquant/quant/quantizer.h"

namespace veloxquant::quant {

class Polar final : public Quantizer {
 public:
  static constexpr int kLevels = 4;
  Polar(int dim, int bits, uint64_t seed);

  std::string method() const override { return "polar"; }
  int dim() const override { return dim_; }
  int bits() const override { return bits_; }
  int level_bits(int level) const { return level_bits_[static_cast<std::size_t>(level - 1)]; }
  std::size_t code_bytes() const override { return angle_bytes_ + 2 * blocks_; }
  void encode(const float* x, std::size_t n, uint8_t* codes) const override;
  void decode(const uint8_t* codes, std::size_t n, float* out) const override;
  PreparedQuery prepare_query(const float* query) const override;
  void score(const PreparedQuery& query, const uint8_t* codes, std::size_t n, float* scores) const override;

 private:
  void decode_rotated(const uint8_t* code, float* y) const;  // y = Pi x_hat

  int dim_, bits_;
  std::size_t blocks_;
  std::size_t angle_bytes_;
  int level_bits_[kLevels];
  std::size_t level_offset_[kLevels];  // byte offset of each level's indices in a code
  std::vector<float> cos_[kLevels], sin_[kLevels];
  const std::vector<float>* boundaries_[kLevels];
  core::Rotation rotation_;
};

}  // namespace veloxquant::quant
