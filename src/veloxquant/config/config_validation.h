#pragma once
// Validation of a KVCacheConfig, in the original's order (spec §3.4), every failure a
// QuantizerConfigError naming the field and the value.
#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

struct MethodDescriptor;

// KVCacheBuilder::build(): (1) head_dim a power of two >= 1; (2) bit width a non-empty list of
// ints >= 1 or an int >= 1; (3) jl_dim <= head_dim; (4) n_outlier_channels < head_dim;
// (5) n_calib_tokens >= 1; then everything validate_for_create checks.
void validate_for_build(const KVCacheConfig& config);

// KVCacheFactory.create (what for_model runs per layer; no power-of-two rule, spec §3.4 note):
// unknown method (message lists every valid name); list-form bit width for a method that does
// not take one; sliding_window with a servable method; then the declared bounds of the
// generic fields and of the method's own options, then the method's cross-field checks.
// Returns the method's descriptor.
const MethodDescriptor& validate_for_create(const KVCacheConfig& config);

// A method's own bit-width bound (a registry row's validate): the scalar bit_width_inlier lies in
// [lo, hi], or a QuantizerConfigError naming the method, the bounds and the value.
void require_bit_width_in(const KVCacheConfig& config, int lo, int hi);

}  // namespace veloxquant
