#include "veloxquant/quant/block_lloyd_quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <mutex>

#include "base/half.h"
#include "veloxquant/quant/log8_scale.h"
#include "veloxquant/attention/dense_level_rows.h"
#include "veloxquant/core/bit_packing.h"
#include "veloxquant/core/rng.h"
#include "veloxquant/quant/boundary_counts.h"
#include "veloxquant/quant/scale_trials.h"
#include "veloxquant/errors.h"

namespace veloxquant::quant {

struct BlockLevelTable {
  std::vector<float> levels, boundaries;
  std::vector<uint16_t> levels_f16;  // the same levels as f16 bits (they are exact halves)
  // A uniform grid over the boundaries for nearest(): bucket i starts at
  // lo + i / inv_width, and start[i] counts the boundaries below bucket i - 1's start, so a
  // search from it never starts past the answer even when the bucket index rounds one up.
  float lo = 0.0f, inv_width = 0.0f;
  std::vector<uint8_t> start;
};

namespace {

// Buckets per level: enough that a search from the bucket's start crosses a boundary or two.
constexpr int kBucketsPerLevel = 4;

void check_bits(int bits) {
  if (bits < 1 || bits > 8) {
    throw QuantizerConfigError("turboquant_block: bits must lie in [1, 8], got " + std::to_string(bits));
  }
}

void build_buckets(BlockLevelTable& t) {
  const std::vector<float>& b = t.boundaries;
  const std::size_t n_buckets = kBucketsPerLevel * t.levels.size();
  t.lo = b.front();
  const float width = (b.back() - b.front()) / static_cast<float>(n_buckets);
  t.inv_width = width > 0.0f ? 1.0f / width : 0.0f;
  t.start.assign(n_buckets, 0);
  for (std::size_t i = 0; i < n_buckets; ++i) {
    const float edge = t.lo + static_cast<float>(i == 0 ? 0 : i - 1) * width;
    t.start[i] = static_cast<uint8_t>(std::lower_bound(b.begin(), b.end(), edge) - b.begin());
  }
}

// Lloyd-Max levels of the coordinates of a block of `block` standard normal values divided
// by the block's largest magnitude (the density the codes actually see once a block is scaled
// by its absmax; see the header). Solved on a fixed, seeded sample: 2^20 values,
// symmetric levels fitted to |y| with prefix sums over the sorted sample, so one iteration costs
// O(levels * log n). The point mass at |y| = 1 (each block's own maximum) is part of the sample.
//
// Why not the Gaussian's own levels (core/lloyd_max.h): a block of 32 values never reaches the
// Gaussian tails those levels are spread over. Measured on 20,000 Gaussian blocks with the MSE
// scale search: equal at b <= 4 (b = 4: 0.00605 vs 0.00599 relative MSE), better from b = 5 on
// (0.00150 vs 0.00164) and 10x better at b = 8 (0.000027 vs 0.00027), where the Gaussian levels
// waste most of their range; llama.cpp's uniform q*_0 grid gives 0.0303 / 0.00735 / 0.00182 /
// 0.000030 at b = 3 / 4 / 5 / 8.
BlockLevelTable solve_block_levels(int bits, int block_size) {
  const int blocks = (1 << 20) / block_size;
  constexpr uint64_t kSeed = 0x5eedb10cULL;
  core::Rng rng(kSeed);
  std::vector<double> y;
  y.reserve(static_cast<std::size_t>(blocks) * static_cast<std::size_t>(block_size));
  std::vector<double> block(static_cast<std::size_t>(block_size));
  for (int b = 0; b < blocks; ++b) {
    double absmax = 0.0;
    for (double& v : block) {
      v = std::fabs(rng.normal());
      absmax = std::max(absmax, v);
    }
    for (double v : block) y.push_back(v / absmax);
  }
  std::sort(y.begin(), y.end());
  std::vector<double> prefix(y.size() + 1, 0.0);
  for (std::size_t i = 0; i < y.size(); ++i) prefix[i + 1] = prefix[i] + y[i];
  const int half = std::max(1, (1 << bits) / 2);  // positive levels (bits = 1: one, mirrored)
  std::vector<double> c(static_cast<std::size_t>(half));
  for (int k = 0; k < half; ++k)
    c[static_cast<std::size_t>(k)] = y[static_cast<std::size_t>((k + 0.5) / half * static_cast<double>(y.size()))];
  for (int iteration = 0; iteration < 2000; ++iteration) {
    double largest_move = 0.0;
    std::size_t lo = 0;
    for (int k = 0; k < half; ++k) {
      // Cell k holds the sample values below the midpoint to the next level.
      const std::size_t hi =
          k + 1 < half
              ? static_cast<std::size_t>(
                    std::upper_bound(y.begin(), y.end(),
                                     0.5 * (c[static_cast<std::size_t>(k)] + c[static_cast<std::size_t>(k) + 1])) -
                    y.begin())
              : y.size();
      if (hi > lo) {
        const double centroid = (prefix[hi] - prefix[lo]) / static_cast<double>(hi - lo);
        largest_move = std::max(largest_move, std::fabs(centroid - c[static_cast<std::size_t>(k)]));
        c[static_cast<std::size_t>(k)] = centroid;
      }
      lo = std::max(lo, hi);
    }
    if (largest_move < 1e-9) break;
  }
  BlockLevelTable t;
  for (int k = half - 1; k >= 0; --k) t.levels.push_back(static_cast<float>(-c[static_cast<std::size_t>(k)]));
  for (int k = 0; k < half; ++k) t.levels.push_back(static_cast<float>(c[static_cast<std::size_t>(k)]));
  return t;
}

// From 7 bits on, evenly spaced levels (2c - (2^b - 1)) / 2^b, c < 2^b: exact in f16 and f32,
// so a code is its level as a small integer (2c - 2^b + 1, step 2^-b) and attention scores and
// sums 8-bit codes by widening them (attention/block_level_key_scores.h,
// block_level_value_sums.h) instead of looking 256 levels up. Measured on Gaussian rows with the
// MSE scale search (block_lloyd_quant_test's rows, 128 x 1000 values): relative MSE at b = 8 is
// 2.63e-5 with these levels, 2.40e-5 with the block-normalized Lloyd-Max levels, 2.84e-5 with
// llama.cpp's q8_0 rule: 10% more error than Lloyd-Max, still less than q8_0's.
BlockLevelTable even_levels(int bits) {
  BlockLevelTable t;
  const int n = 1 << bits;
  for (int c = 0; c < n; ++c) t.levels.push_back(static_cast<float>(2 * c - (n - 1)) / static_cast<float>(n));
  return t;
}

int block_index(int block_size) {
  switch (block_size) {
    case 32:
      return 0;
    case 64:
      return 1;
    case 128:
      return 2;
    case 256:
      return 3;
    default:
      throw QuantizerConfigError("turboquant_block: block size must be 32, 64, 128 or 256, got " +
                                 std::to_string(block_size));
  }
}

// Evenly spaced levels at this width: asked for (levels=uniform) or from kEvenLevelsFromBits on.
bool uses_even_levels(int bits, BlockLloydQuantizer::Levels levels) {
  return levels == BlockLloydQuantizer::Levels::kUniform || bits >= BlockLloydQuantizer::kEvenLevelsFromBits;
}

const BlockLevelTable& level_table(int bits, int block_size, BlockLloydQuantizer::Levels levels) {
  check_bits(bits);
  // Slots 0..35: Lloyd-Max levels per (bits, block); 36..44: evenly spaced levels per bits (they
  // do not depend on the block).
  const bool even = uses_even_levels(bits, levels);
  const std::size_t slot = even
                               ? std::size_t{9} * 4 + static_cast<std::size_t>(bits)
                               : static_cast<std::size_t>(bits) * 4 + static_cast<std::size_t>(block_index(block_size));
  if (even) block_index(block_size);  // still refuses a bad block size
  static std::array<BlockLevelTable, 9 * 4 + 9> tables;
  static std::array<std::once_flag, 9 * 4 + 9> once;
  std::call_once(once[slot], [bits, block_size, slot, even] {
    BlockLevelTable& t = tables[slot];
    t = even ? even_levels(bits) : solve_block_levels(bits, block_size);
    // Levels are kept as f16 values (a change of at most 2^-12 relative, far below the code's
    // own error), so the tile decoder can hold them in byte-shuffle tables of halves and decode
    // exactly what the scalar reference decodes (attention/dense_level_rows.cpp). Rounding is
    // symmetric, so the levels stay symmetric; they stay strictly ascending (checked).
    for (float& level : t.levels) {
      t.levels_f16.push_back(base::f32_to_f16(level));
      level = base::f16_to_f32(t.levels_f16.back());
    }
    for (std::size_t k = 0; k + 1 < t.levels.size(); ++k) {
      if (!(t.levels[k] < t.levels[k + 1])) {
        throw QuantizerConfigError("turboquant_block: levels for " + std::to_string(bits) +
                                   " bits collide once rounded to f16");
      }
    }
    t.boundaries.resize(t.levels.size() - 1);
    // Nearest-level boundaries: the midpoints (Lloyd's condition).
    for (std::size_t k = 0; k + 1 < t.levels.size(); ++k) t.boundaries[k] = 0.5f * (t.levels[k] + t.levels[k + 1]);
    build_buckets(t);
  });
  return tables[slot];
}

// The grid of clip factors g tried for scale = absmax / level_max * g (see the header).
constexpr std::array<float, 14> kClipGrid = {0.40f, 0.45f, 0.50f, 0.55f, 0.60f, 0.65f, 0.70f,
                                             0.75f, 0.80f, 0.85f, 0.90f, 0.95f, 1.00f, 1.05f};

// The most candidates best_trial compares at once (the grid; the refit is tried on its own).
constexpr std::size_t kMaxTrials = kClipGrid.size();

// The largest finite f16 scale; a larger one would decode to inf.
constexpr float kMaxScale = 65504.0f;

}  // namespace

const std::vector<float>& block_levels(int bits, int block_size, BlockLloydQuantizer::Levels levels) {
  return level_table(bits, block_size, levels).levels;
}

BlockLloydQuantizer::Levels parse_block_levels(const std::string& name) {
  if (name == "lloyd") return BlockLloydQuantizer::Levels::kLloyd;
  if (name == "uniform") return BlockLloydQuantizer::Levels::kUniform;
  throw QuantizerConfigError("levels for 'turboquant_block' must be 'lloyd' or 'uniform', got '" + name + "'");
}

const char* block_levels_name(BlockLloydQuantizer::Levels levels) {
  return levels == BlockLloydQuantizer::Levels::kUniform ? "uniform" : "lloyd";
}

BlockLloydQuantizer::BlockLloydQuantizer(int bits, int block_size, Levels levels)
    : bits_(bits), block_(block_size), even_(uses_even_levels(bits, levels)) {
  const BlockLevelTable& t = level_table(bits, block_size, levels);
  levels_ = &t.levels;
  boundaries_ = &t.boundaries;
  table_ = &t;
}

std::size_t BlockLloydQuantizer::code_bytes(int dim) const {
  return core::dense_bytes(static_cast<std::size_t>(dim), bits_);
}

namespace {

// Number of boundaries strictly below v. The encoder asks this 15 times per coordinate (the clip
// grid), so it starts from a bucket of a uniform grid instead of a binary search; the answer is
// the same (the tests compare it with std::lower_bound). Inlined into the encode loop.
inline uint8_t nearest_level(const BlockLevelTable& t, float v) {
  const float* b = t.boundaries.data();
  const std::size_t n = t.boundaries.size();
  if (!(v > b[0])) return 0;  // also NaN, which no boundary is below
  if (v > b[n - 1]) return static_cast<uint8_t>(n);
  const float at = (v - t.lo) * t.inv_width;
  const std::size_t bucket = std::min(static_cast<std::size_t>(at), t.start.size() - 1);
  std::size_t k = t.start[bucket];
  while (b[k] < v) ++k;  // stops at the last boundary at the latest: v <= b[n - 1]
  return static_cast<uint8_t>(k);
}

}  // namespace

const std::vector<uint16_t>& BlockLloydQuantizer::levels_f16() const { return table_->levels_f16; }

uint8_t BlockLloydQuantizer::nearest(float v) const { return nearest_level(*table_, v); }

double BlockLloydQuantizer::quantize_with_scale(const float* x, int n, float s, uint8_t* codes) const {
  const std::vector<float>& lv = *levels_;
  const float inv = 1.0f / s;
  if (bits_ >= 7) {
    // 127 or 255 boundaries: the bucket search (a step or two per value) costs less than the
    // SIMD count's 15 or 31 lookups per 8 values (q8's encode measured 7% more instructions).
    double err = 0.0;
    for (int i = 0; i < n; ++i) {
      const uint8_t c = nearest_level(*table_, x[i] * inv);
      codes[i] = c;
      const double e = static_cast<double>(x[i]) - static_cast<double>(s) * lv[c];
      err += e * e;
    }
    return err;
  }
  // The codes nearest_level gives, 8 values per SIMD step (boundary_counts.h); the error then
  // sums in the same order as before.
  count_boundaries_below(x, n, inv, boundaries_->data(), bits_, codes);
  double err = 0.0;
  for (int i = 0; i < n; ++i) {
    const double e = static_cast<double>(x[i]) - static_cast<double>(s) * lv[codes[i]];
    err += e * e;
  }
  return err;
}

uint16_t BlockLloydQuantizer::encode_block(const float* x, int n, uint8_t* codes) const {
  float absmax = 0.0f;
  for (int i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(x[i]));
  if (!(absmax > 0.0f) || !std::isfinite(absmax)) {
    // All zero (or not finite: nothing sensible to keep): scale 0 decodes every code to 0.
    const uint8_t mid = nearest(0.0f);
    for (int i = 0; i < n; ++i) codes[i] = mid;
    return base::f32_to_f16(0.0f);
  }
  const float level_max = levels_->back();
  std::array<uint8_t, kMaxBlockSize> trial{};
  double best_err = INFINITY;
  uint16_t best_scale = 0;
  auto try_scale = [&](float s) {
    s = std::min(s, kMaxScale);
    const uint16_t s16 = base::f32_to_f16(s);
    const float stored = base::f16_to_f32(s16);
    if (!(stored > 0.0f)) return;  // underflowed to zero: not a usable scale
    const double err = quantize_with_scale(x, n, stored, trial.data());
    if (err < best_err) {
      best_err = err;
      best_scale = s16;
      std::copy(trial.begin(), trial.begin() + n, codes);
    }
  };
  // The grid's candidates at once (trial_errors): the same errors in the same order as one
  // try_scale after another, so the same choice (the first strictly smallest) and the same codes.
  std::array<float, kClipGrid.size()> stored{};
  std::array<uint16_t, kClipGrid.size()> stored16{};
  int live = 0;
  for (float g : kClipGrid) {
    const uint16_t h = base::f32_to_f16(std::min(absmax / level_max * g, kMaxScale));
    const float s = base::f16_to_f32(h);
    if (!(s > 0.0f)) continue;  // underflowed to zero: not a usable scale
    stored[static_cast<std::size_t>(live)] = s;
    stored16[static_cast<std::size_t>(live++)] = h;
  }
  if (const int best = best_trial(x, n, stored.data(), live, best_err, codes); best >= 0) {
    best_scale = stored16[static_cast<std::size_t>(best)];
  }
  // Least-squares refit of the scale for the chosen codes.
  if (const float refit = refit_scale(x, n, codes); refit >= 0.0f) try_scale(refit);
  if (best_err == INFINITY) {
    // Every candidate underflowed f16 (|x| below ~1e-7): store zeros.
    const uint8_t mid = nearest(0.0f);
    for (int i = 0; i < n; ++i) codes[i] = mid;
    return base::f32_to_f16(0.0f);
  }
  return best_scale;
}

int BlockLloydQuantizer::best_trial(const float* x, int n, const float* scales, int n_scales, double& best_err,
                                    uint8_t* codes) const {
  std::array<double, kMaxTrials> errors{};
  if (even_ && bits_ == 8) {
    even_byte_trial_errors(x, n, scales, n_scales, errors.data());
  } else if (can_batch_level_trials(bits_)) {
    level_trial_errors(x, n, scales, n_scales, levels_->data(), boundaries_->data(), bits_, errors.data());
  } else {
    std::array<uint8_t, kMaxBlockSize> trial{};
    for (int t = 0; t < n_scales; ++t)
      errors[static_cast<std::size_t>(t)] = quantize_with_scale(x, n, scales[t], trial.data());
  }
  int best = -1;
  for (int t = 0; t < n_scales; ++t) {
    if (errors[static_cast<std::size_t>(t)] < best_err) {
      best_err = errors[static_cast<std::size_t>(t)];
      best = t;
    }
  }
  if (best >= 0) quantize_with_scale(x, n, scales[best], codes);
  return best;
}

float BlockLloydQuantizer::refit_scale(const float* x, int n, const uint8_t* codes) const {
  const std::vector<float>& lv = *levels_;
  double xl = 0.0, ll = 0.0;
  for (int i = 0; i < n; ++i) {
    xl += static_cast<double>(x[i]) * lv[codes[i]];
    ll += static_cast<double>(lv[codes[i]]) * lv[codes[i]];
  }
  return ll > 0.0 && xl > 0.0 ? static_cast<float>(xl / ll) : -1.0f;
}

uint8_t BlockLloydQuantizer::encode_block_log8(const float* x, int n, uint8_t* codes) const {
  float absmax = 0.0f;
  for (int i = 0; i < n; ++i) absmax = std::max(absmax, std::fabs(x[i]));
  const uint8_t mid = nearest(0.0f);
  if (!(absmax > 0.0f) || !std::isfinite(absmax)) {
    for (int i = 0; i < n; ++i) codes[i] = mid;
    return 0;
  }
  const float level_max = levels_->back();
  std::array<uint8_t, kMaxBlockSize> trial{};
  double best_err = INFINITY;
  uint8_t best_code = 0;
  uint8_t tried[kClipGrid.size() + 1] = {};
  int n_tried = 0;
  auto try_scale = [&](float s) {
    const uint8_t code = nearest_log8(s);
    if (code == 0 || std::find(tried, tried + n_tried, code) != tried + n_tried) return;  // same grid point
    tried[n_tried++] = code;
    const double err = quantize_with_scale(x, n, log8_scale(code), trial.data());
    if (err < best_err) {
      best_err = err;
      best_code = code;
      std::copy(trial.begin(), trial.begin() + n, codes);
    }
  };
  // The grid's distinct candidates at once, chosen as one try_scale after another would.
  std::array<float, kClipGrid.size()> scales{};
  for (float g : kClipGrid) {
    const uint8_t code = nearest_log8(absmax / level_max * g);
    if (code == 0 || std::find(tried, tried + n_tried, code) != tried + n_tried) continue;  // same grid point
    scales[static_cast<std::size_t>(n_tried)] = log8_scale(code);
    tried[n_tried++] = code;
  }
  if (const int best = best_trial(x, n, scales.data(), n_tried, best_err, codes); best >= 0) best_code = tried[best];
  // Least-squares refit of the scale for the chosen codes.
  if (const float refit = refit_scale(x, n, codes); refit >= 0.0f) try_scale(refit);
  if (best_err == INFINITY) {
    for (int i = 0; i < n; ++i) codes[i] = mid;
    return 0;
  }
  return best_code;
}

void BlockLloydQuantizer::encode_row(const float* x, int dim, uint8_t* packed, uint16_t* scales) const {
  std::array<uint8_t, 1024> stack_codes{};
  std::vector<uint8_t> heap_codes;
  uint8_t* codes = stack_codes.data();
  if (dim > static_cast<int>(stack_codes.size())) {
    heap_codes.resize(static_cast<std::size_t>(dim));
    codes = heap_codes.data();
  }
  for (int j0 = 0, blk = 0; j0 < dim; j0 += block_, ++blk) {
    const int n = std::min(block_, dim - j0);
    scales[blk] = encode_block(x + j0, n, codes + j0);
  }
  core::pack_dense(codes, static_cast<std::size_t>(dim), bits_, packed);
}

void BlockLloydQuantizer::decode_row(const uint8_t* packed, const uint16_t* scales, int dim, float* out) const {
  decode_rows(packed, static_cast<int64_t>(code_bytes(dim)), scales, static_cast<int64_t>(blocks(dim)), 1, dim, nullptr,
              out);
}

void BlockLloydQuantizer::decode_rows(const uint8_t* packed, int64_t code_stride, const uint16_t* scales,
                                      int64_t scale_stride, int64_t n_rows, int dim, const float* offset,
                                      float* out) const {
  attention::kernels::DenseLevelRows rows;
  rows.codes = packed;
  rows.code_stride = code_stride;
  rows.scales = scales;
  rows.scale_stride = scale_stride;
  rows.n_rows = n_rows;
  rows.dim = dim;
  rows.bits = bits_;
  rows.block = block_;
  rows.levels = levels_->data();
  rows.levels_f16 = table_->levels_f16.data();
  rows.even_levels = even_;
  rows.offset = offset;
  attention::kernels::decode_dense_level_rows(rows, out);
}

}  // namespace veloxquant::quant
