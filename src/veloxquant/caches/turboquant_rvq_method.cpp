// The registry row of "turboquant_rvq" (registry/method_table.cpp lists it): its own file, so a
// narrowed library (cmake/tsan_pooled_caches.cmake) lists the row without the full table.
#include <memory>

#include "veloxquant/caches/turboquant_rvq_cache.h"
#include "veloxquant/config/config_validation.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/turboquant_rvq.h"

namespace veloxquant {

MethodDescriptor turboquant_rvq_method() {
  MethodDescriptor m;
  m.name = "turboquant_rvq";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Rotation + two-stage residual Lloyd-Max (Gaussian then Laplacian), b bits each; "
      "keys bit-packed with bf16 norms, fused attention from the codes";
  m.paper =
      "TurboQuant: Online Vector Quantization with Near-optimal Distortion Rate "
      "(Zandieh et al., ICLR 2026, arXiv 2504.19874), residual extension of VeloxQuant-MLX";
  m.deviations =
      "Norms stored bf16 (the original's newest layout). New option rvq_value_bits "
      "(2..8) group-quantizes values; 0 keeps them in the input dtype as the original. "
      "Fused attention scores keys from the packed codes instead of dequantizing. "
      "Stage 2 uses a codebook matched to the stage-1 residual by default "
      "(rvq_stage2_scale=original restores the original's narrower one).";
  m.docs = "docs/methods/turboquant_rvq.md";
  m.generic_fields = {"head_dim", "bit_width_inlier", "seed"};
  m.fields = {option_field("rvq_value_bits", &KVCacheConfig::turboquant_rvq, &TurboQuantRvqOptions::rvq_value_bits,
                           "Value bits: 0 keeps values in the input dtype; 2..8 group-affine "
                           "quantizes them per token (group 32)",
                           0, 8),
              option_field("rvq_stage2_scale", &KVCacheConfig::turboquant_rvq, &TurboQuantRvqOptions::rvq_stage2_scale,
                           "Stage-2 codebook: 'matched' to the stage-1 residual (default) or the "
                           "original's narrower 'original' scale")};
  m.validate = [](const KVCacheConfig& c) {
    require_bit_width_in(c, 1, 8);
    if (c.turboquant_rvq.rvq_value_bits == 1) {
      throw QuantizerConfigError("rvq_value_bits must be 0 (keep dtype) or 2..8, got 1");
    }
    quant::parse_rvq_stage2_scale(c.turboquant_rvq.rvq_stage2_scale);
  };
  m.make_serving = make_turboquant_rvq_cache;
  // Placeholder parameters: from_state() rebuilds every one of them from meta_state().
  m.cache_type_name = "TurboQuantRvqCache";
  m.make_restorable = [] { return std::make_shared<TurboQuantRvqCache>(2, 1, 0); };
  return m;
}

}  // namespace veloxquant
