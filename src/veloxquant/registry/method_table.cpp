// The registry rows of the quantizers, one per method (docs/architecture.md "Adding a method"). Families reproduce the
// original's editorial labels (spec §6 "Reg. family").
#include <algorithm>
#include <string>
#include <vector>

#include "veloxquant/caches/a2ats_cache.h"
#include "veloxquant/caches/adakv_cache.h"
#include "veloxquant/caches/anchorkv_cache.h"
#include "veloxquant/caches/age_tiered_cache.h"
#include "veloxquant/caches/amc_cache.h"
#include "veloxquant/caches/cachegen_cache.h"
#include "veloxquant/caches/gear_cache.h"
#include "veloxquant/caches/kitty_cache.h"
#include "veloxquant/caches/kivi_cache.h"
#include "veloxquant/caches/kivi_sink_cache.h"
#include "veloxquant/caches/kvquant_cache.h"
#include "veloxquant/caches/nsnquant_cache.h"
#include "veloxquant/caches/vecinfer_cache.h"
#include "veloxquant/caches/comm_vq_cache.h"
#include "veloxquant/caches/polar_cache.h"
#include "veloxquant/caches/qjl_cache.h"
#include "veloxquant/caches/skvq_cache.h"
#include "veloxquant/caches/spectral_cache.h"
#include "veloxquant/caches/svdq_cache.h"
#include "veloxquant/caches/palu_cache.h"
#include "veloxquant/caches/kvtc_cache.h"
#include "veloxquant/caches/turboquant_block_cache.h"
#include "veloxquant/caches/turboquant_rvq_cache.h"
#include "veloxquant/caches/turboquant_standalone_cache.h"
#include "veloxquant/caches/zipcache_cache.h"
#include "veloxquant/config/config_validation.h"
#include "veloxquant/errors.h"
#include "veloxquant/registry/method_registry.h"
#include "veloxquant/registry/method_rows.h"

