#pragma once
// Per-layer sensitivity to quantization, the input of the bit allocator (bit_allocation.h; the
// original's RateQuant, issue 17): for every attention layer, every part (keys, values) and
// every candidate bit width, the KL(native || quantized) of the model's next-token distribution
// when *that layer alone* is quantized at those bits and every other layer keeps the native
// cache. All candidates are evaluated on the same windows against one native baseline per group
// (eval_runner.h), so their differences are not sampling noise of different texts.
//
// Methods with per-layer bit-width options key_bits and value_bits (turboquant_block) are
// measured per part: keys at b bits with values at `reference_bits`, and the other way round.
// Any other method is measured on bit_width_inlier (one part per layer, keys and values).
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lm/model.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/eval/eval_runner.h"

namespace veloxquant::allocators {

// A part of a layer's cache that gets its own bits: the field that carries them per layer.
struct LayerPart {
  std::string name;   // "keys", "values" or "keys+values"
  std::string field;  // "key_bits", "value_bits" or "bit_width_inlier"
};

// The parts `config`'s method allocates separately (see above).
std::vector<LayerPart> allocation_parts(const KVCacheConfig& config);

struct SensitivityOptions {
  std::vector<int> candidate_bits;  // bit widths allocated for every part (each 1..8)
  // The widths run through the model (a subset of candidate_bits; empty = all of them). Each
  // other candidate is predicted from the nearest measured width b0 of the same layer and part
  // by the distortion model of RateQuant: KL(b) = KL(b0) * D(b) / D(b0), with D the relative
  // squared error of the method's own coding at b bits on Gaussian rows (relative_distortion),
  // the same for every layer. One width per part costs layers x parts runs instead of
  // layers x parts x widths.
  std::vector<int> measured_bits;
  int reference_bits = 8;    // the other part's bits while one part is measured
  int methods_per_run = 16;  // candidates evaluated per pass over the windows (memory)
  // Called after each group with (candidates done, candidates total).
  std::function<void(int64_t, int64_t)> on_progress;
};

struct SensitivityTable {
  std::vector<LayerPart> parts;
  std::vector<int> candidate_bits;
  std::vector<std::size_t> attention_layers;  // raw layer index of each attention layer
  // kl[attention index][part][candidate]: mean KL with that layer's part alone at those bits.
  std::vector<std::vector<std::vector<double>>> kl;
  // measured[candidate]: run through the model (else predicted by the distortion model).
  std::vector<bool> measured;
  // distortion[part][candidate]: relative squared error of the coding (relative_distortion).
  std::vector<std::vector<double>> distortion;
  int64_t n_compared = 0;  // positions each KL is averaged over
};

// Measures the table on `tokens` with `eval` (ctx, chunking, chunks). `base` is the method and
// its other options (mean_rows, blocks, ...); its bit fields are overridden per candidate.
// Throws QuantizerConfigError for a candidate the method refuses, base::InvalidArgument for
// empty candidates or a model without attention layers.
SensitivityTable measure_layer_sensitivity(const lm::Model& model, std::span<const int32_t> tokens,
                                           std::optional<int32_t> bos, const KVCacheConfig& base,
                                           const SensitivityOptions& options, const eval::EvalOptions& eval);

// Relative squared error (sum of squared errors / sum of squares) of `part` of a `config` cache
// (lists resolved for attention layer 0, head_dim given) at `bits`, the other parts at
// `reference_bits`, over 1024 rows of standard Gaussian keys and values (one head).
double relative_distortion(const KVCacheConfig& config, const std::vector<LayerPart>& parts, std::size_t part, int bits,
                           int reference_bits, int head_dim);

// The raw layer index of every attention layer for_model gives a cache (head_dim resolvable).
std::vector<std::size_t> attention_layer_indices(const lm::Model& model);

}  // namespace veloxquant::allocators
