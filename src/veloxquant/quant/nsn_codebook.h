#pragma once
// NSNQuant's codebooks (Son, Choi & Yoo, NeurIPS 2025, arXiv 2505.18231; docs/methods/nsnquant.md).
//
// NSNQuant's point is that after Normalize-Shift-Normalize and a Hadamard rotation every token's
// coordinates follow N(0, 1), so one codebook fitted once to *synthetic* standard-normal data
// serves every model, layer and head: no calibration set. Each stage is a codebook of `entries`
// codewords of `dim` floats (log2(entries) / dim bits per element); stage 1 is k-means on N(0, I)
// samples, stage s > 1 is k-means on the residuals those samples leave after stages 1..s-1 —
// residual VQ, the way this port reaches more than log2(entries) / dim bits per element
// (2 bits = two stages of 256 entries over 8 coordinates). Everything is a pure function of the
// seed: samples from core::Rng, Lloyd iterations in a fixed order, so every run and every clone
// sees the same codewords.
#include <cstdint>
#include <memory>
#include <vector>

namespace veloxquant::quant {

class NsnCodebook {
 public:
  // entries in [2, 256] (codes are one byte), dim >= 1, stages >= 1. Deterministic in `seed`.
  NsnCodebook(uint64_t seed, int entries, int dim, int stages);

  int entries() const { return entries_; }
  int dim() const { return dim_; }
  int stages() const { return stages_; }
  const float* codeword(int stage, int index) const {
    return words_.data() +
           (static_cast<std::size_t>(stage) * static_cast<std::size_t>(entries_) + static_cast<std::size_t>(index)) *
               static_cast<std::size_t>(dim_);
  }
  // Stage `stage`'s codewords transposed, [dim, entries] (coordinate e of every codeword
  // contiguous): a query's lookup-table row is then `dim` passes over contiguous floats.
  const float* transposed(int stage) const {
    return words_t_.data() +
           static_cast<std::size_t>(stage) * static_cast<std::size_t>(entries_) * static_cast<std::size_t>(dim_);
  }
  // The codeword of `stage` nearest to x (dim floats): squared distance summed in float in
  // coordinate order, ties to the lower index — the rule the card and the test reference state.
  int nearest(int stage, const float* x) const;
  // One sub-vector through every stage: codes[s] = nearest codeword of stage s to what stages
  // 0..s-1 left (x minus their codewords, in float).
  void encode(const float* x, uint8_t* codes) const;
  // The sum of the stages' codewords (in stage order, in float).
  void decode(const uint8_t* codes, float* out) const;

 private:
  int entries_, dim_, stages_;
  std::vector<float> words_;    // [stages, entries, dim]
  std::vector<float> words_t_;  // [stages, dim, entries]
};

// One immutable codebook per (seed, entries, dim, stages) for the whole process: building one
// runs k-means (a fraction of a second), and every layer and clone of every nsnquant cache uses
// the same one, so it is built once and shared (not counted in any cache's nbytes()).
std::shared_ptr<const NsnCodebook> shared_nsn_codebook(uint64_t seed, int entries, int dim, int stages);

}  // namespace veloxquant::quant
