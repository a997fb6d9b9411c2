#include "veloxquant/config/config_validation.h"

#include <string>

#include "veloxquant/errors.h"
#include "veloxquant/registry/method_registry.h"

namespace veloxquant {
namespace {

bool is_power_of_two(int64_t v) { return v >= 1 && (v & (v - 1)) == 0; }

void check_bit_width(const BitWidth& bits) {
  if (bits.is_list()) {
    if (bits.list().empty()) {
      throw QuantizerConfigError("bit_width_inlier list must be non-empty, got []");
    }
    for (int b : bits.list()) {
      if (b < 1) {
        throw QuantizerConfigError("bit_width_inlier entries must be ints >= 1, got " + bits.to_string());
      }
    }
  } else if (bits.scalar() < 1) {
    throw QuantizerConfigError("bit_width_inlier must be >= 1, got " + bits.to_string());
  }
}

// Generic switches of the original that change nothing in this port: refused when set away from
// their defaults rather than silently accepted (a user who sets one expects an effect).
void refuse_generic_switches_without_effect(const KVCacheConfig& config) {
  if (!config.enable_vectorized_attend) {
    throw QuantizerConfigError(
        "enable_vectorized_attend=false has no effect here: the standalone caches always score "
        "every key in one pass; leave it at true");
  }
  if (config.enable_fused_query_dot) {
    throw QuantizerConfigError(
        "enable_fused_query_dot=true has no effect here: the standalone caches have one "
        "scoring path; leave it at false");
  }
  if (config.bit_width_outlier) {
    throw QuantizerConfigError("bit_width_outlier=" + std::to_string(*config.bit_width_outlier) +
                               " has no effect here: outlier channels are stored int8 with a per-token f16 scale; "
                               "leave it unset");
  }
}

}  // namespace

void validate_for_build(const KVCacheConfig& config) {
  if (!is_power_of_two(config.head_dim)) {
    throw QuantizerConfigError("head_dim must be a power of two >= 1, got " + std::to_string(config.head_dim));
  }
  check_bit_width(config.bit_width_inlier);
  if (config.jl_dim && *config.jl_dim > config.head_dim) {
    throw QuantizerConfigError("jl_dim must be <= head_dim (" + std::to_string(config.head_dim) + "), got " +
                               std::to_string(*config.jl_dim));
  }
  if (config.n_outlier_channels && *config.n_outlier_channels >= config.head_dim) {
    throw QuantizerConfigError("n_outlier_channels must be < head_dim (" + std::to_string(config.head_dim) + "), got " +
                               std::to_string(*config.n_outlier_channels));
  }
  if (config.n_calib_tokens && *config.n_calib_tokens < 1) {
    throw QuantizerConfigError("n_calib_tokens must be >= 1, got " + std::to_string(*config.n_calib_tokens));
  }
  validate_for_create(config);
}

const MethodDescriptor& validate_for_create(const KVCacheConfig& config) {
  const MethodDescriptor& method = require_method(config.method);
  if (config.bit_width_inlier.is_list() && !method.capabilities.accepts_bit_width_list) {
    throw QuantizerConfigError("bit_width_inlier " + config.bit_width_inlier.to_string() + " is list-form; method '" +
                               config.method + "' takes one int per cache (lists are for KVCacheBuilder::for_model, " +
                               "one entry per attention layer)");
  }
  if (config.sliding_window && method.is_servable) {
    throw QuantizerConfigError("sliding_window=" + std::to_string(*config.sliding_window) + " applies to standalone " +
                               "methods only, not '" + config.method +
                               "'; eviction methods have their own budget and window");
  }
  check_bit_width(config.bit_width_inlier);
  if (config.head_dim < 1) {
    throw QuantizerConfigError("head_dim must be >= 1, got " + std::to_string(config.head_dim));
  }
  for (const FieldSpec& spec : generic_fields()) check_field_bounds(spec, spec.get(config));
  refuse_generic_switches_without_effect(config);
  for (const FieldSpec& spec : method.fields) {
    const FieldValue value = spec.get(config);
    check_field_bounds(spec, value);
    // A method's bit-width option in list form is for for_model (per_layer_lists.h), which
    // resolves it to one int per attention layer before a cache is made.
    if (const auto* bits = std::get_if<BitWidth>(&value); bits && bits->is_list()) {
      throw QuantizerConfigError(spec.name + " " + bits->to_string() + " is list-form; a single '" + config.method +
                                 "' cache takes one int (lists are for KVCacheBuilder::for_model, one entry per "
                                 "attention layer)");
    }
  }
  if (method.validate) method.validate(config);
  return method;
}

void require_bit_width_in(const KVCacheConfig& config, int lo, int hi) {
  const int bits = config.bit_width_inlier.scalar();
  if (bits < lo || bits > hi) {
    throw QuantizerConfigError("bit_width_inlier for '" + config.method + "' must lie in [" + std::to_string(lo) +
                               ", " + std::to_string(hi) + "], got " + std::to_string(bits));
  }
}

}  // namespace veloxquant
