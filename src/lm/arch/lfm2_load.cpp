#include "lm/arch/lfm2_load.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "lm/weights/float_tensor.h"

namespace lm {

namespace {

constexpr const char* kPrefix = "lfm2.";

struct Lfm2Reader {
  const gguf::GgufFile& file;

  base::FormatError fail(const std::string& what) const {
    return base::FormatError("GGUF file '" + file.path() + "': " + what);
  }

  int32_t positive_int(const std::string& key) const {
    const int64_t v = file.require_int(key);
    if (v <= 0 || v > (int64_t{1} << 30))
      throw fail("metadata '" + key + "' = " + std::to_string(v) + " is out of range");
    return static_cast<int32_t>(v);
  }

  // 1-D (or small 2-D) float tensors, in f32, row-major as stored.
  std::vector<float> floats(const std::string& name) const { return read_float_tensor(file, name); }

  // Per-layer KV head counts: llama.cpp writes an array with 0 on conv layers; a scalar (or no
  // key: n_heads) means the same count on every layer, i.e. no conv layers, as llama.cpp reads it.
  std::vector<int64_t> kv_heads_per_layer(int n_layers, int n_heads) const {
    const std::string key = std::string(kPrefix) + "attention.head_count_kv";
    const gguf::Value* v = file.find(key);
    if (!v) return std::vector<int64_t>(static_cast<std::size_t>(n_layers), n_heads);
    if (!v->is_array()) return std::vector<int64_t>(static_cast<std::size_t>(n_layers), v->as_int(key));
    if (!gguf::is_integer_type(v->array_type) || static_cast<int>(v->integers.size()) != n_layers) {
      throw fail("metadata '" + key + "' must hold " + std::to_string(n_layers) + " integers, one per layer");
    }
    return v->integers;
  }

