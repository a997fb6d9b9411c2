#pragma once
// xKV's shared key basis for one layer group (spec §4.3 "xKV"): per (batch, kv head), the keys the
// group's members published at prefill are stacked ([sum of S_m, D]), centred on their mean, and
// one thin SVD (core/linalg.h, Eigen) gives the right singular vectors V_g. The rank is xkv_rank
// (clamped to what the SVD returns) or the smallest rank holding xkv_energy_threshold of the
// centred keys' energy (sigma^2). Heads may keep different ranks: the table has `coded` = the
// largest of them, and a head's directions past its own rank are zero, so its latent coordinates
// there are 0 for every key and every projected query.
//
// Layout (all F32/I32 tensors, counted once per group, see XkvCache::nbytes):
//   table  F32 [B, H, 1 + coded, D]   row 0 = the mean, rows 1..coded = the directions
//   ranks  I32 [B, H, 1, 1]
#include <cstdint>
#include <optional>
#include <vector>

#include "lm/tensor.h"

namespace veloxquant {

struct XkvBasis {
  int64_t coded = 0;
  lm::Tensor table;
  lm::Tensor ranks;
  std::size_t nbytes() const { return table.storage_bytes() + ranks.storage_bytes(); }
};

// One member's published prefill keys: f32 [batch * heads, rows, dim], row-major.
struct XkvKeys {
  int64_t batch = 0, heads = 0, rows = 0, dim = 0;
  std::vector<float> data;
};

// The joint basis of `members` (all of the same batch, heads and dim; rows may differ).
// Throws std::invalid_argument when they disagree or hold no rows.
XkvBasis fit_xkv_basis(const std::vector<const XkvKeys*>& members, std::optional<int> rank, double energy_threshold);

}  // namespace veloxquant
