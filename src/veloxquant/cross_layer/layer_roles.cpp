#include "veloxquant/cross_layer/layer_roles.h"

#include <algorithm>

namespace veloxquant::cross_layer {
namespace {

// Layers [first, n) in contiguous groups of `size`, numbered from `first_group`.
void assign_groups(std::vector<LayerRole>& roles, std::size_t first, int size, int first_group) {
  const std::size_t n = roles.size();
  for (std::size_t k = first; k < n; ++k) {
    const std::size_t member = (k - first) % static_cast<std::size_t>(size);
    LayerRole& role = roles[k];
    role.group_id = first_group + static_cast<int>((k - first) / static_cast<std::size_t>(size));
    role.leader = member == 0;
    role.member = static_cast<int>(member);
    role.n_readers = role.leader ? static_cast<int>(std::min<std::size_t>(size, n - k) - 1) : 0;
  }
}

}  // namespace

std::vector<LayerRole> xquant_roles(std::size_t n_attention_layers, int group_size) {
  std::vector<LayerRole> roles(n_attention_layers);
  assign_groups(roles, 0, group_size, 0);
  return roles;
}

std::vector<LayerRole> minicache_roles(std::size_t n_attention_layers, double start_frac, int group_size) {
  const double scaled = static_cast<double>(n_attention_layers) * start_frac;
  const std::size_t start =
      scaled <= 0.0 ? 0 : std::min(n_attention_layers, static_cast<std::size_t>(scaled));  // int(): truncation
  std::vector<LayerRole> roles(n_attention_layers);
  for (std::size_t k = 0; k < start; ++k) roles[k] = {true, static_cast<int>(k), 0, 0};
  assign_groups(roles, start, group_size, static_cast<int>(start));
  return roles;
}

}  // namespace veloxquant::cross_layer
