#pragma once
// LFM2's gated short-convolution block, the operator of its non-attention layers (transformers'
// Lfm2ShortConv, llama.cpp's build_shortconv_block):
//   [B | C | x] = in_proj(h);   u = B * x;   v = causal depthwise conv_L(u);   out = out_proj(C * v)
// with the conv's L-1 past inputs u held by the layer's lm::ConvStateCache.
#include <cstdint>
#include <string>

#include "lm/arch/llama_weights.h"
#include "lm/cache/conv_state_cache.h"
#include "lm/kernels/matmul.h"

namespace base {
class ThreadPool;
}

namespace lm {

// Checks the block's tensors against the model width (base::FormatError naming the tensor,
// `prefix` = "blk.N.").
void validate_shortconv(const ShortConvWeights& w, int64_t dim, const std::string& prefix);

// Describes a conv layer to cache factories: not attention (for_model keeps its native cache),
// kind "shortconv", and a make_state_cache that gives a fresh ConvStateCache(dim, L).
void set_shortconv_layer_info(LayerInfo& info, const ShortConvWeights& w, int64_t dim);

// h: [n][dim] (the operator-normed residual stream), out: [n][dim]. `state` must have been
// made for this layer (channels == dim, kernel_size == w.kernel_size): base::InvalidArgument
// names the mismatch otherwise.
void shortconv_block(const ShortConvWeights& w, int64_t n, int64_t dim, const float* h, float* out,
                     ConvStateCache& state, base::ThreadPool* pool, kernels::Activations activations);

// The layer's cache, as LlamaModel::forward hands it over: a ConvStateCache, or
// base::InvalidArgument naming the layer and the cache type it got instead (a list built for
// another model, or a method's cache where the architecture's own state belongs).
ConvStateCache& shortconv_state(KVCache& cache, int layer);

}  // namespace lm
