#pragma once
// xkv's latent key layout. Its blocks are scored by SvdqRows (caches/svdq_rows.h) with a leading
// mean row: a stored key is k = mean + sum_i z_i V_i (V_i the group's shared directions), so
// <q, k> = <q, mean> + <V q, z> — the query is projected once per tile on the 1 + coded table rows,
// the tile's latent rows are decoded and scored in `coded` dimensions, and <q, mean> is added.
#include <cstdint>

#include "veloxquant/caches/svdq_layout.h"

namespace veloxquant {

// The latent row layout: `coded` channels at `bits` each, in groups of 8 (the decoder's vector
// width), codes packed densely group by group.
SvdqLayout xkv_latent_layout(int64_t dim, int64_t coded, int bits);

}  // namespace veloxquant
