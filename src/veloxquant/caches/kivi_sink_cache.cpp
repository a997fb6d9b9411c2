#include "veloxquant/caches/kivi_sink_cache.h"

#include <string>

#include "veloxquant/caches/kivi_cache.h"
#include "veloxquant/errors.h"

namespace veloxquant {

namespace {
constexpr const char* kTypeName = "KiviSinkCache";
constexpr int kMaxSinks = 1 << 16;  // rows allocated up front: a bound a typo cannot blow past

KiviVariant kivi_sink_variant(int n_sink_tokens) {
  KiviVariant v;
  v.type_name = kTypeName;
  v.sinks = SinkRule::kTopKeyNorm;
  v.sink_slots = n_sink_tokens;
  return v;
}
}  // namespace

void validate_kivi_sink_options(const KVCacheConfig& config) {
  const int bits = config.bit_width_inlier.scalar();
  if (bits < 1 || bits > 8) {
    throw QuantizerConfigError("bit_width_inlier for 'kivi_sink' must lie in [1, 8], got " + std::to_string(bits));
  }
  const int n = config.options<KiviSinkOptions>().n_sink_tokens;
  if (n < 0 || n > kMaxSinks) {
    throw QuantizerConfigError("n_sink_tokens must lie in [0, " + std::to_string(kMaxSinks) + "], got " +
                               std::to_string(n));
  }
}

std::shared_ptr<lm::KVCache> make_kivi_sink_cache(const KVCacheConfig& config) {
  validate_kivi_sink_options(config);
  return std::make_shared<KiviCache>(config.head_dim, config.bit_width_inlier.scalar(), config.kivi.kivi_group_size,
                                     config.kivi.residual_length,
                                     kivi_sink_variant(config.options<KiviSinkOptions>().n_sink_tokens));
}

MethodDescriptor kivi_sink_method() {
  MethodDescriptor m;
  m.name = "kivi_sink";
  m.family = "hybrid";  // the original's editorial label (spec §6 #9)
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "KIVI + the n_sink_tokens highest mean-key-norm rows kept full precision, neutralized in their key "
      "group before its (min, max) are taken";
  m.paper =
      "KVSink: Understanding and Enhancing the Preservation of Attention Sinks in KV Cache Quantization for "
      "LLMs (Su & Yuan, COLM 2025, arXiv 2508.04257), on KIVI (Liu et al., ICML 2024, arXiv 2402.02750)";
  m.deviations =
      "Sinks are chosen as rows are quantized and never displaced (each flush fills the free slots with "
      "its highest-norm rows; a prompt flushed at once gets its top n); the original re-selects over its "
      "fp16 copy every step. Neutralization copies the nearest non-sink row of the same key group. "
      "Codes bit-packed, sink rows stored exactly in the input dtype.";
  m.docs = "docs/methods/kivi_sink.md";
  m.generic_fields = {"head_dim", "bit_width_inlier"};
  m.fields = {option_field("n_sink_tokens", &KiviSinkOptions::n_sink_tokens,
                           "Rows per batch element kept full precision: the highest mean key L2 norm over the heads", 0,
                           kMaxSinks)};
  m.borrowed_fields = {"kivi_group_size", "residual_length"};
  m.validate = validate_kivi_sink_options;
  m.make_serving = make_kivi_sink_cache;
  m.cache_type_name = kTypeName;
  // Placeholder parameters: from_state() rebuilds every one of them from meta_state().
  m.make_restorable = [] { return std::make_shared<KiviCache>(1, 2, 32, 0, kivi_sink_variant(0)); };
  return m;
}

}  // namespace veloxquant
