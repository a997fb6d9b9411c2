#pragma once
// kvquant (KVQuant, Hooper et al., NeurIPS 2024, arXiv 2401.18079; spec §6 #14, "KVQuant-NUQ" in
// the original): KIVI's layout (keys per channel over token groups, values per token over channel
// groups, caches/kivi_cache.h) with KVQuant's three additions:
//   * non-uniform levels: 2^kvquant_bits levels per head (keys and values apart) fitted by
//     kvquant_lloyd_iters Lloyd steps on the first flushed block's normalized values, then frozen
//     (caches/fitted_levels.h);
//   * dense-and-sparse: kvquant_outlier_fraction of the elements of every key group block kept
//     out of the quantizer, their exact corrections stored sparsely (caches/sparse_outliers.h);
//   * attention sink: the first kvquant_n_sink positions kept exactly (caches/sink_rows.h).
// No full-precision window beyond the partial group (residual_length 0): a token is quantized
// as soon as its key group of kvquant_group_size tokens is complete.
#include <memory>

#include "lm/cache/cache.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "KVQuant-NUQ").
struct KVQuantOptions {
  int kvquant_bits = 3;
  double kvquant_outlier_fraction = 0.01;
  int kvquant_group_size = 32;
  int kvquant_lloyd_iters = 8;
  int kvquant_refit_interval = 0;  // 0 = levels frozen at the first flush (prefill)
  int kvquant_n_sink = 1;
};

// QuantizerConfigError naming the field and value; base::Unsupported for kvquant_refit_interval > 0.
void validate_kvquant_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_kvquant_cache(const KVCacheConfig& config);
// The registration (registry/method_table.cpp lists it).
MethodDescriptor kvquant_method();

}  // namespace veloxquant
