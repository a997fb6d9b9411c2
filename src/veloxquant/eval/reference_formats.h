#pragma once
// llama.cpp's KV cache types (`-ctk/-ctv`, common/arg.cpp kv_cache_types) as reference points
// on the bytes axis: bits per element including the block's fp16 scale (and min), from
// ../shared/research/anchors.md §2. They are memory figures only: this project does not run
// llama.cpp, so no quality is claimed for them.
#include <cstdint>
#include <string>
#include <vector>

namespace veloxquant::eval {

struct ReferenceFormat {
  std::string name;
  double bits_per_element = 0.0;
};

// f16 16, q8_0 8.5, q5_1 6.0, q5_0 5.5, q4_1 5.0, q4_0 4.5 (iq4_nl is also 4.5: left out so
// the plot keeps one line per size).
const std::vector<ReferenceFormat>& llama_cpp_kv_formats();

// Bytes per token of a cache storing `elements_per_token` values (keys and values of every
// attention layer: 2 * n_kv_heads * head_dim summed over layers) at `bits_per_element`.
double reference_bytes_per_token(double bits_per_element, int64_t elements_per_token);

}  // namespace veloxquant::eval
