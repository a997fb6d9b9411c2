#pragma once
// veloxquant::KVCacheBuilder (spec §4): a fluent builder over KVCacheConfig. build() makes one
// cache (servable or standalone); for_model() makes one serving cache per decoder layer of a
// host model.
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "lm/cache/cache.h"
#include "lm/model.h"
#include "veloxquant/caches/standalone_cache.h"
#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

// What build() returns: a servable cache (the host's KVCache contract) or a standalone one
// (append/attend), by the method's kind. The accessor for the other kind throws.
class BuiltCache {
 public:
  explicit BuiltCache(std::shared_ptr<lm::KVCache> serving) : serving_(std::move(serving)) {}
  explicit BuiltCache(std::shared_ptr<StandaloneCache> standalone) : standalone_(std::move(standalone)) {}

  bool is_standalone() const { return standalone_ != nullptr; }
  // Throw QuantizerConfigError when the cache is of the other kind.
  std::shared_ptr<lm::KVCache> serving() const;
  std::shared_ptr<StandaloneCache> standalone() const;

 private:
  std::shared_ptr<lm::KVCache> serving_;
  std::shared_ptr<StandaloneCache> standalone_;
};

class KVCacheBuilder {
 public:
  KVCacheBuilder() = default;
  explicit KVCacheBuilder(KVCacheConfig config) : config_(std::move(config)) {}

  KVCacheBuilder& with_method(std::string method);
  KVCacheBuilder& with_head_dim(int head_dim);
  KVCacheBuilder& with_bit_width(BitWidth inlier, std::optional<int> outlier = std::nullopt);
  KVCacheBuilder& with_jl_dim(std::optional<int> jl_dim);
  KVCacheBuilder& with_n_outlier_channels(std::optional<int> n);
  KVCacheBuilder& with_n_calib_tokens(std::optional<int> n);
  KVCacheBuilder& with_vectorized_attend(bool on);
  KVCacheBuilder& with_outlier_two_stream(bool on);
  KVCacheBuilder& with_fused_query_dot(bool on);
  KVCacheBuilder& with_seed(int64_t seed);
  KVCacheBuilder& with_capacity(std::optional<int64_t> capacity);
  KVCacheBuilder& with_sliding_window(std::optional<int64_t> window);
  // Any declared field by name, as `--set FIELD=VALUE` does ("kivi_group_size=64").
  KVCacheBuilder& with_option(std::string_view assignment);

  const KVCacheConfig& config() const { return config_; }

  // Validates in the spec's order (validate_for_build) and makes the cache.
  BuiltCache build() const;

  // One cache per decoder layer (spec §4.2): refuses standalone methods before reading the
  // model; non-attention layers keep the model's native cache (native_make_cache(), never the
  // make_cache hook); head_dim per layer from LayerInfo, else the model config; a bit-width list
  // needs exactly one entry per attention layer; per-layer seed = seed + raw layer index.
  // Sliding-window attention layers get a compressed cache too (as the original: no special
  // case for rotating caches); it keeps every token and the window is applied by the mask /
  // by fused_attention's request.window, so memory is not bounded by the window.
  // A vision-language wrapper with no layers of its own (lm::Model::language_model() set) gets
  // its language model's caches (spec §4.2 steps 2 and 4).
  static lm::CacheList for_model(const lm::Model& model, const KVCacheConfig& config);

 private:
  KVCacheConfig config_;
};

}  // namespace veloxquant
