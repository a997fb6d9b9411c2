#include "veloxquant/allocators/layer_allocation.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "base/error.h"
#include "veloxquant/allocators/bit_allocation.h"
#include "veloxquant/builder/kv_cache_builder.h"
#include "veloxquant/config/field_spec.h"
#include "veloxquant/registry/method_registry.h"

namespace veloxquant::allocators {
namespace {

int kv_heads_of(const lm::Model& model, std::size_t raw_layer) {
  const int heads = model.layers()[raw_layer].n_kv_heads;
  return heads > 0 ? heads : model.config().n_kv_heads;
}

// nbytes() of attention layer `raw_layer`'s cache for `config` after `rows` random rows. The
// rows' values do not change the bytes (every row is stored the same size); they are random
// so that calibrating options (mean_rows) see ordinary data.
int64_t layer_nbytes(const lm::Model& model, const KVCacheConfig& config, std::size_t raw_layer, int64_t rows) {
  const std::shared_ptr<lm::KVCache> cache = KVCacheBuilder::for_model(model, config).at(raw_layer);
  const int heads = kv_heads_of(model, raw_layer);
  // The cache holds the layer's head_dim; read it back from its first call's shape check by
  // feeding rows of the model's resolved head_dim.
  const lm::LayerInfo& layer = model.layers()[raw_layer];
  const lm::ModelConfig& mc = model.config();
  const int64_t dim = layer.head_dim > 0 ? layer.head_dim : mc.head_dim > 0 ? mc.head_dim : mc.dim / mc.n_heads;
  std::mt19937_64 rng(raw_layer);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(heads * rows * dim));
  for (float& v : x) v = normal(rng);
  const lm::Tensor keys = lm::Tensor::from_f32(x, {1, heads, rows, dim}, lm::DType::F16);
  cache->update_and_fetch(keys, keys);
  return static_cast<int64_t>(cache->nbytes());
}

KVCacheConfig with_part_bits(const KVCacheConfig& base, const std::vector<LayerPart>& parts,
                             const std::vector<int>& bits_per_part, std::size_t n_attention) {
  std::vector<std::vector<int>> lists;
  lists.reserve(bits_per_part.size());
  for (int b : bits_per_part) lists.emplace_back(n_attention, b);
  return config_with_allocation(base, parts, lists);
}

}  // namespace

KVCacheConfig config_with_allocation(const KVCacheConfig& base, const std::vector<LayerPart>& parts,
                                     const std::vector<std::vector<int>>& bits) {
  KVCacheConfig config = base;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const FieldSpec* spec = find_field(parts[p].field);
    if (!spec) throw base::InvalidArgument("bit allocation: no config field '" + parts[p].field + "'");
    spec->set(config, BitWidth(bits.at(p)));
  }
  return config;
}

double model_bytes_per_token(const lm::Model& model, const KVCacheConfig& config, int64_t rows) {
  int64_t total = 0;
  for (std::size_t raw : attention_layer_indices(model)) total += layer_nbytes(model, config, raw, rows);
  return static_cast<double>(total) / static_cast<double>(rows);
}

LayerAllocation allocate_layer_bits(const lm::Model& model, const SensitivityTable& table, const KVCacheConfig& base,
                                    double budget_bytes_per_token, int64_t rows) {
  if (rows < 1) throw base::InvalidArgument("bit allocation: rows must be >= 1, got " + std::to_string(rows));
  const std::size_t n_attention = table.attention_layers.size();
  const std::size_t n_parts = table.parts.size();
  const std::vector<int>& bits = table.candidate_bits;
  // Costs in whole bytes at `rows` rows (integers, so the knapsack is exact). A layer's bytes
  // are its bytes with every part at the cheapest candidate plus each part's extra for its
  // own bits: the parts' buffers are separate, so the extras add up.
  const int cheapest = *std::min_element(bits.begin(), bits.end());
  std::vector<AllocationItem> items;
  int64_t fixed = 0;
  for (std::size_t l = 0; l < n_attention; ++l) {
    const std::size_t raw = table.attention_layers[l];
    const int64_t floor_bytes = layer_nbytes(
        model, with_part_bits(base, table.parts, std::vector<int>(n_parts, cheapest), n_attention), raw, rows);
    fixed += floor_bytes;
    for (std::size_t p = 0; p < n_parts; ++p) {
      AllocationItem item;
      item.name = "layer " + std::to_string(l) + " " + table.parts[p].name;
      for (std::size_t b = 0; b < bits.size(); ++b) {
        std::vector<int> per_part(n_parts, cheapest);
        per_part[p] = bits[b];
        const int64_t bytes = layer_nbytes(model, with_part_bits(base, table.parts, per_part, n_attention), raw, rows);
        item.choices.push_back({bits[b], bytes - floor_bytes, table.kl[l][p][b]});
      }
      items.push_back(std::move(item));
    }
  }
  const auto budget = static_cast<int64_t>(std::floor(budget_bytes_per_token * static_cast<double>(rows)));
  if (budget < fixed) {
    throw base::InvalidArgument("bit allocation: the cheapest candidates (" + std::to_string(cheapest) +
                                " bits) take " +
                                std::to_string(static_cast<double>(fixed) / static_cast<double>(rows)) +
                                " bytes per token, above the budget of " + std::to_string(budget_bytes_per_token));
  }
  const Allocation solved = solve_bit_allocation(items, budget - fixed);
  LayerAllocation out;
  out.bits.assign(n_parts, std::vector<int>(n_attention, 0));
  for (std::size_t l = 0; l < n_attention; ++l) {
    for (std::size_t p = 0; p < n_parts; ++p) {
      out.bits[p][l] = items[l * n_parts + p].choices[solved.choice[l * n_parts + p]].bits;
    }
  }
  out.predicted_kl = solved.loss;
  out.bytes_per_token = static_cast<double>(fixed + solved.cost) / static_cast<double>(rows);
  return out;
}

}  // namespace veloxquant::allocators
