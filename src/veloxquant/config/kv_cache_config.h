#pragma once
// veloxquant::KVCacheConfig — the one config object every entry point takes (spec §3).
// Generic fields first (§3.1), then one typed options struct per method (§3.3). Validation in
// the spec's order lives in config_validation.h; field declarations (names, help, bounds) that
// feed --set, JSON and validation live in registry/field_spec.h.
#include <cstdint>
#include <optional>
#include <string>

#include "veloxquant/config/bit_width.h"
#include "veloxquant/config/method_options.h"
#include "veloxquant/config/options_bag.h"

namespace veloxquant {

struct KVCacheConfig {
  // Generic fields (spec §3.1). The default method is servable (issue #130 of the original).
  std::string method = "turboquant_rvq";
  int head_dim = 128;  // overridden per layer by for_model
  BitWidth bit_width_inlier = 2;
  std::optional<int> bit_width_outlier;   // none = same as inlier
  std::optional<int> jl_dim;              // QJL / TurboQuant-prod sketch size; none = method default
  std::optional<int> n_outlier_channels;  // standalone TurboQuant two-stream mode
  std::optional<int> n_calib_tokens;      // standalone TurboQuant two-stream mode (200 when unset)
  bool enable_vectorized_attend = true;   // standalone TurboQuant: score all keys in one pass
  bool enable_outlier_two_stream = false;
  bool enable_fused_query_dot = false;    // standalone TurboQuant: dot in the rotated domain
  int64_t seed = 42;                      // for_model uses seed + raw layer index
  std::optional<int64_t> capacity;        // standalone caches; none = 1,000,000 tokens
  std::optional<int64_t> sliding_window;  // standalone caches only (factory rule, §3.4)

  // Per-method options (spec §3.3).
  TurboQuantRvqOptions turboquant_rvq;
  TurboQuantBlockOptions turboquant_block;
  KIVIOptions kivi;
  SpectralOptions spectral;
  StreamingLLMOptions streaming_llm;
  H2OOptions h2o;
  TOVAOptions tova;
  SnapKVOptions snapkv;
  PyramidKVOptions pyramidkv;
  EvictionStorageOptions eviction;
  XQuantOptions xquant;
  MiniCacheOptions minicache;
  // Options structs declared in their method's own header (options_bag.h): methods added since
  // the registry became one registration per method keep their options there, not above.
  OptionsBag method_options;

  template <class Options>
  const Options& options() const {
    return method_options.get<Options>();
  }
  template <class Options>
  Options& options() {
    return method_options.get_mut<Options>();
  }

  // "KVCacheConfig(method='kivi', d=128, b=2, seed=42)" — the original's repr.
  std::string to_string() const;
};

}  // namespace veloxquant