  // A short convolution's taps, checked to be [kernel_size, channels]. Stored channel-major
  // (each channel's L taps contiguous); the kernel wants tap-major.
  std::vector<float> conv_taps(const std::string& name, int64_t kernel_size, int64_t channels) const {
    const gguf::TensorInfo& conv = file.tensor(name);
    if (conv.ne.size() != 2 || conv.ne[0] != kernel_size || conv.ne[1] != channels) {
      std::string ne;
      for (int64_t e : conv.ne) ne += (ne.empty() ? "" : ", ") + std::to_string(e);
      throw fail("tensor '" + name + "' has ne [" + ne + "], expected [" + std::to_string(kernel_size) + ", " +
                 std::to_string(channels) + "] (kernel size, channels)");
    }
    const std::vector<float> stored = floats(name);
    std::vector<float> taps(stored.size());
    for (int64_t ch = 0; ch < channels; ++ch) {
      for (int64_t j = 0; j < kernel_size; ++j) taps[j * channels + ch] = stored[ch * kernel_size + j];
    }
    return taps;
  }
};

}  // namespace

std::shared_ptr<LlamaModel> load_lfm2_model(const gguf::GgufFile& file, const LoadOptions& options) {
  const Lfm2Reader r{file};
  const std::string p = kPrefix;
  if (auto scaling = file.get_string(p + "rope.scaling.type"); scaling && *scaling != "none") {
    throw base::Unsupported("GGUF file '" + file.path() + "': RoPE scaling '" + *scaling + "' is not supported");
  }
  if (file.find_tensor("blk.0.ffn_gate_inp.weight") || file.find(p + "expert_count")) {
    throw base::Unsupported("GGUF file '" + file.path() + "': mixture-of-experts lfm2 models are not supported");
  }

  ModelConfig c;
  c.architecture = "lfm2";
  c.name = file.get_string("general.name").value_or(std::filesystem::path(file.path()).stem().string());
  c.n_layers = r.positive_int(p + "block_count");
  c.dim = r.positive_int(p + "embedding_length");
  c.hidden_dim = r.positive_int(p + "feed_forward_length");
  c.n_heads = r.positive_int(p + "attention.head_count");
  c.head_dim = file.find(p + "attention.key_length") ? r.positive_int(p + "attention.key_length") : c.dim / c.n_heads;
  if (auto vlen = file.get_int(p + "attention.value_length"); vlen && *vlen != c.head_dim) {
    throw base::Unsupported("GGUF file '" + file.path() + "': value head size " + std::to_string(*vlen) +
                            " differs from key head size " + std::to_string(c.head_dim));
  }
  c.context_length = file.get_int(p + "context_length").value_or(0);
  c.rope_theta = static_cast<float>(file.get_float(p + "rope.freq_base").value_or(1000000.0));
  c.norm_eps = static_cast<float>(file.get_float(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  if (options.context_length) {  // downwards only, as for every GGUF model (lm/load.cpp)
    if (c.context_length > 0 && *options.context_length > c.context_length) {
      throw base::InvalidArgument("ctx " + std::to_string(*options.context_length) +
                                  " exceeds the model's context length " + std::to_string(c.context_length));
    }
    c.context_length = *options.context_length;
  }

  LlamaHyperParams hyper;
  hyper.rope_style = kernels::RopeStyle::kNeox;
  hyper.rope_dim = file.find(p + "rope.dimension_count") ? r.positive_int(p + "rope.dimension_count") : 0;
  if (hyper.rope_dim > c.head_dim || hyper.rope_dim % 2 != 0) {
    throw r.fail(p + "rope.dimension_count " + std::to_string(hyper.rope_dim) +
                 " must be even and at most the head size " + std::to_string(c.head_dim));
  }
  const int64_t window = file.get_int(p + "attention.sliding_window").value_or(0);

  // Which layers convolve: the shortconv tensors, checked against head_count_kv == 0.
  const std::vector<int64_t> kv_heads = r.kv_heads_per_layer(c.n_layers, c.n_heads);
  const int64_t kernel_size = file.get_int(p + "shortconv.l_cache").value_or(0);
  c.n_kv_heads = 0;
  std::vector<bool> is_conv(static_cast<std::size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    is_conv[l] = file.find_tensor(b + "shortconv.in_proj.weight") != nullptr;
    if (is_conv[l] != (kv_heads[l] == 0)) {
      throw r.fail("layer " + std::to_string(l) +
                   (is_conv[l] ? " has shortconv tensors but " : " has no shortconv tensors but ") + p +
                   "attention.head_count_kv says " + std::to_string(kv_heads[l]));
    }
    if (file.find_tensor(b + "shortconv.in_proj.bias") || file.find_tensor(b + "shortconv.conv.bias")) {
      throw base::Unsupported("GGUF file '" + file.path() + "': layer " + std::to_string(l) +
                              " has short-convolution biases (conv_bias), which lfm2 files do not carry");
    }
    if (is_conv[l]) continue;
    if (c.n_kv_heads != 0 && kv_heads[l] != c.n_kv_heads) {
      throw base::Unsupported("GGUF file '" + file.path() + "': attention layers with different KV head counts (" +
                              std::to_string(c.n_kv_heads) + " and " + std::to_string(kv_heads[l]) + ")");
    }
    if (kv_heads[l] <= 0 || kv_heads[l] > c.n_heads) {
      throw r.fail("layer " + std::to_string(l) + " has " + std::to_string(kv_heads[l]) + " KV heads for " +
                   std::to_string(c.n_heads) + " query heads");
    }
    c.n_kv_heads = static_cast<int>(kv_heads[l]);
  }
  if (c.n_kv_heads == 0) c.n_kv_heads = c.n_heads;  // all conv: the attention sizes are unused
  const bool any_conv = std::find(is_conv.begin(), is_conv.end(), true) != is_conv.end();
  if (any_conv && (kernel_size < 2 || kernel_size > 1024)) {
    throw r.fail(p + "shortconv.l_cache = " + std::to_string(kernel_size) + " (missing or outside [2, 1024])");
  }
  if (window > 0) {
    hyper.sliding_window.assign(static_cast<std::size_t>(c.n_layers), std::nullopt);
    for (int l = 0; l < c.n_layers; ++l) {
      if (!is_conv[l]) hyper.sliding_window[l] = window;
    }
  }

  LlamaWeights w;
  w.token_embedding = file.weight("token_embd.weight");
  c.vocab_size = static_cast<int>(w.token_embedding.rows);
  if (auto v = file.get_int(p + "vocab_size"); v && *v != c.vocab_size) {
    throw r.fail(p + "vocab_size " + std::to_string(*v) + " disagrees with token_embd.weight rows " +
                 std::to_string(c.vocab_size));
  }
  w.output_norm = r.floats("token_embd_norm.weight");  // llama.cpp's name for the final norm
  w.output = file.find_tensor("output.weight") ? file.weight("output.weight") : w.token_embedding;
  w.layers.resize(static_cast<std::size_t>(c.n_layers));
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    LlamaLayerWeights& lw = w.layers[l];
    lw.attn_norm = r.floats(b + "attn_norm.weight");
    lw.ffn_norm = r.floats(b + "ffn_norm.weight");
    lw.w_gate = file.weight(b + "ffn_gate.weight");
    lw.w_up = file.weight(b + "ffn_up.weight");
    lw.w_down = file.weight(b + "ffn_down.weight");
    if (!is_conv[l]) {
      lw.wq = file.weight(b + "attn_q.weight");
      lw.wk = file.weight(b + "attn_k.weight");
      lw.wv = file.weight(b + "attn_v.weight");
      lw.wo = file.weight(b + "attn_output.weight");
      lw.q_norm = r.floats(b + "attn_q_norm.weight");
      lw.k_norm = r.floats(b + "attn_k_norm.weight");
      continue;
    }
    ShortConvWeights& sc = lw.shortconv;
    sc.kernel_size = kernel_size;
    sc.in_proj = file.weight(b + "shortconv.in_proj.weight");
    sc.out_proj = file.weight(b + "shortconv.out_proj.weight");
    sc.taps = r.conv_taps(b + "shortconv.conv.weight", kernel_size, c.dim);
  }

  try {
    return std::make_shared<LlamaModel>(c, hyper, std::move(w),
                                        LlamaRuntimeOptions{options.kv_type, options.threads, options.i16_activations});
  } catch (const base::FormatError& e) {
    throw base::FormatError("GGUF file '" + file.path() + "': " + e.what());
  }
}

}  // namespace lm
