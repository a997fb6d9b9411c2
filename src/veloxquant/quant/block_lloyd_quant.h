#pragma once
// Block Lloyd-Max quantization of already-rotated coordinates (the storage of turboquant_block,
// docs/methods/turboquant_block.md): a row is cut into blocks of block_size coordinates (32 by
// default; 64, 128 or 256 halve the scale overhead each time); each block keeps one f16 scale s
// and b-bit codes on MSE-optimal levels: x_hat[i] = s * level[code[i]].
//
// Why this shape. After a random Hadamard rotation (QuaRot, arXiv 2404.00456; TurboQuant,
// arXiv 2504.19874) the coordinates of a key or value are close to Gaussian; the per-block scale
// (unlike TurboQuant's one norm per vector) tracks what the rotation leaves uneven between
// blocks, and costs 16 / 32 = 0.5 bit per element — exactly the overhead of q8_0/q5_0/q4_0, so
// b = 8/5/4 lands on their sizes.
//
// The levels are Lloyd-Max levels (symmetric, 2^b of them) for the coordinates of a Gaussian
// block divided by its own largest magnitude — the values the codes see — not for the
// unbounded Gaussian, whose outer levels a block of 32 never reaches (block_lloyd_quant.cpp has
// the measurements). Levels lie in (-1, 1]; the outermost is close to 1.
//
// The scale is chosen by MSE, not absmax: candidates absmax / level_max * g for a grid of g
// (g < 1 clips the largest values onto the outer level, which pays off when the rest gets a
// finer step), then one least-squares refit s = <x, l> / <l, l> for the chosen codes; the f16
// value actually stored is the one the codes are computed with, so the decoder sees exactly the
// error the search measured.
//
// Codes of a row are packed densely (core/bit_packing.h, index i at bits [i*b, (i+1)*b)), so a
// row of d coordinates takes ceil(d*b/8) bytes of codes + 2 * ceil(d/32) bytes of scales.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace veloxquant::quant {

struct BlockLevelTable;  // block_lloyd_quant.cpp: the solved levels of one (bits, block)

class BlockLloydQuantizer {
 public:
  static constexpr int kBlockSize = 32;  // the default block (llama.cpp's block size)
  static constexpr int kMaxBlockSize = 256;
  // From this width on the levels are evenly spaced, (2c - (2^b - 1)) / 2^b (block_lloyd_quant.cpp
  // says why); below it they are the block-normalized Lloyd-Max levels.
  static constexpr int kEvenLevelsFromBits = 7;

  // The level sets below kEvenLevelsFromBits: the block-normalized Lloyd-Max levels (default),
  // or evenly spaced ones, (2c - (2^b - 1)) / 2^b as from 7 bits on: a code is then its level as
  // a small integer and attention reads codes by shifting and masking instead of looking levels
  // up (attention/uniform_code_rows.h). About 15-20% more MSE at 3-5 bits (block_lloyd_quant.cpp).
  enum class Levels { kLloyd, kUniform };

  // bits in 1..8, block_size in {32, 64, 128, 256}; throws QuantizerConfigError naming the value.
  explicit BlockLloydQuantizer(int bits, int block_size = kBlockSize, Levels levels = Levels::kLloyd);

  int bits() const { return bits_; }
  int block_size() const { return block_; }
  // Whether the levels are evenly spaced, (2c - (2^b - 1)) / 2^b: levels=uniform, or bits >= 7.
  bool even_levels() const { return even_; }
  // The 2^bits levels (ascending, symmetric) and the 2^bits - 1 midpoints between them.
  const std::vector<float>& levels() const { return *levels_; }
  const std::vector<float>& boundaries() const { return *boundaries_; }
  // The levels as f16 bits (each level is an exact f16 value).
  const std::vector<uint16_t>& levels_f16() const;

  std::size_t blocks(int dim) const { return static_cast<std::size_t>((dim + block_ - 1) / block_); }
  std::size_t code_bytes(int dim) const;  // ceil(dim * bits / 8)
  // Bytes of one encoded row: codes + f16 scales.
  std::size_t row_bytes(int dim) const { return code_bytes(dim) + 2 * blocks(dim); }

  // One block of n <= block_size() values: writes n codes (one per byte), returns the f16 scale.
  uint16_t encode_block(const float* x, int n, uint8_t* codes) const;
  // The same search with every candidate rounded to a one-byte log scale (quant/log8_scale.h)
  // instead of f16; returns the scale's code (0: all-zero block).
  uint8_t encode_block_log8(const float* x, int n, uint8_t* codes) const;

  // A row of `dim` values: dense-packed codes (code_bytes(dim)) and blocks(dim) f16 scales.
  void encode_row(const float* x, int dim, uint8_t* packed, uint16_t* scales) const;
  void decode_row(const uint8_t* packed, const uint16_t* scales, int dim, float* out) const;
  // n_rows rows whose codes lie code_stride bytes and scales scale_stride scales apart, into
  // out[n_rows * dim], each plus offset[0..dim) when offset is not null (attention decodes a
  // tile per call: attention/dense_level_rows.h).
  void decode_rows(const uint8_t* packed, int64_t code_stride, const uint16_t* scales, int64_t scale_stride,
                   int64_t n_rows, int dim, const float* offset, float* out) const;

  // Index of the level nearest to v (ties go down, as core::Codebook::quantize).
  uint8_t nearest(float v) const;

 private:
  // Codes of x[0..n) under scale s; returns the squared error.
  double quantize_with_scale(const float* x, int n, float s, uint8_t* codes) const;
  // Of the candidate scales[0..n_scales) (at most the clip grid's 14), the first whose
  // quantize_with_scale error is strictly below best_err, as trying them one after another would
  // choose: lowers best_err, writes its codes and returns its index (-1: none, nothing written).
  // The errors are computed at once where quant/scale_trials.h can (even 8-bit levels, 1-4-bit
  // levels), the same doubles.
  int best_trial(const float* x, int n, const float* scales, int n_scales, double& best_err, uint8_t* codes) const;
  // The least-squares scale for fixed codes, min_s sum (x - s l)^2 = sum x l / sum l^2, or -1
  // unless both sums are positive (both encoders try it after their clip grid).
  float refit_scale(const float* x, int n, const uint8_t* codes) const;

  int bits_;
  int block_;
  bool even_;
  const std::vector<float>* levels_;
  const std::vector<float>* boundaries_;
  const BlockLevelTable* table_;  // levels, boundaries and nearest()'s bucket grid
};

// The levels for `bits` and `block_size` (solved once per process on a fixed seeded sample,
// then cached).
const std::vector<float>& block_levels(int bits, int block_size = BlockLloydQuantizer::kBlockSize,
                                       BlockLloydQuantizer::Levels levels = BlockLloydQuantizer::Levels::kLloyd);

// "lloyd" or "uniform" (the turboquant_block option `levels`); throws QuantizerConfigError
// naming the value otherwise.
BlockLloydQuantizer::Levels parse_block_levels(const std::string& name);
const char* block_levels_name(BlockLloydQuantizer::Levels levels);

}  // namespace veloxquant::quant
