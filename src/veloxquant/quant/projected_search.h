#pragma once
// The fused nearest-codeword search (quant/nearest_codeword.h: nearest_codeword_fused, the lowest
// index of the smallest d = norms[c] + sum_e fma(-2 x_e, c_e)) over a book sorted along its
// principal axis, which reads only the codewords near the point along that axis.
//
// Why: vecinfer's k-means and encoder run ~360 K searches of a 4096-entry book of 4-float
// codewords per layer in a 4k prefill; the full search forms all 4096 distances, and was the
// largest part of the method's prefill left beside the attention kernels.
//
// How: entries are stored in blocks of 16 in the order of their projection p_c = <c, v> on the
// unit principal axis v of the book. A search starts at the point's own projection and takes
// blocks outward on both sides; since ||x - c|| >= |<x, v> - p_c|, a side stops at the first
// block whose nearest projection is farther from <x, v> than sqrt(best + ||x||^2), with slacks
// (1e-5 (||x|| + max ||c||)^2 on the distance, 1e-5 (||x|| + max ||c||) on the gap) that cover
// every rounding of the fused distances, the projections and ||x||^2: an entry never read has a
// fused distance strictly above the smallest one found. Distances are formed exactly as the full search forms
// them (the same floats, the same fma order), and lanes keep the smallest d with the lowest
// original index, so the result is nearest_codeword_fused's index, ties included (tested on
// every SIMD target against the scalar reference). Targets without FMA (whose multiply-adds
// round twice) run the full scalar search instead.
#include <cstdint>
#include <vector>

namespace veloxquant::pvq {

class ProjectedBook {
 public:
  // Codewords of `sub` floats (1..16) from a transposed book ([sub][entries], entries < 2^31) and
  // their norms (the fused search's table, whose index nearest() returns; it must outlive the
  // searches, which fall back to it on targets without FMA).
  void load(const float* transposed, const float* norms, int64_t entries, int sub);
  bool loaded() const { return entries_ > 0; }
  // nearest_codeword_fused(transposed, norms, entries, sub, x) of the table load() was given.
  int64_t nearest(const float* x) const;
  // out[i] = nearest(xs + i * x_stride) for i < count.
  void nearest_batch(const float* xs, int64_t count, int64_t x_stride, int64_t* out) const;

  // Entries per block (every target reads whole blocks: one 16-lane vector or two of 8).
  static constexpr int64_t kBlock = 16;

 private:
  const float* transposed_ = nullptr;  // the table load() was given (the fallback's)
  const float* norms_ = nullptr;
  int sub_ = 0;
  int64_t entries_ = 0, blocks_ = 0;
  float max_norm_ = 0.0f;       // largest ||c||
  std::vector<float> axis_;     // v, [sub]
  std::vector<float> proj_;     // sorted projections, [blocks * kBlock] (+inf past entries)
  std::vector<float> data_;     // per block: norms[16], then column e's 16 floats (norms +inf past entries)
  std::vector<int32_t> index_;  // original index of each sorted entry (INT32_MAX past entries)
};

}  // namespace veloxquant::pvq
