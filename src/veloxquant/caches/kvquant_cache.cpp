#include "veloxquant/caches/kvquant_cache.h"

#include <string>

#include "base/error.h"
#include "veloxquant/caches/kivi_cache.h"
#include "veloxquant/errors.h"

namespace veloxquant {

namespace {
constexpr const char* kTypeName = "KVQuantCache";
constexpr int kMaxSinks = 1 << 16;  // rows allocated up front: a bound a typo cannot blow past

KiviVariant kvquant_variant(const KVQuantOptions& o) {
  KiviVariant v;
  v.type_name = kTypeName;
  v.sinks = SinkRule::kFirstPositions;
  v.sink_slots = o.kvquant_n_sink;
  v.outlier_fraction = o.kvquant_outlier_fraction;
  v.lloyd_iters = o.kvquant_lloyd_iters;
  return v;
}
}  // namespace

void validate_kvquant_options(const KVCacheConfig& config) {
  const KVQuantOptions& o = config.options<KVQuantOptions>();
  if (o.kvquant_bits < 1 || o.kvquant_bits > 8) {
    throw QuantizerConfigError("kvquant_bits must lie in [1, 8], got " + std::to_string(o.kvquant_bits));
  }
  if (!(o.kvquant_outlier_fraction >= 0.0 && o.kvquant_outlier_fraction <= 0.5)) {
    throw QuantizerConfigError("kvquant_outlier_fraction must lie in [0, 0.5], got " +
                               std::to_string(o.kvquant_outlier_fraction));
  }
  if (o.kvquant_group_size < 1 || o.kvquant_group_size > 4096) {
    throw QuantizerConfigError("kvquant_group_size must lie in [1, 4096], got " + std::to_string(o.kvquant_group_size));
  }
  if (o.kvquant_lloyd_iters < 0 || o.kvquant_lloyd_iters > 1000) {
    throw QuantizerConfigError("kvquant_lloyd_iters must lie in [0, 1000], got " +
                               std::to_string(o.kvquant_lloyd_iters));
  }
  if (o.kvquant_n_sink < 0 || o.kvquant_n_sink > kMaxSinks) {
    throw QuantizerConfigError("kvquant_n_sink must lie in [0, " + std::to_string(kMaxSinks) + "], got " +
                               std::to_string(o.kvquant_n_sink));
  }
  if (o.kvquant_refit_interval < 0) {
    throw QuantizerConfigError("kvquant_refit_interval must be >= 0, got " + std::to_string(o.kvquant_refit_interval));
  }
  if (o.kvquant_refit_interval > 0) {
    // Refitting would change what old codes mean unless every refit kept its own level table.
    throw base::Unsupported("kvquant_refit_interval=" + std::to_string(o.kvquant_refit_interval) +
                            " is not supported: the levels are fitted once, on the first flush (use 0)");
  }
}

std::shared_ptr<lm::KVCache> make_kvquant_cache(const KVCacheConfig& config) {
  validate_kvquant_options(config);
  const KVQuantOptions& o = config.options<KVQuantOptions>();
  return std::make_shared<KiviCache>(config.head_dim, o.kvquant_bits, o.kvquant_group_size, 0, kvquant_variant(o));
}

MethodDescriptor kvquant_method() {
  MethodDescriptor m;
  m.name = "kvquant";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Per-channel keys / per-token values in groups with non-uniform Lloyd-fitted levels, a sparse fraction "
      "of outliers and the first kvquant_n_sink tokens kept exact (dense-and-sparse)";
  m.paper =
      "KVQuant: Towards 10 Million Context Length LLM Inference with KV Cache Quantization (Hooper et al., "
      "NeurIPS 2024, arXiv 2401.18079)";
  m.deviations =
      "Keys are quantized post-RoPE (the host applies RoPE before the cache sees a key). Levels are fitted "
      "per head on the first flushed block, not offline with Fisher weights; kvquant_refit_interval > 0 is "
      "refused. Outliers are picked per key group block by distance from the group median in MADs, with "
      "f32 corrections and u32 indices (the paper: per-vector thresholds, CSR in fp16). Scales are per "
      "group of kvquant_group_size tokens (keys) / channels (values), no Q-Norm.";
  m.docs = "docs/methods/kvquant.md";
  m.generic_fields = {"head_dim"};
  m.fields = {
      option_field("kvquant_bits", &KVQuantOptions::kvquant_bits, "Bits per code (2^bits fitted levels)", 1, 8),
      option_field("kvquant_outlier_fraction", &KVQuantOptions::kvquant_outlier_fraction,
                   "Fraction of each key group block's elements kept exact as sparse outliers, in [0, 0.5]"),
      option_field("kvquant_group_size", &KVQuantOptions::kvquant_group_size,
                   "Tokens per key group (per channel), channels per value group", 1, 4096),
      option_field("kvquant_lloyd_iters", &KVQuantOptions::kvquant_lloyd_iters,
                   "Lloyd iterations fitting the levels on the first flush (0 = KIVI's uniform levels)", 0, 1000),
      option_field("kvquant_refit_interval", &KVQuantOptions::kvquant_refit_interval,
                   "0 = levels frozen after the first flush (the only value supported)", 0),
      option_field("kvquant_n_sink", &KVQuantOptions::kvquant_n_sink, "First positions kept exact (attention sinks)", 0,
                   kMaxSinks),
  };
  m.validate = validate_kvquant_options;
  m.make_serving = make_kvquant_cache;
  m.cache_type_name = kTypeName;
  m.make_restorable = [] { return std::make_shared<KiviCache>(1, 2, 32, 0, kvquant_variant(KVQuantOptions{})); };
  return m;
}

}  // namespace veloxquant
