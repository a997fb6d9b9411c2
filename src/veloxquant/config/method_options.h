#pragma once
// One typed options struct per method (spec §3.3: `KIVIOptions`, ... — field names and
// defaults are the original's flat field names, kept verbatim so that `--set kivi_group_size=64`,
// the JSON echo and the Python docs all use one vocabulary). The defaults written here are the
// only place a default is declared: the registry reads them from a default-constructed config.
//
// Only the methods this build implements have a struct; a new method adds its struct here, a
// row in registry/method_table.cpp and a cache file.
#include <string>

namespace veloxquant {

// turboquant_rvq (spec §2.2). `rvq_value_bits` is new in this port: the original always keeps
// values in the input dtype (0 here); 2..8 stores them group-affine quantized (group 32,
// per token, KIVI's value layout) so that values shrink too.
// `rvq_stage2_scale` (new): "matched" sizes the stage-2 Laplacian codebook to the stage-1
// residual's variance; "original" keeps the original's narrower formula (lloyd_max.h says why
// it is too narrow, docs/methods/turboquant_rvq.md has the measurements).
struct TurboQuantRvqOptions {
  int rvq_value_bits = 0;
  std::string rvq_stage2_scale = "matched";
};

// kivi (spec §3.2 "KIVI", §11.9). `residual_length` is shared with VecInfer in the original;
// here it belongs to KIVI, the only method of this build that reads it.
struct KIVIOptions {
  int kivi_group_size = 32;
  int residual_length = 128;
};

// spectral (spec §3.2 "SpectralQuant"): the number of principal directions of the keys treated
// as "signal" (kept at high precision); the remaining "noise" directions are coarsely quantized.
// `spectral_apply_qjl` adds a 1-bit QJL sketch of the noise residual of the keys so inner
// products stay unbiased. `spectral_calib_tokens` (new) is how many first keys calibrate the PCA
// rotation. The original's `spectral_val_d_eff` (values) is not carried: values use the int8
// per-token rule every standalone cache shares (spec §2.4), see docs/methods/spectral.md.
struct SpectralOptions {
  int spectral_key_d_eff = 4;
  bool spectral_apply_qjl = true;
  std::string spectral_model_name = "model";
  int spectral_calib_tokens = 64;
};

}  // namespace veloxquant
