#pragma once
// kvtc (KVTC, "KV Cache Transform Coding for Compact Storage in LLM Inference", NVIDIA, ICLR 2026,
// arXiv 2511.01815; spec §6 #36): transform coding of the KV cache — a PCA decorrelates each
// token's K (and V) row, a dynamic program gives every principal component its width from
// kvtc_bit_choices (0 drops it) so that the widths sum to at most kvtc_bit_budget bits per token,
// minimising the modelled distortion sum_i v_i beta^(-b_i) (v_i the component's variance,
// beta = kvtc_beta), each component is quantized uniformly, and the codes are entropy coded.
//
// Here (caches/latent_cache.h does the storage and attention): one PCA per batch over the
// layer's kv heads concatenated (one head group: 3 x 64 = 192 dimensions on SmolLM2), fitted on
// the cache's first 64+ rows (the prompt); the DP is allocators/bit_allocation.h's exact
// multiple-choice knapsack; component i is quantized on [lo_i, lo_i + (2^b_i - 1) step_i], the
// range of the fitting rows' latents (later latents clipped to it). A token's row is its codes
// packed densely, component after component: ceil(sum b_i / 8) bytes, K and V each.
//
// Entropy coding: resident rows stay fixed width, so attention decodes a row without reading the
// rows before it (decode cost like palu's). The order-0 rANS coder (core/rans_coder.h, in place
// of the paper's Huffman/DEFLATE) is run on the stored codes by kvtc_entropy_coded_bytes(): one
// stream per (batch, component) with its own frequency table — the size the codes take when
// written out coded, reported beside nbytes(), not what is resident.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "veloxquant/caches/latent_codec.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace lm {
class KVCache;
}

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "KVTC"); the choices are written "0,1,2,3,4,6,8".
struct KvtcOptions {
  int kvtc_bit_budget = 512;  // bits per token, K and V each (per layer: all kv heads)
  std::string kvtc_bit_choices = "0,1,2,3,4,6,8";
  double kvtc_beta = 3.5;
  // Decode steps score keys from their codes in 16-bit integers (VNNI) instead of the exact f32
  // latents: faster, but not the same numbers (one 2048-token chunk: KL 1.044 -> 1.101), so off
  // unless asked for.
  bool kvtc_integer_keys = false;
};

// "0,1,2,3,4,6,8" -> widths in [0, 8], distinct, ascending; QuantizerConfigError naming
// kvtc_bit_choices otherwise.
std::vector<int> parse_kvtc_bit_choices(const std::string& text);

// The DP's widths for a descending variance spectrum (exposed for the tests).
std::vector<int> kvtc_allocate_bits(const std::vector<double>& variance, const std::vector<int>& choices, int budget,
                                    double beta);

std::unique_ptr<LatentCodec> make_kvtc_codec(const KvtcOptions& options);

// Bytes the stored K and V codes of a kvtc cache take rANS-coded (streams + 2-byte frequency
// entries of the symbols that occur); 0 before the fit. Throws base::InvalidArgument for a
// cache of another method.
std::size_t kvtc_entropy_coded_bytes(const lm::KVCache& cache);

void validate_kvtc_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_kvtc_cache(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_kvtc_cache(const KvtcOptions& options);
MethodDescriptor kvtc_method();

}  // namespace veloxquant
