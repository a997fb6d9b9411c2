#pragma once
// kivi_sink (KVSink, Su & Yuan, COLM 2025, arXiv 2508.04257, "KVSink-adapted" in the original;
// spec §6 #9): KIVI (caches/kivi_cache.h) whose attention-sink rows stay full precision. Per batch
// element, the n_sink_tokens rows with the highest mean key L2 norm over the heads are stored
// exactly (caches/sink_rows.h) and neutralized — replaced by the nearest non-sink row of their
// key group — before the group's per-channel (min, max) are taken, so one massive sink does not
// spend a whole group's key resolution. Everything else is KIVI: bit_width_inlier bits,
// kivi_group_size, residual_length, the same packed storage and fused attention from the codes.
#include <memory>

#include "lm/cache/cache.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's field and default (spec §3.2 "KIVI-Sink"); the KIVI knobs are KIVIOptions'.
struct KiviSinkOptions {
  int n_sink_tokens = 5;
};

// QuantizerConfigError naming the field and value (bits in 1..8, n_sink_tokens >= 0).
void validate_kivi_sink_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_kivi_sink_cache(const KVCacheConfig& config);
// The registration (registry/method_table.cpp lists it).
MethodDescriptor kivi_sink_method();

}  // namespace veloxquant
