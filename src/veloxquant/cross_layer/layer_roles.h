#pragma once
// Which attention layer leads and which follows, for the cross-layer methods (spec §4.3). The
// index is the attention index (for_model numbers attention layers 0, 1, ... and skips the
// others, so a non-attention layer never takes a group slot).
//
// xquant: contiguous groups of group_size; group_id = k / group_size; the first layer of a
//   group is the anchor, the rest reuse its codes. A trailing group may hold only its anchor.
// minicache: start = int(n * start_frac) (truncation, as Python's int()); every layer below
//   start is a primary alone in its own group; from start on, groups of group_size: one primary
//   followed by up to group_size - 1 merge layers.
#include <cstddef>
#include <vector>

namespace veloxquant::cross_layer {

struct LayerRole {
  bool leader = true;  // xquant anchor / minicache primary; false: reuse / merge layer
  int group_id = 0;
  int n_readers = 0;  // leaders: the followers in the group (0: nothing is published)
  int member = 0;     // position in the group (0 = the leader)
};

std::vector<LayerRole> xquant_roles(std::size_t n_attention_layers, int group_size);
std::vector<LayerRole> minicache_roles(std::size_t n_attention_layers, double start_frac, int group_size);

}  // namespace veloxquant::cross_layer
