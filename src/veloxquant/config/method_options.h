#pragma once
// One typed options struct per method (spec §3.3: `KIVIOptions`, ... — field names and
// defaults are the original's flat field names, kept verbatim so that `--set kivi_group_size=64`,
// the JSON echo and the Python docs all use one vocabulary). The defaults written here are the
// only place a default is declared: the registry reads them from a default-constructed config.
//
// Only the methods this build implements have a struct; a new method adds its struct here, a
// row in registry/method_table.cpp and a cache file.
#include <optional>
#include <string>

#include "veloxquant/config/bit_width.h"

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

// turboquant_block (new in this port, docs/methods/turboquant_block.md): Hadamard-rotated keys
// and values, blocks of 32 coordinates with one f16 scale and b-bit Gaussian Lloyd-Max codes.
// key_bits / value_bits split a byte budget between keys and values; 0 = bit_width_inlier.
// Either may be a list with one entry per attention layer (as bit_width_inlier's list form,
// resolved by for_model): `veloxquant allocate-bits` writes such lists from measured sensitivity.
// mean_rows > 0 subtracts per-channel means calibrated on the first call's rows 1..mean_rows;
// key_block / value_block set the coordinates per f16 scale; sink_rows keeps the first
// positions in f16; key_mean_segment > 0 codes keys around the mean of the previous segment of
// that many rows (post-RoPE keys drift from the calibrated mean); levels = "uniform" puts codes
// below 7 bits on evenly spaced levels (attention then reads them without a level lookup)
// instead of the Lloyd-Max ones.
struct TurboQuantBlockOptions {
  BitWidth key_bits = 0;
  BitWidth value_bits = 0;
  int mean_rows = 0;
  int key_block = 32;
  int value_block = 32;
  int sink_rows = 0;
  int key_mean_segment = 0;
  std::string levels = "lloyd";
  // Query-aware key split: "" (off) or groups "channels:bits,..." (e.g. "32:4,16:3,16:2"), each
  // group of channels (sorted per head by E[q^2] E[(k - mu)^2] on the first call) rotated and
  // coded on its own; replaces key_bits / key_block and needs scale_format = "log8".
  std::string key_split;
  // Block scales of keys and values: "f16" or "log8" (one byte 2^(n/16); only with key_split).
  std::string scale_format = "f16";
  // key_split's channel assignment: "product" (sorted by E[q^2] E[(k - mu)^2]) or "objective"
  // (the split's expected score error minimised by channel swaps).
  std::string key_split_rank = "product";
  // With mean_rows: 1 = values smoothed too (one f16 row per head), 0 = keys only.
  int value_mean = 1;
  // Sink rows: 1 = keys and values kept, 0 = keys only (the sink's values read from their codes);
  // kept in "f16" or "q8" (rotated 8-bit codes, an f16 scale per 32).
  int sink_values = 1;
  std::string sink_format = "f16";
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

// --- eviction methods (spec §2.3, §3.2). Budgets count stored rows per (batch, kv head),
// sinks included. -------------------------------------------------------------------------------

// streaming_llm: the first stream_n_sink positions + a FIFO of the last stream_window_size.
struct StreamingLLMOptions {
  int stream_n_sink = 4;
  int stream_window_size = 512;
};

// h2o: accumulated attention scores with decay; the newest h2o_grace rows and the sinks are
// never evicted. h2o_rope_base is accepted for compatibility: survivors are never re-rotated
// (spec §2.3, issue #609 of the original), so nothing reads it.
struct H2OOptions {
  int h2o_budget = 512;
  int h2o_n_sink = 4;
  double h2o_rope_base = 10000.0;
  int h2o_grace = 16;
  double h2o_decay = 0.98;
};

// tova: evict the row with the lowest current-step attention weight.
struct TOVAOptions {
  int tova_budget = 512;
  int tova_n_sink = 4;
  std::string tova_backend = "auto";
};

// snapkv: at each prefill chunk the last snap_obs_window queries vote for prefix rows.
struct SnapKVOptions {
  std::string snap_dtype = "auto";
  bool snap_batched_scoring = true;
  std::string snap_backend = "auto";
  int snap_budget = 512;
  int snap_obs_window = 32;
  int snap_n_sink = 4;
};

// pyramidkv: H2O scoring with a per-layer budget tapering linearly from shallow to deep layers
// (mean = pyramid_budget); pyramid_resolved_budget is injected per layer by for_model.
// `pyramid_grace` (new): the newest rows never evicted, limited per layer to budget - n_sink - 1.
// The original has none, and without it the accumulated scores evict nearly every new token
// (docs/methods/pyramidkv.md: SmolLM2 KL 1.32 at budget 128); 0 restores the original.
struct PyramidKVOptions {
  int pyramid_budget = 512;
  std::string pyramid_backend = "reference";
  int pyramid_n_sink = 4;
  double pyramid_beta = 2.0;
  std::optional<int> pyramid_resolved_budget;
  int pyramid_grace = 16;
};

// New in this port: how an eviction cache stores the rows it keeps. "dtype" keeps the host's
// KV dtype (the original); "turboquant_rvq" stores keys as TurboQuant-RVQ codes at
// bit_width_inlier bits (values as rvq_value_bits says); "kivi" stores keys and values
// group-affine quantized per row at bit_width_inlier bits (group kivi_group_size).
// `eviction_scoring` (new): "auto" scores with the layer's real queries when the host offers
// them (lm::KVCache::observe_queries), else with the key-as-query proxy; "proxy" always uses the
// proxy, as the original (which never sees queries).
struct EvictionStorageOptions {
  std::string eviction_storage = "dtype";
  std::string eviction_scoring = "auto";
};

// --- cross-layer methods (spec §4.3) ------------------------------------------------------------

// xquant: contiguous groups of xquant_group_size attention layers; the first (anchor) stores
// group-quantized codes, the others reuse them with their own scale/zero + a residual.
struct XQuantOptions {
  int xquant_group_size = 2;
  int xquant_base_bits = 2;
  int xquant_residual_bits = 4;
  int xquant_group_quant_size = 32;
  int xquant_max_ctx = 8192;
};

// minicache: from layer int(n_attn * minicache_start_frac) on, groups of minicache_group_size
// adjacent layers share SLERP-merged directions; dissimilar tokens keep their own vectors.
struct MiniCacheOptions {
  double minicache_start_frac = 0.5;
  int minicache_group_size = 2;
  double minicache_retention_threshold = 0.9;
  double minicache_slerp_t = 0.5;
  int minicache_max_ctx = 8192;
};

}  // namespace veloxquant
