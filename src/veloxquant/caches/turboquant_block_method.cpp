// The registry row of "turboquant_block" (registry/method_table.cpp lists it): its own file, so a
// narrowed library (cmake/tsan_pooled_caches.cmake) lists the row without the full table.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "veloxquant/caches/turboquant_block_cache.h"
#include "veloxquant/caches/turboquant_block_split_keys.h"
#include "veloxquant/config/config_validation.h"
#include "veloxquant/errors.h"
#include "veloxquant/quant/block_lloyd_quant.h"

namespace veloxquant {

MethodDescriptor turboquant_block_method() {
  MethodDescriptor m;
  m.name = "turboquant_block";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = true, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Randomized Hadamard rotation of keys and values, then blocks of 32 coordinates with "
      "one f16 scale (MSE-searched) and b-bit Gaussian Lloyd-Max codes: b + 0.5 bits per "
      "element, llama.cpp's q8_0/q5_0/q4_0 sizes at b = 8/5/4";
  m.paper =
      "TurboQuant (Zandieh et al., arXiv 2504.19874) rotation + Lloyd-Max levels; QuaRot "
      "(Ashkboos et al., arXiv 2404.00456) Hadamard + per-block scales";
  m.deviations =
      "Own combination: TurboQuant keeps one norm per vector and no block scale; here "
      "each block of 32 rotated coordinates has an f16 scale chosen by MSE search. "
      "Keys and values have separate bit widths (key_bits, value_bits).";
  m.docs = "docs/methods/turboquant_block.md";
  m.generic_fields = {"head_dim", "bit_width_inlier", "seed"};
  m.fields = {
      option_field("key_bits", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::key_bits,
                   "Key code bits per rotated coordinate (1..8); 0 = bit_width_inlier; a comma list gives "
                   "one entry per attention layer",
                   0, 8),
      option_field("value_bits", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::value_bits,
                   "Value code bits per rotated coordinate (1..8); 0 = bit_width_inlier; a comma list gives "
                   "one entry per attention layer",
                   0, 8),
      option_field("mean_rows", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::mean_rows,
                   "Subtract per-channel key/value means calibrated on the first call's rows "
                   "1..N before rotating (0 = off); exact for attention, adds 2 f16 rows per head",
                   0, 1 << 20),
      option_field("key_block", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::key_block,
                   "Rotated key coordinates per f16 scale: 32, 64, 128 or 256", 32, 256),
      option_field("value_block", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::value_block,
                   "Rotated value coordinates per f16 scale: 32, 64, 128 or 256", 32, 256),
      option_field("sink_rows", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::sink_rows,
                   "First positions kept exactly in f16 (attention sinks); costs 2 f16 rows each", 0, 1 << 16),
      option_field("key_mean_segment", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::key_mean_segment,
                   "Rows per key-mean segment (0 = one mean): each segment's keys are coded around the "
                   "mean of the previous segment's decoded keys; needs mean_rows; one f16 row per segment",
                   0, 1 << 20),
      option_field("levels", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::levels,
                   "Code levels below 7 bits: 'lloyd' (Lloyd-Max, default) or 'uniform' (evenly "
                   "spaced: more error, attention reads the codes without a level lookup)"),
      option_field("key_split", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::key_split,
                   "Query-aware key split: groups 'channels:bits,...' (e.g. 32:4,16:3,16:2), channels sorted per "
                   "head by E[q^2] E[(k-mu)^2] on the first call, each group rotated and coded at its own width "
                   "with one scale; replaces key_bits/key_block; needs scale_format=log8 ('' = off)"),
      option_field("scale_format", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::scale_format,
                   "Block scales of keys and values: 'f16' (default) or 'log8' (one byte, 2^(n/16); needs "
                   "key_split)"),
      option_field("key_split_rank", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::key_split_rank,
                   "How key_split assigns channels to groups: 'product' (sorted by E[q^2] E[(k-mu)^2], default) or "
                   "'objective' (the split's expected score error minimised by channel swaps)"),
      option_field("value_mean", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::value_mean,
                   "With mean_rows: 1 = smooth values too (one f16 row per head), 0 = keys only", 0, 1),
      option_field("sink_values", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::sink_values,
                   "With sink_rows: 1 = keep the sinks' keys and values, 0 = keys only (values from their codes)", 0,
                   1),
      option_field("sink_format", &KVCacheConfig::turboquant_block, &TurboQuantBlockOptions::sink_format,
                   "Sink rows kept in 'f16' (default) or 'q8' (rotated 8-bit codes, one f16 scale per 32: "
                   "D + D/16 bytes per row instead of 2D)")};
  // --bits matters only while one of the two follows it (on some layer, for per-layer lists).
  m.reads_bit_width = [](const KVCacheConfig& c) {
    const auto follows = [](const BitWidth& bits) {
      if (!bits.is_list()) return bits.scalar() == 0;
      return std::find(bits.list().begin(), bits.list().end(), 0) != bits.list().end();
    };
    return follows(c.turboquant_block.key_bits) || follows(c.turboquant_block.value_bits);
  };
  m.validate = [](const KVCacheConfig& c) {
    // Called on one layer's config: lists are resolved to ints by then (validate_for_create).
    if (c.turboquant_block.key_bits.scalar() == 0 || c.turboquant_block.value_bits.scalar() == 0) {
      require_bit_width_in(c, 1, 8);
    }
    for (const auto& [name, block] : {std::pair{"key_block", c.turboquant_block.key_block},
                                      std::pair{"value_block", c.turboquant_block.value_block}}) {
      if (block != 32 && block != 64 && block != 128 && block != 256) {
        throw QuantizerConfigError(std::string(name) + " for 'turboquant_block' must be 32, 64, 128 or 256, got " +
                                   std::to_string(block));
      }
    }
    quant::parse_block_levels(c.turboquant_block.levels);
    // key_split / scale_format (the channels' sum against head_dim is checked when the cache is made).
    const TurboQuantBlockOptions& o = c.turboquant_block;
    if (o.scale_format != "f16" && o.scale_format != "log8") {
      throw QuantizerConfigError("scale_format for 'turboquant_block' must be 'f16' or 'log8', got '" + o.scale_format +
                                 "'");
    }
    if (!o.key_split.empty()) parse_key_split(o.key_split);
    if (o.key_split_rank != "product" && o.key_split_rank != "objective") {
      throw QuantizerConfigError("key_split_rank for 'turboquant_block' must be 'product' or 'objective', got '" +
                                 o.key_split_rank + "'");
    }
    if (o.sink_format != "f16" && o.sink_format != "q8") {
      throw QuantizerConfigError("sink_format for 'turboquant_block' must be 'f16' or 'q8', got '" + o.sink_format +
                                 "'");
    }
    if (o.key_split.empty() != (o.scale_format != "log8")) {
      throw QuantizerConfigError(
          "key_split and scale_format=log8 of 'turboquant_block' go together (the split path reads one-byte "
          "scales), got key_split='" +
          o.key_split + "', scale_format=" + o.scale_format);
    }
  };
  m.make_serving = make_turboquant_block_cache;
  m.cache_type_name = "TurboQuantBlockCache";
  m.make_restorable = [] { return std::make_shared<TurboQuantBlockCache>(32, 4, 4, 0); };
  return m;
}

}  // namespace veloxquant
