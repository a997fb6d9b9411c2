#include "veloxquant/cross_layer/xkv_basis.h"

#include <algorithm>
#include <stdexcept>

#include "veloxquant/core/linalg.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

using cache_rows::row_ptr;

XkvBasis fit_xkv_basis(const std::vector<const XkvKeys*>& members, std::optional<int> rank, double energy_threshold) {
  if (members.empty()) throw std::invalid_argument("fit_xkv_basis: no members");
  const XkvKeys& first = *members.front();
  int64_t total = 0;
  for (const XkvKeys* m : members) {
    if (m->batch != first.batch || m->heads != first.heads || m->dim != first.dim) {
      throw std::invalid_argument("fit_xkv_basis: members of one group disagree on [B, H, D]");
    }
    total += m->rows;
  }
  if (total == 0) throw std::invalid_argument("fit_xkv_basis: no key rows");
  const int64_t batch = first.batch, heads = first.heads, d = first.dim;
  struct HeadFit {
    std::vector<double> mean;
    linalg::Svd svd;
    int64_t rank = 0;
  };
  std::vector<HeadFit> fits(static_cast<std::size_t>(batch * heads));
  std::vector<float> stacked(static_cast<std::size_t>(total * d));
  int64_t coded = 1;
  for (int64_t bh = 0; bh < batch * heads; ++bh) {
    HeadFit& fit = fits[static_cast<std::size_t>(bh)];
    // Member after member: the rows of this head, then their mean, then the centred copy.
    int64_t r = 0;
    for (const XkvKeys* m : members) {
      const float* src = m->data.data() + bh * m->rows * d;
      std::copy(src, src + m->rows * d, stacked.begin() + r * d);
      r += m->rows;
    }
    fit.mean.assign(static_cast<std::size_t>(d), 0.0);
    for (int64_t i = 0; i < total; ++i) {
      for (int64_t c = 0; c < d; ++c)
        fit.mean[static_cast<std::size_t>(c)] += stacked[static_cast<std::size_t>(i * d + c)];
    }
    for (double& m : fit.mean) m /= static_cast<double>(total);
    for (int64_t i = 0; i < total; ++i) {
      for (int64_t c = 0; c < d; ++c) {
        float& x = stacked[static_cast<std::size_t>(i * d + c)];
        x = static_cast<float>(static_cast<double>(x) - fit.mean[static_cast<std::size_t>(c)]);
      }
    }
    fit.svd = linalg::thin_svd(stacked.data(), total, d);
    std::vector<double> energy(fit.svd.sigma.size());
    for (std::size_t i = 0; i < energy.size(); ++i) energy[i] = fit.svd.sigma[i] * fit.svd.sigma[i];
    const int64_t wanted = rank ? static_cast<int64_t>(*rank) : linalg::energy_rank_of(energy, energy_threshold);
    fit.rank = std::clamp<int64_t>(wanted, 1, fit.svd.rank);
    coded = std::max(coded, fit.rank);
  }
  XkvBasis basis;
  basis.coded = coded;
  basis.table = lm::Tensor({batch, heads, 1 + coded, d}, lm::DType::F32);
  basis.ranks = lm::Tensor({batch, heads, 1, 1}, lm::DType::I32);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const HeadFit& fit = fits[static_cast<std::size_t>(b * heads + h)];
      float* mean = row_ptr<float>(basis.table, b, h, 0);
      for (int64_t c = 0; c < d; ++c) mean[c] = static_cast<float>(fit.mean[static_cast<std::size_t>(c)]);
      for (int64_t i = 0; i < coded; ++i) {
        float* dir = row_ptr<float>(basis.table, b, h, 1 + i);
        for (int64_t c = 0; c < d; ++c) {
          dir[c] = i < fit.rank ? static_cast<float>(fit.svd.right[static_cast<std::size_t>(i * d + c)]) : 0.0f;
        }
      }
      row_ptr<int32_t>(basis.ranks, b, h, 0)[0] = static_cast<int32_t>(fit.rank);
    }
  }
  return basis;
}

}  // namespace veloxquant
