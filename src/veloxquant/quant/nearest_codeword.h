#pragma once
// The nearest-codeword search of product VQ (caches/product_vq.h: every sub-vector a vecinfer or
// comm_vq cache codes, and every assignment step of their k-means), in SIMD (Highway, dispatched
// at run time) with a plain scalar reference it matches exactly.
//
// Distances are ||c||^2 - 2 <x, c> over a book stored transposed ([sub][entries]) with its
// squared norms, in this order for every entry c:
//   d = norms[c];  d = d + ((-2 x_e) * col_e[c]) for e = 0..sub-1   (a multiply, then an add)
// and the result is the lowest index of the smallest d (strict < in index order) — the search
// product_vq.cpp ran as a loop storing every d and then scanning them. Here each lane keeps its
// own running minimum and index while the distances are formed, and the lanes are merged at the
// end (smallest d, then lowest index), which picks the same entry. (Where a distance is NaN the
// two may differ; finite inputs give finite distances.)
//
// The same search by the plain squared distance, d = 0; d = d + (x_e - c_e)^2 for e = 0..sub-1,
// smallest d from infinity (strict <, lowest index): NSNQuant's encoder (quant/nsn_codebook.h).
#include <cstdint>

namespace veloxquant::pvq {

// Index of the nearest of `entries` codewords to x (`sub` floats); `transposed` is
// [sub][entries], `norms` [entries].
int64_t nearest_codeword(const float* transposed, const float* norms, int64_t entries, int sub, const float* x);

// The same search with each term fused: d = norms[c]; d = fma(-2 x_e, col_e[c], d) for e in order
// (one rounding per term instead of two; vecinfer's books, caches/vecinfer_cache.h). Half the
// floating-point work per entry, and the entries are taken four vectors at a time, their minimum
// compared with the smallest distance so far: only a block holding a strictly smaller one goes
// through the per-vector update (a few blocks per search), which keeps the lowest index of the
// smallest d. FMA targets (AVX2, AVX-512) run it in SIMD; others run the
// scalar loop (std::fma), so every target returns the scalar reference's index.
int64_t nearest_codeword_fused(const float* transposed, const float* norms, int64_t entries, int sub, const float* x);
// nearest_codeword_fused for `count` points (point i at xs + i * x_stride) into out[i], several
// points per pass over the book (its columns read once for all of them).
void nearest_codewords_fused(const float* transposed, const float* norms, int64_t entries, int sub, const float* xs,
                             int64_t count, int64_t x_stride, int64_t* out);

// Index of the nearest of `entries` codewords to x by squared distance; `transposed` as above.
int64_t nearest_codeword_squared(const float* transposed, int64_t entries, int sub, const float* x);

namespace scalar {
int64_t nearest_codeword(const float* transposed, const float* norms, int64_t entries, int sub, const float* x);
int64_t nearest_codeword_fused(const float* transposed, const float* norms, int64_t entries, int sub, const float* x);
int64_t nearest_codeword_squared(const float* transposed, int64_t entries, int sub, const float* x);
}  // namespace scalar

}  // namespace veloxquant::pvq