namespace veloxquant {
namespace {

// The generic fields every standalone cache reads (capacity and sliding window are the ring).
const std::vector<std::string> kStandaloneGeneric = {"head_dim", "bit_width_inlier", "seed", "capacity",
                                                     "sliding_window"};

MethodDescriptor turboquant_standalone_row(bool prod) {
  MethodDescriptor m;
  m.name = prod ? "turboquant_prod" : "turboquant_mse";
  m.family = "quantization";
  m.is_servable = false;
  m.capabilities = {.real_compression = true};
  m.blurb = prod ? "Rotation + (b-1)-bit Lloyd-Max + 1-bit QJL of the residual: unbiased inner "
                   "products (standalone)"
                 : "Rotation + b-bit Lloyd-Max MSE quantizer (standalone)";
  m.paper =
      "TurboQuant: Online Vector Quantization with Near-optimal Distortion Rate "
      "(Zandieh et al., ICLR 2026, arXiv 2504.19874)";
  m.deviations =
      "Values int8 per token as the original's standalone caches. Outlier two-stream: "
      "outlier channels int8 with a per-token f16 scale (bit_width_outlier not used).";
  m.docs = "docs/methods/quant_" + m.name + ".md";
  m.generic_fields = kStandaloneGeneric;
  for (const char* f : {"enable_outlier_two_stream", "n_outlier_channels", "n_calib_tokens"})
    m.generic_fields.push_back(f);
  if (prod) m.generic_fields.push_back("jl_dim");
  // prod: b_mse = max(b - 1, 1) bits for the MSE stage (spec §2.4), so b = 1 is allowed too.
  m.validate = [](const KVCacheConfig& c) { require_bit_width_in(c, 1, 8); };
  m.make_standalone = [prod](const KVCacheConfig& c) { return make_turboquant_standalone_cache(c, prod); };
  return m;
}

MethodDescriptor qjl_row() {
  MethodDescriptor m;
  m.name = "qjl";
  m.family = "quantization";
  m.is_servable = false;
  m.capabilities = {.real_compression = true};
  m.blurb = "Gaussian JL sketch of the key, 1-bit signs + norm; unbiased inner products (standalone)";
  m.paper =
      "QJL: 1-Bit Quantized JL Transform for KV Cache Quantization with Zero Overhead "
      "(Zandieh et al., AAAI 2025, arXiv 2406.03482)";
  m.deviations = "Signs bit-packed (the original counts one byte per sign).";
  m.docs = "docs/methods/quant_qjl.md";
  m.generic_fields = {"head_dim", "seed", "capacity", "sliding_window", "jl_dim"};  // m = jl_dim or d
  m.make_standalone = make_qjl_cache;
  return m;
}

MethodDescriptor polar_row() {
  MethodDescriptor m;
  m.name = "polar";
  m.family = "quantization";
  m.is_servable = false;
  m.capabilities = {.real_compression = true};
  m.blurb = "Recursive polar transform; angles quantized with per-level codebooks (standalone)";
  m.paper =
      "PolarQuant: Quantizing KV Caches with Polar Transformation (Han et al., AISTATS "
      "2026, arXiv 2502.02617)";
  m.deviations = "Angle codes bit-packed.";
  m.docs = "docs/methods/quant_polar.md";
  m.generic_fields = kStandaloneGeneric;
  m.validate = [](const KVCacheConfig& c) { require_bit_width_in(c, 1, 6); };  // angle codebooks up to 6 bits
  m.make_standalone = make_polar_cache;
  return m;
}

MethodDescriptor spectral_row() {
  MethodDescriptor m;
  m.name = "spectral";
  m.family = "quantization";
  m.is_servable = false;
  m.capabilities = {.real_compression = true};
  m.blurb =
      "PCA rotation calibrated on the first keys; signal directions kept at high precision, "
      "noise directions coarsely quantized (+ QJL of the key noise) (standalone)";
  m.paper =
      "SpectralQuant: 3% Is All You Need: Breaking TurboQuant's Compression Limit via "
      "Spectral Structure (2026)";
  m.deviations =
      "Own design from the paper's idea: second-moment PCA of the first "
      "spectral_calib_tokens keys; signal coordinates int8 per token, noise coordinates "
      "randomly rotated then b-bit Lloyd-Max with an f16 norm, plus optional QJL of the "
      "noise residual. Values int8 per token (spectral_val_d_eff not carried).";
  m.docs = "docs/methods/spectral.md";
  m.generic_fields = kStandaloneGeneric;
  m.generic_fields.push_back("jl_dim");
  m.fields = {
      option_field("spectral_key_d_eff", &KVCacheConfig::spectral, &SpectralOptions::spectral_key_d_eff,
                   "Key principal directions treated as signal", 0),
      option_field("spectral_apply_qjl", &KVCacheConfig::spectral, &SpectralOptions::spectral_apply_qjl,
                   "Add a 1-bit QJL sketch of the key noise residual (unbiased scores)"),
      option_field("spectral_model_name", &KVCacheConfig::spectral, &SpectralOptions::spectral_model_name,
                   "Label of the calibration source (echoed in reports)"),
      option_field("spectral_calib_tokens", &KVCacheConfig::spectral, &SpectralOptions::spectral_calib_tokens,
                   "First keys observed before the PCA rotation is fixed", 1),
  };
  m.validate = [](const KVCacheConfig& c) { require_bit_width_in(c, 1, 8); };
  m.make_standalone = make_spectral_cache;
  return m;
}

}  // namespace

std::vector<MethodDescriptor> build_method_table() {
  std::vector<MethodDescriptor> rows = {turboquant_rvq_method(),
                                        turboquant_block_method(),
                                        kivi_method(),
                                        kivi_sink_method(),
                                        kvquant_method(),
                                        zipcache_method(),
                                        gear_method(),
                                        kitty_method(),
                                        age_tiered_method(),
                                        svdq_method(),
                                        skvq_method(),
                                        nsnquant_method(),
                                        adakv_method(),
                                        cachegen_method(),
                                        amc_method(),
                                        turboquant_standalone_row(true),
                                        turboquant_standalone_row(false),
                                        qjl_row(),
                                        polar_row(),
                                        a2ats_method(),
                                        anchorkv_method(),
                                        vecinfer_method(),
                                        comm_vq_method(),
                                        palu_method(),
                                        kvtc_method(),
                                        spectral_row()};
  for (std::vector<MethodDescriptor> family : {eviction_method_rows(), cross_layer_method_rows()}) {
    for (MethodDescriptor& row : family) rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace veloxquant
