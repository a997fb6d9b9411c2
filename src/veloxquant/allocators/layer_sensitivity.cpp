#include "veloxquant/allocators/layer_sensitivity.h"

#include <algorithm>
#include <cstdlib>
#include <random>

#include "base/error.h"
#include "veloxquant/builder/kv_cache_builder.h"
#include "veloxquant/config/config_validation.h"
#include "veloxquant/config/field_spec.h"
#include "veloxquant/config/per_layer_lists.h"
#include "veloxquant/registry/method_registry.h"

namespace veloxquant::allocators {
namespace {

bool has_bit_width_option(const MethodDescriptor& method, const std::string& name) {
  return std::any_of(method.fields.begin(), method.fields.end(),
                     [&](const FieldSpec& f) { return f.name == name && f.type == FieldType::kBitWidth; });
}

void set_bits(KVCacheConfig& config, const std::string& field, const BitWidth& bits) {
  const FieldSpec* spec = find_field(field);
  if (!spec) throw base::InvalidArgument("bit allocation: no config field '" + field + "'");
  spec->set(config, bits);
}

// The config of one candidate: `part` of attention layer `target` at `bits`, the method's other
// parts at `reference_bits`; every other layer's entries are irrelevant (their caches are
// replaced by native ones) and are given the reference bits too.
KVCacheConfig candidate_config(const KVCacheConfig& base, const std::vector<LayerPart>& parts, std::size_t part,
                               std::size_t n_attention, std::size_t target, int bits, int reference_bits) {
  KVCacheConfig config = base;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    std::vector<int> per_layer(n_attention, reference_bits);
    if (p == part) per_layer[target] = bits;
    set_bits(config, parts[p].field, BitWidth(per_layer));
  }
  return config;
}

}  // namespace

double relative_distortion(const KVCacheConfig& config, const std::vector<LayerPart>& parts, std::size_t part, int bits,
                           int reference_bits, int head_dim) {
  KVCacheConfig probe =
      config_for_attention_layer(candidate_config(config, parts, part, 1, 0, bits, reference_bits), 0);
  probe.head_dim = head_dim;
  const std::shared_ptr<lm::KVCache> cache = KVCacheBuilder(probe).build().serving();
  constexpr int64_t kRows = 1024;
  std::mt19937_64 rng(20260417);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> k(static_cast<std::size_t>(kRows * head_dim)), v(k.size());
  for (float& x : k) x = normal(rng);
  for (float& x : v) x = normal(rng);
  const lm::KeysValues kv = cache->update_and_fetch(lm::Tensor::from_f32(k, {1, 1, kRows, head_dim}, lm::DType::F32),
                                                    lm::Tensor::from_f32(v, {1, 1, kRows, head_dim}, lm::DType::F32));
  double err = 0.0, energy = 0.0;
  auto add = [&](const std::vector<float>& exact, const lm::Tensor& fetched) {
    const std::vector<float> got = fetched.to_f32();
    for (std::size_t i = 0; i < exact.size(); ++i) {
      err += (double(got[i]) - exact[i]) * (double(got[i]) - exact[i]);
      energy += double(exact[i]) * exact[i];
    }
  };
  if (parts[part].name != "values") add(k, kv.keys);
  if (parts[part].name != "keys") add(v, kv.values);
  return err / energy;
}

std::vector<LayerPart> allocation_parts(const KVCacheConfig& config) {
  const MethodDescriptor& method = require_method(config.method);
  if (has_bit_width_option(method, "key_bits") && has_bit_width_option(method, "value_bits")) {
    return {{"keys", "key_bits"}, {"values", "value_bits"}};
  }
  return {{"keys+values", "bit_width_inlier"}};
}

std::vector<std::size_t> attention_layer_indices(const lm::Model& model) {
  // for_model's rule (kv_cache_builder.cpp): an attention layer whose head_dim resolves.
  std::vector<std::size_t> out;
  const std::vector<lm::LayerInfo>& layers = model.layers();
  const lm::ModelConfig& mc = model.config();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i].is_attention) continue;
    const int head_dim = layers[i].head_dim > 0 ? layers[i].head_dim
                         : mc.head_dim > 0      ? mc.head_dim
                                                : (mc.dim > 0 && mc.n_heads > 0 ? mc.dim / mc.n_heads : 0);
    if (head_dim > 0) out.push_back(i);
  }
  return out;
}

