#pragma once
// palu (Palu: KV-Cache Compression with Low-Rank Projection, Chang et al., ICLR 2025, arXiv
// 2407.21118; spec §6 #15): keys and values kept only as low-rank latents of a group-head
// projection, the latents quantized at mixed widths, attention computed in the latent space.
//
// Here (caches/latent_cache.h does the storage and attention): per (batch, head group) a PCA of
// the group's concatenated K (and V) rows of the prompt; rank palu_rank, else the fewest
// components holding palu_energy_threshold of the variance. Each token's latent row is quantized
// per token: its leading ceil(palu_hi_fraction x r) components at palu_hi_bit, the rest at
// palu_lo_bit, each part in groups of palu_group_size components with an fp16 (scale, min)
// (core/group_quant.h). palu_quantize_values = false keeps the value latents in fp16.
//
// Row bytes of a part of n components at b bits: sum over its groups of 4 + ceil(n_g b / 8).
// palu_n_head_groups: the layer's H kv heads are split into the largest divisor of H that is <=
// palu_n_head_groups groups (SmolLM2: 3 heads, 4 asked -> 3 groups of one head, Palu's per-head
// "M-LRD"; 1 -> one joint latent for the whole layer, "J-LRD").
#include <memory>
#include <optional>

#include "veloxquant/caches/latent_codec.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "PALU").
struct PaluOptions {
  std::optional<int> palu_rank;  // None: the energy threshold decides
  double palu_energy_threshold = 0.90;
  int palu_n_head_groups = 4;
  int palu_hi_bit = 4;
  int palu_lo_bit = 2;
  double palu_hi_fraction = 0.25;
  int palu_group_size = 32;
  bool palu_quantize_values = true;
};

// The per-token latent row format of one side (exposed for the tests).
std::unique_ptr<LatentCodec> make_palu_codec(const PaluOptions& options, bool values);
// Bytes of one latent row of rank r under the options (values: palu_quantize_values applies).
int64_t palu_row_bytes(const PaluOptions& options, int64_t rank, bool values);

void validate_palu_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_palu_cache(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_palu_cache(const PaluOptions& options);
MethodDescriptor palu_method();

}  // namespace veloxquant
