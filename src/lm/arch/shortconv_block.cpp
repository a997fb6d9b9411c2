#include "lm/arch/shortconv_block.h"

#include <string>
#include <vector>

#include "base/error.h"

namespace lm {

namespace {

// Working buffers that only grow (as LlamaModel's), per thread because forward() is const and
// may run on several threads at once.
struct ShortConvScratch {
  std::vector<float> bcx, u, v;
};

float* sized(std::vector<float>& buffer, int64_t n) {
  if (buffer.size() < static_cast<std::size_t>(n)) buffer.resize(static_cast<std::size_t>(n));
  return buffer.data();
}

}  // namespace

void validate_shortconv(const ShortConvWeights& w, int64_t dim, const std::string& prefix) {
  const auto fail = [&](const std::string& tensor, const std::string& got, const std::string& expected) {
    return base::FormatError("tensor '" + prefix + tensor + "' has shape " + got + ", expected " + expected);
  };
  const auto shape = [](int64_t cols, int64_t rows) {
    return "[" + std::to_string(cols) + ", " + std::to_string(rows) + "]";
  };
  if (w.kernel_size < 2) {
    throw base::FormatError("'" + prefix + "shortconv.conv.weight': kernel size " + std::to_string(w.kernel_size) +
                            " must be at least 2");
  }
  if (w.in_proj.rows != 3 * dim || w.in_proj.cols != dim) {
    throw fail("shortconv.in_proj.weight", shape(w.in_proj.cols, w.in_proj.rows), shape(dim, 3 * dim));
  }
  if (w.out_proj.rows != dim || w.out_proj.cols != dim) {
    throw fail("shortconv.out_proj.weight", shape(w.out_proj.cols, w.out_proj.rows), shape(dim, dim));
  }
  if (static_cast<int64_t>(w.taps.size()) != w.kernel_size * dim) {
    throw fail("shortconv.conv.weight", std::to_string(w.taps.size()) + " elements",
               shape(w.kernel_size, dim) + " (" + std::to_string(w.kernel_size * dim) + " elements)");
  }
}

void set_shortconv_layer_info(LayerInfo& info, const ShortConvWeights& w, int64_t dim) {
  info.is_attention = false;
  info.head_dim = 0;
  info.n_heads = 0;
  info.n_kv_heads = 0;
  info.sliding_window.reset();
  info.kind = "shortconv";
  const int64_t kernel_size = w.kernel_size;
  info.make_state_cache = [dim, kernel_size] { return std::make_shared<ConvStateCache>(dim, kernel_size); };
}

ConvStateCache& shortconv_state(KVCache& cache, int layer) {
  if (auto* state = dynamic_cast<ConvStateCache*>(&cache)) return *state;
  throw base::InvalidArgument("layer " + std::to_string(layer) + " is a short-convolution layer and needs its " +
                              "ConvStateCache, got a " + cache.type_name());
}

void shortconv_block(const ShortConvWeights& w, int64_t n, int64_t dim, const float* h, float* out,
                     ConvStateCache& state, base::ThreadPool* pool, kernels::Activations activations) {
  if (state.channels() != dim || state.kernel_size() != w.kernel_size) {
    throw base::InvalidArgument("short-convolution state of " + std::to_string(state.channels()) +
                                " channels, kernel " + std::to_string(state.kernel_size()) +
                                " does not fit a layer of " + std::to_string(dim) + " channels, kernel " +
                                std::to_string(w.kernel_size));
  }
  thread_local ShortConvScratch s;
  float* bcx = sized(s.bcx, n * 3 * dim);
  float* u = sized(s.u, n * dim);
  float* v = sized(s.v, n * dim);
  kernels::matmul(w.in_proj, h, n, bcx, pool, activations);
  for (int64_t t = 0; t < n; ++t) {
    const float* b = bcx + t * 3 * dim;
    const float* x = b + 2 * dim;
    for (int64_t c = 0; c < dim; ++c) u[t * dim + c] = b[c] * x[c];
  }
  state.convolve(u, n, w.taps.data(), v);
  for (int64_t t = 0; t < n; ++t) {
    const float* gate_c = bcx + t * 3 * dim + dim;
    for (int64_t c = 0; c < dim; ++c) v[t * dim + c] *= gate_c[c];
  }
  kernels::matmul(w.out_proj, v, n, out, pool, activations);
}

}  // namespace lm
