#include "veloxquant/cross_layer/xkv_rows.h"

#include <algorithm>

#include "veloxquant/core/bit_packing.h"

namespace veloxquant {

SvdqLayout xkv_latent_layout(int64_t dim, int64_t coded, int bits) {
  SvdqLayout layout;
  layout.dim = dim;
  layout.coded = coded;
  for (int64_t i = 0; i < coded; ++i) layout.latent_of.push_back(i);
  for (int64_t first = 0; first < coded; first += 8) {
    SvdqGroup g;
    g.first = first;
    g.channels = std::min<int64_t>(8, coded - first);
    g.bits = bits;
    g.byte_offset = layout.row_bytes;
    layout.row_bytes += static_cast<int64_t>(core::dense_bytes(static_cast<std::size_t>(g.channels), bits));
    layout.groups.push_back(g);
  }
  return layout;
}

}  // namespace veloxquant