SensitivityTable measure_layer_sensitivity(const lm::Model& model, std::span<const int32_t> tokens,
                                           std::optional<int32_t> bos, const KVCacheConfig& base,
                                           const SensitivityOptions& options, const eval::EvalOptions& eval) {
  if (options.candidate_bits.empty()) throw base::InvalidArgument("bit allocation: no candidate bit widths");
  if (options.methods_per_run < 1) throw base::InvalidArgument("bit allocation: methods_per_run must be >= 1");
  SensitivityTable table;
  table.parts = allocation_parts(base);
  table.candidate_bits = options.candidate_bits;
  const std::vector<int>& measured = options.measured_bits.empty() ? options.candidate_bits : options.measured_bits;
  for (int b : options.candidate_bits) {
    table.measured.push_back(std::find(measured.begin(), measured.end(), b) != measured.end());
  }
  for (int b : measured) {
    if (std::find(options.candidate_bits.begin(), options.candidate_bits.end(), b) == options.candidate_bits.end()) {
      throw base::InvalidArgument("bit allocation: measured width " + std::to_string(b) +
                                  " is not among the candidates");
    }
  }
  table.attention_layers = attention_layer_indices(model);
  const std::size_t n_attention = table.attention_layers.size();
  if (n_attention == 0) throw base::InvalidArgument("bit allocation: the model has no attention layer");

  // Every candidate's config is validated (and its caches built once) before the slow runs.
  struct Candidate {
    std::size_t layer, part, bit;
    KVCacheConfig config;
  };
  std::vector<Candidate> candidates;
  for (std::size_t l = 0; l < n_attention; ++l) {
    for (std::size_t p = 0; p < table.parts.size(); ++p) {
      for (std::size_t b = 0; b < options.candidate_bits.size(); ++b) {
        if (!table.measured[b]) continue;
        candidates.push_back({l, p, b,
                              candidate_config(base, table.parts, p, n_attention, l, options.candidate_bits[b],
                                               options.reference_bits)});
      }
    }
  }
  validate_per_layer_config(candidates.front().config);
  for (const Candidate& c : candidates) {
    check_per_layer_lengths(c.config, n_attention);
    validate_for_create(config_for_attention_layer(c.config, c.layer));
  }

  table.kl.assign(n_attention, std::vector<std::vector<double>>(
                                   table.parts.size(), std::vector<double>(options.candidate_bits.size(), 0.0)));
  const auto group = static_cast<std::size_t>(options.methods_per_run);
  for (std::size_t start = 0; start < candidates.size(); start += group) {
    const std::size_t end = std::min(candidates.size(), start + group);
    std::vector<eval::MethodUnderTest> methods;
    for (std::size_t i = start; i < end; ++i) {
      const Candidate& c = candidates[i];
      const std::size_t raw_layer = table.attention_layers[c.layer];
      methods.push_back({"layer " + std::to_string(c.layer) + " " + table.parts[c.part].name + " " +
                             std::to_string(options.candidate_bits[c.bit]) + " bits",
                         [&model, &c, raw_layer] {
                           // That layer's cache from for_model (seed, head_dim as in serving),
                           // every other layer the host's own.
                           lm::CacheList caches = model.native_make_cache();
                           caches[raw_layer] = KVCacheBuilder::for_model(model, c.config)[raw_layer];
                           return caches;
                         }});
    }
    const eval::EvalRun run = eval::run_evaluation(model, tokens, bos, methods, eval);
    for (std::size_t i = start; i < end; ++i) {
      const Candidate& c = candidates[i];
      table.kl[c.layer][c.part][c.bit] = run.methods[i - start].kld;
    }
    table.n_compared = run.n_compared;
    if (options.on_progress) {
      options.on_progress(static_cast<int64_t>(end), static_cast<int64_t>(candidates.size()));
    }
  }
  // The distortion model for the widths not run: the coding's own error ratio, per part.
  const int head_dim =
      model.layers()[table.attention_layers[0]].head_dim > 0
          ? model.layers()[table.attention_layers[0]].head_dim
          : (model.config().head_dim > 0 ? model.config().head_dim : model.config().dim / model.config().n_heads);
  table.distortion.assign(table.parts.size(), std::vector<double>(options.candidate_bits.size(), 0.0));
  for (std::size_t p = 0; p < table.parts.size(); ++p) {
    for (std::size_t b = 0; b < options.candidate_bits.size(); ++b) {
      table.distortion[p][b] =
          relative_distortion(base, table.parts, p, options.candidate_bits[b], options.reference_bits, head_dim);
    }
  }
  for (std::size_t b = 0; b < options.candidate_bits.size(); ++b) {
    if (table.measured[b]) continue;
    // The nearest measured width (the lower one on a tie: errors are larger there, the linear
    // model holds better going down in error than up).
    std::size_t nearest = 0;
    int best_gap = 1 << 30;
    for (std::size_t m = 0; m < options.candidate_bits.size(); ++m) {
      const int gap = std::abs(options.candidate_bits[m] - options.candidate_bits[b]);
      if (table.measured[m] && gap < best_gap) {
        best_gap = gap;
        nearest = m;
      }
    }
    for (std::size_t l = 0; l < n_attention; ++l) {
      for (std::size_t p = 0; p < table.parts.size(); ++p) {
        table.kl[l][p][b] = table.kl[l][p][nearest] * table.distortion[p][b] / table.distortion[p][nearest];
      }
    }
  }
  return table;
}

}  // namespace veloxquant::allocators
