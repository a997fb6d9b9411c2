#include "apps/kv_method_flags.h"

#include <CLI/CLI.hpp>

#include <cstdio>

#include "veloxquant/config/config_validation.h"
#include "veloxquant/config/field_spec.h"
#include "veloxquant/config/per_layer_lists.h"
#include "veloxquant/errors.h"
#include "veloxquant/integration/patch_model.h"
#include "veloxquant/integration/prompt_cache_types.h"
#include "veloxquant/presets/kv_presets.h"
#include "veloxquant/registry/field_assignment.h"
#include "veloxquant/registry/method_registry.h"

namespace apps {

namespace {

// An option given with an empty value ("--bits ''") is a mistake, not a request for the default.
CLI::Validator non_empty(const std::string& what) {
  return CLI::Validator(
      [what](std::string& value) -> std::string {
        return value.empty() ? what + " needs a value (got an empty one)" : std::string();
      },
      "", "non-empty");
}

}  // namespace

void add_kv_method_flags(CLI::App& command, KvMethodFlags& flags) {
  command
      .add_option("--method", flags.method, "KV-cache method ('none' = the host's own cache; see `veloxquant methods`)")
      ->capture_default_str()
      ->check(non_empty("--method"));
  command
      .add_option("--bits", flags.bits,
                  "Bits per coordinate (bit_width_inlier): one int, or a comma list with one "
                  "entry per attention layer")
      ->check(non_empty("--bits"));
  if (command.get_option_no_throw("--seed") == nullptr) {
    command.add_option("--seed", flags.seed, "Cache seed (per layer: seed + layer index)")->capture_default_str();
  }
  command.add_option("--set", flags.sets, "FIELD=VALUE for any config field (repeatable)");
  command
      .add_option("--preset", flags.preset,
                  "Named configuration at a llama.cpp KV size: q8, q5, q4, q3 (see `veloxquant methods`); "
                  "replaces --method/--bits")
      ->check(non_empty("--preset"));
}

std::optional<veloxquant::KVCacheConfig> kv_config_from_flags(const KvMethodFlags& flags) {
  if (!flags.preset.empty()) {
    const veloxquant::KvPreset& preset = veloxquant::require_kv_preset(flags.preset);
    if (flags.method != "none" || !flags.bits.empty()) {
      throw veloxquant::QuantizerConfigError("--preset " + flags.preset + " resolves to '" +
                                             veloxquant::kv_preset_settings(preset) +
                                             "'; drop --method/--bits (or use them without --preset)");
    }
    veloxquant::KVCacheConfig config = veloxquant::kv_preset_config(preset, flags.seed);
    for (const std::string& assignment : flags.sets) {
      if (auto warning = veloxquant::apply_field_assignment(config, assignment)) {
        std::fprintf(stderr, "warning: %s\n", warning->c_str());
      }
    }
    veloxquant::validate_per_layer_config(config);
    return config;
  }
  if (flags.method == "none") {
    if (!flags.bits.empty() || !flags.sets.empty()) {
      throw veloxquant::QuantizerConfigError("--bits/--set need a --method (got --method none)");
    }
    return std::nullopt;
  }
  const veloxquant::MethodDescriptor& method = veloxquant::require_method(flags.method);
  if (!method.is_servable) {
    throw veloxquant::QuantizerConfigError("method '" + flags.method + "' is standalone and cannot " +
                                           "serve a model; servable methods: turboquant_rvq, kivi, ...");
  }
  veloxquant::KVCacheConfig config;
  config.method = flags.method;
  config.seed = flags.seed;
  if (!flags.bits.empty()) {
    const veloxquant::FieldSpec* spec = veloxquant::find_generic_field("bit_width_inlier");
    spec->set(config, veloxquant::parse_field_value(*spec, flags.bits));
  }
  for (const std::string& assignment : flags.sets) {
    if (auto warning = veloxquant::apply_field_assignment(config, assignment)) {
      std::fprintf(stderr, "warning: %s\n", warning->c_str());
    }
  }
  // Everything but the per-layer facts (head_dim, list length against the model) can be checked
  // now: every layer of the per-layer lists; for_model checks the rest when the model is there.
  veloxquant::validate_per_layer_config(config);
  return config;
}

std::string kv_settings_text(const KvMethodFlags& flags) {
  std::vector<std::string> parts;
  if (!flags.preset.empty()) {
    parts.push_back("preset=" + flags.preset);
    for (const std::string& set : veloxquant::require_kv_preset(flags.preset).sets) parts.push_back(set);
  }
  parts.insert(parts.end(), flags.sets.begin(), flags.sets.end());
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ",") + p;
  return out;
}

std::string apply_kv_method(lm::Model& model, const std::optional<veloxquant::KVCacheConfig>& config) {
  // A saved prompt cache may hold compressed caches even when this run uses the host's own.
  veloxquant::integration::register_prompt_cache_types();
  if (!config) return "none";
  veloxquant::integration::patch_model_kv_cache(model, *config);
  return config->method;
}

std::size_t full_precision_kv_bytes(const lm::Model& model, int64_t tokens, lm::DType dtype) {
  const lm::ModelConfig& mc = model.config();
  std::size_t total = 0;
  for (const lm::LayerInfo& layer : model.layers()) {
    if (!layer.is_attention) continue;
    const int64_t head_dim = layer.head_dim > 0 ? layer.head_dim
                             : mc.head_dim > 0  ? mc.head_dim
                                                : (mc.n_heads > 0 ? mc.dim / mc.n_heads : 0);
    const int64_t kv_heads = layer.n_kv_heads > 0 ? layer.n_kv_heads : mc.n_kv_heads;
    total += static_cast<std::size_t>(2 * kv_heads * head_dim * tokens) * lm::dtype_size(dtype);
  }
  return total;
}

}  // namespace apps
