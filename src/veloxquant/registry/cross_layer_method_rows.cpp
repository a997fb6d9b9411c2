// Registry rows of the cross-layer methods (spec §4.3): layers of one for_model call share a
// coordinator, made once per call by wire_model and captured by every layer's factory.
#include <cmath>
#include <memory>
#include <string>

#include "veloxquant/cross_layer/minicache_cache.h"
#include "veloxquant/cross_layer/xkv_cache.h"
#include "veloxquant/cross_layer/xquant_cache.h"
#include "veloxquant/cross_layer/layer_roles.h"
#include "veloxquant/cross_layer/wiring_registry.h"
#include "veloxquant/errors.h"
#include "veloxquant/registry/method_rows.h"

namespace veloxquant {
namespace {

void require_unit_interval(double value, const char* field) {
  if (!(value >= 0.0 && value <= 1.0)) {
    throw QuantizerConfigError(std::string(field) + " must lie in [0, 1], got " + std::to_string(value));
  }
}

MethodDescriptor xquant_row() {
  MethodDescriptor m;
  m.name = "xquant";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .needs_coordinator = true, .real_compression = true};
  m.blurb =
      "Cross-layer: the anchor layer's token-axis group codes are reused by the next "
      "layers of its group, each with its own scale/zero and a quantized residual";
  m.paper =
      "XQuant: Achieving Ultra-Low Bit KV Cache Quantization with Cross-Layer Compression "
      "(Yang et al., EMNLP 2025, arXiv 2510.11236)";
  m.deviations =
      "Codes bit-packed and held once (reuse layers share the anchor's buffer), params "
      "fp32 as the original. Token groups aligned to absolute positions and quantized "
      "when complete; the incomplete last group stays in the input dtype (the original "
      "pads each call's tokens to whole groups). Reuse layers that find no published "
      "codes (prompt-cache load) quantize their own.";
  m.docs = "docs/methods/xquant.md";
  m.generic_fields = {"head_dim"};
  m.fields = {
      option_field("xquant_group_size", &KVCacheConfig::xquant, &XQuantOptions::xquant_group_size,
                   "Attention layers per group: one anchor followed by group_size - 1 reuse layers", 2),
      option_field("xquant_base_bits", &KVCacheConfig::xquant, &XQuantOptions::xquant_base_bits,
                   "Bits of the anchor's codes (shared by the group)", 1, 8),
      option_field("xquant_residual_bits", &KVCacheConfig::xquant, &XQuantOptions::xquant_residual_bits,
                   "Bits of each reuse layer's quantized residual; 0 = pure code reuse", 0, 8),
      option_field("xquant_group_quant_size", &KVCacheConfig::xquant, &XQuantOptions::xquant_group_quant_size,
                   "Tokens per quantization group (per channel, along the token axis)", 1, 65536),
      option_field("xquant_max_ctx", &KVCacheConfig::xquant, &XQuantOptions::xquant_max_ctx,
                   "Most live (published, not yet read) tokens per layer group", 1),
  };
  m.make_serving = make_xquant_cache;
  // Restored alone (no coordinator): a reuse layer keeps what it saved and handles later tokens
  // as a layer whose leader published nothing.
  m.cache_type_name = "XQuantCache";
  m.make_restorable = [] { return std::make_shared<XQuantCache>(2, 0, 32); };
  m.wire_model = [](const KVCacheConfig& config, std::size_t n_attention_layers) -> LayerCacheFactory {
    const XQuantOptions& o = config.xquant;
    auto roles = std::make_shared<std::vector<cross_layer::LayerRole>>(
        cross_layer::xquant_roles(n_attention_layers, o.xquant_group_size));
    const uint64_t wiring_id = cross_layer::new_wiring_id();
    auto coordinator = std::make_shared<XQuantCoordinator>(o.xquant_max_ctx, "xquant_max_ctx");
    return [roles, coordinator, wiring_id](const KVCacheConfig& layer,
                                           std::size_t attention_index) -> std::shared_ptr<lm::KVCache> {
      const XQuantOptions& lo = layer.xquant;
      return std::make_shared<XQuantCache>(lo.xquant_base_bits, lo.xquant_residual_bits, lo.xquant_group_quant_size,
                                           roles->at(attention_index), coordinator, wiring_id);
    };
  };
  return m;
}

MethodDescriptor minicache_row() {
  MethodDescriptor m;
  m.name = "minicache";
  m.family = "hybrid";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .needs_coordinator = true};
  m.blurb =
      "Cross-layer: deep adjacent layers keep their magnitudes and a SLERP-merged direction; "
      "dissimilar tokens are retained";
  m.paper =
      "MiniCache: KV Cache Compression in Depth Dimension for Large Language Models "
      "(Liu et al., NeurIPS 2024, arXiv 2405.14366)";
  m.deviations =
      "As the original, the primary layer stays lossless and only the merge layer's "
      "vectors change; rows are stored in the input dtype, so resident memory equals "
      "the full cache (the original's saving is accounting only).";
  m.docs = "docs/methods/minicache.md";
  m.generic_fields = {"head_dim"};
  m.fields = {
      option_field("minicache_start_frac", &KVCacheConfig::minicache, &MiniCacheOptions::minicache_start_frac,
                   "Merging starts at attention layer int(n * start_frac); layers below stay alone"),
      option_field("minicache_group_size", &KVCacheConfig::minicache, &MiniCacheOptions::minicache_group_size,
                   "Layers per merge group: one primary followed by group_size - 1 merge layers", 2),
      option_field("minicache_retention_threshold", &KVCacheConfig::minicache,
                   &MiniCacheOptions::minicache_retention_threshold,
                   "Tokens whose directions have cosine below this keep their own vector"),
      option_field("minicache_slerp_t", &KVCacheConfig::minicache, &MiniCacheOptions::minicache_slerp_t,
                   "SLERP weight of the merge layer's direction (0 = the primary's)"),
      option_field("minicache_max_ctx", &KVCacheConfig::minicache, &MiniCacheOptions::minicache_max_ctx,
                   "Most live (published, not yet read) tokens per layer group", 1),
  };
  m.validate = [](const KVCacheConfig& c) {
    require_unit_interval(c.minicache.minicache_start_frac, "minicache_start_frac");
    require_unit_interval(c.minicache.minicache_slerp_t, "minicache_slerp_t");
    if (!std::isfinite(c.minicache.minicache_retention_threshold)) {
      throw QuantizerConfigError("minicache_retention_threshold must be finite, got " +
                                 std::to_string(c.minicache.minicache_retention_threshold));
    }
  };
  m.make_serving = make_minicache_cache;
  m.cache_type_name = "MiniCacheCache";
  m.make_restorable = [] { return std::make_shared<MiniCacheCache>(MiniCacheMergeOptions{}); };
  m.wire_model = [](const KVCacheConfig& config, std::size_t n_attention_layers) -> LayerCacheFactory {
    const MiniCacheOptions& o = config.minicache;
    auto roles = std::make_shared<std::vector<cross_layer::LayerRole>>(
        cross_layer::minicache_roles(n_attention_layers, o.minicache_start_frac, o.minicache_group_size));
    const uint64_t wiring_id = cross_layer::new_wiring_id();
    auto coordinator = std::make_shared<MiniCacheCoordinator>(o.minicache_max_ctx, "minicache_max_ctx");
    return [roles, coordinator, wiring_id](const KVCacheConfig& layer,
                                           std::size_t attention_index) -> std::shared_ptr<lm::KVCache> {
      const MiniCacheOptions& lo = layer.minicache;
      return std::make_shared<MiniCacheCache>(
          MiniCacheMergeOptions{static_cast<float>(lo.minicache_retention_threshold),
                                static_cast<float>(lo.minicache_slerp_t)},
          roles->at(attention_index), coordinator, wiring_id);
    };
  };
  return m;
}

}  // namespace

std::vector<MethodDescriptor> cross_layer_method_rows() { return {xquant_row(), minicache_row(), xkv_method()}; }

}  // namespace veloxquant
