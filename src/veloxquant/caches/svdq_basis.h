#pragma once
// svdq's latent basis for one (batch, kv head) (caches/svdq_cache.h): the right singular vectors of
// the keys it is fitted on, most significant first, so a key's latent coordinates z = B k put its
// energy in the first channels, which the bit schedule gives the most bits.
#include <cstdint>
#include <optional>
#include <vector>

namespace veloxquant {

struct SvdqBasis {
  std::vector<float> rows;  // D x D, row i = latent direction i (unit, orthogonal), descending singular value
  int64_t rank = 0;         // latent channels kept: svdq_rank, else the energy rank (<= D)
};

// keys: [n, D] f32. The SVD is block_svd's (deterministic Jacobi in double). Directions the keys do
// not span (n < D, or dependent keys) are completed from the standard basis by Gram-Schmidt so
// that every key — later ones too — still has D latent coordinates; they come last. rank: the
// given svdq_rank clamped to D, or energy_rank(sigma, energy_threshold).
SvdqBasis fit_svdq_basis(const float* keys, int64_t n, int64_t dim, std::optional<int> rank, double energy_threshold);

}  // namespace veloxquant
