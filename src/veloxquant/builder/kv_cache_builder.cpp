#include "veloxquant/builder/kv_cache_builder.h"

#include <optional>
#include <string>
#include <vector>

#include "base/logging.h"
#include "lm/cache/full_kv_cache.h"
#include "veloxquant/config/config_validation.h"
#include "veloxquant/config/per_layer_lists.h"
#include "veloxquant/errors.h"
#include "veloxquant/integration/prompt_cache_types.h"
#include "veloxquant/registry/field_assignment.h"
#include "veloxquant/registry/method_registry.h"

namespace veloxquant {

std::shared_ptr<lm::KVCache> BuiltCache::serving() const {
  if (!serving_) {
    throw QuantizerConfigError(
        "the built cache is standalone (append/attend); it has no "
        "update_and_fetch serving interface");
  }
  return serving_;
}

std::shared_ptr<StandaloneCache> BuiltCache::standalone() const {
  if (!standalone_) {
    throw QuantizerConfigError("the built cache is a serving cache, not a standalone one");
  }
  return standalone_;
}

KVCacheBuilder& KVCacheBuilder::with_method(std::string method) {
  config_.method = std::move(method);
  return *this;
}
KVCacheBuilder& KVCacheBuilder::with_head_dim(int head_dim) {
  config_.head_dim = head_dim;
  return *this;
}
KVCacheBuilder& KVCacheBuilder::with_bit_width(BitWidth inlier, std::optional<int> outlier) {
  config_.bit_width_inlier = std::move(inlier);
  config_.bit_width_outlier = outlier;
  return *this;
}
KVCacheBuilder& KVCacheBuilder::with_jl_dim(std::optional<int> jl_dim) {
  config_.jl_dim = jl_dim;
  return *this;
}
KVCacheBuilder& KVCacheBuilder::with_n_outlier_channels(std::optional<int> n) {
  config_.n_outlier_channels = n;
  return *this;
}
KVCacheBuilder& KVCacheBuilder::with_n_calib_tokens(std::optional<int> n) {
  config_.n_calib_tokens = n;
  return *this;
}
KVCacheBuilder& KVCacheBuilder::with_vectorized_attend(bool on) {
  config_.enable_vectorized_attend = on;
  return *this;
}
KVCacheBuilder& KVCacheBuilder::with_outlier_two_stream(bool on) {
  config_.enable_outlier_two_stream = on;
  return *this;
}
KVCacheBuilder& KVCacheBuilder::with_fused_query_dot(bool on) {
  config_.enable_fused_query_dot = on;
  return *this;
}
KVCacheBuilder& KVCacheBuilder::with_seed(int64_t seed) {
  config_.seed = seed;
  return *this;
}
KVCacheBuilder& KVCacheBuilder::with_capacity(std::optional<int64_t> capacity) {
  config_.capacity = capacity;
  return *this;
}
KVCacheBuilder& KVCacheBuilder::with_sliding_window(std::optional<int64_t> window) {
  config_.sliding_window = window;
  return *this;
}
KVCacheBuilder& KVCacheBuilder::with_option(std::string_view assignment) {
  apply_field_assignment(config_, assignment);
  return *this;
}

BuiltCache KVCacheBuilder::build() const {
  validate_for_build(config_);
  const MethodDescriptor& method = require_method(config_.method);
  if (method.is_servable) return BuiltCache(method.make_serving(config_));
  return BuiltCache(std::shared_ptr<StandaloneCache>(method.make_standalone(config_)));
}

namespace {

// head_dim of one layer: the layer's own, else the model's, else dim / n_heads; 0 when none
// resolves (the layer then keeps its native cache, as the original's fallback does).
int resolve_head_dim(const lm::LayerInfo& layer, const lm::ModelConfig& model) {
  if (layer.head_dim > 0) return layer.head_dim;
  if (model.head_dim > 0) return model.head_dim;
  if (model.dim > 0 && model.n_heads > 0) return model.dim / model.n_heads;
  return 0;
}

lm::CacheList native_caches(const lm::Model& model, std::size_t n_layers) {
  // The architecture's own factory, never the instance hook (which patch_model_kv_cache sets,
  // and calling it here would recurse — issue #505 of the original).
  try {
    lm::CacheList native = model.native_make_cache();
    if (native.size() == n_layers) return native;
    base::log_warning("native_make_cache() returned " + std::to_string(native.size()) + " caches for " +
                      std::to_string(n_layers) + " layers; falling back to plain FullKVCache for non-quantized layers");
  } catch (const std::exception& error) {
    base::log_warning(std::string("native_make_cache() raised: ") + error.what() +
                      "; falling back to plain FullKVCache for non-quantized layers");
  }
  lm::CacheList plain;
  for (std::size_t i = 0; i < n_layers; ++i) plain.push_back(std::make_shared<lm::FullKVCache>());
  return plain;
}

}  // namespace

lm::CacheList KVCacheBuilder::for_model(const lm::Model& model, const KVCacheConfig& config) {
  // Step 1, before the model is read at all.
  if (is_standalone_method(config.method)) {
    throw QuantizerConfigError("method '" + config.method + "' is standalone (append/attend " +
                               "research cache) and cannot serve a model; use a servable method " +
                               "such as 'turboquant_rvq'");
  }
  const MethodDescriptor& method = require_method(config.method);
  integration::register_prompt_cache_types();  // so these caches can be saved and reloaded

  // Step 2 (spec §4.2): the model's own layers, else — a vision-language wrapper whose decoder
  // is its language model (LLaVA, SmolVLM) — the language model's. Step 4: the model's config,
  // else the language model's when the wrapper's carries no sizes (only a text config does).
  const lm::Model* language = model.language_model();
  const lm::Model& target = model.layers().empty() && language ? *language : model;
  const std::vector<lm::LayerInfo>& layers = target.layers();
  const lm::ModelConfig& model_config = target.config().dim > 0 || !language ? target.config() : language->config();
  std::vector<int> head_dims(layers.size(), 0);
  std::size_t n_attention = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i].is_attention) continue;
    head_dims[i] = resolve_head_dim(layers[i], model_config);
    if (head_dims[i] > 0) ++n_attention;
  }
  check_per_layer_lengths(config, n_attention);
  if (method.capabilities.needs_coordinator && !method.wire_model) {
    throw QuantizerConfigError("method '" + method.name + "' needs a cross-layer coordinator, " +
                               "which this build does not provide");
  }
  // Every attention layer's config is resolved and validated before any cache is made, so a
  // bad option fails before the wiring (a coordinator) is built.
  std::vector<std::optional<KVCacheConfig>> layer_configs(layers.size());
  std::size_t attention_index = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (head_dims[i] == 0) continue;
    // Every per-layer list (bit_width_inlier, a method's key_bits ...) takes its entry here.
    KVCacheConfig layer_config = config_for_attention_layer(config, attention_index++);
    layer_config.head_dim = head_dims[i];
    // seed + raw layer index (spec §4.2), wrapping past INT64_MAX instead of overflowing.
    layer_config.seed = static_cast<int64_t>(static_cast<uint64_t>(config.seed) + i);
    validate_for_create(layer_config);
    layer_configs[i] = std::move(layer_config);
  }
  const LayerCacheFactory make_layer =
      method.wire_model ? method.wire_model(config, n_attention)
                        : LayerCacheFactory([&method](const KVCacheConfig& layer_config, std::size_t) {
                            return method.make_serving(layer_config);
                          });

  // Native caches are made only when some layer needs one.
  lm::CacheList native;
  if (n_attention < layers.size()) native = native_caches(target, layers.size());

  lm::CacheList caches(layers.size());
  attention_index = 0;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    if (!layer_configs[i]) {
      caches[i] = native[i];
      continue;
    }
    caches[i] = make_layer(*layer_configs[i], attention_index++);
  }
  return caches;
}

}  // namespace veloxquant
