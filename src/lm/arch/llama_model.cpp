#include "lm/arch/llama_model.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <thread>

#include "base/error.h"
#include "lm/arch/moe_ffn.h"
#include "lm/arch/shortconv_block.h"
#include "lm/cache/block_kv_cache.h"
#include "lm/kernels/attention.h"
#include "lm/kernels/elementwise.h"
#include "lm/kernels/matmul.h"
#include "lm/cache/kv_type_caches.h"

namespace lm {

namespace {

void expect_matrix(const WeightMatrix& w, int64_t rows, int64_t cols, const std::string& name) {
  if (w.rows != rows || w.cols != cols) {
    throw base::FormatError("tensor '" + name + "' has shape [" + std::to_string(w.cols) + ", " +
                            std::to_string(w.rows) + "] (cols, rows), expected [" + std::to_string(cols) + ", " +
                            std::to_string(rows) + "]");
  }
}

void expect_vector(const std::vector<float>& v, std::size_t n, const std::string& name, bool optional = false) {
  if (optional && v.empty()) return;
  if (v.size() != n) {
    throw base::FormatError("tensor '" + name + "' has " + std::to_string(v.size()) + " elements, expected " +
                            std::to_string(n));
  }
}

// forward()'s working buffers. They only grow, so once a shape has been seen (the first
// decode step) no later step allocates them again. Per thread rather than per model because
// forward() is const and may run concurrently on several threads with different caches.
struct ForwardScratch {
  std::vector<float> x, xb, delta, gate, up, q, k, v, merged, logits;
};

ForwardScratch& scratch() {
  thread_local ForwardScratch s;
  return s;
}

float* sized(std::vector<float>& buffer, int64_t n) {
  if (buffer.size() < static_cast<std::size_t>(n)) buffer.resize(static_cast<std::size_t>(n));
  return buffer.data();
}

}  // namespace

LlamaModel::LlamaModel(ModelConfig config, LlamaHyperParams hyper, LlamaWeights weights, LlamaRuntimeOptions options)
    : config_(std::move(config)), hyper_(std::move(hyper)), weights_(std::move(weights)), options_(options) {
  if (is_block_kv_type(options_.kv_type)) kv_row_bytes(options_.kv_type, config_.head_dim);  // 32 | head_dim
  validate();
  // Two pools of N participants on N cores made every step that ran a veloxquant cache hand the
  // cores back and forth (the idle pool's workers spin, then yield, while the other's work):
  // streaming_llm at window 508 decoded at 0.86x the native cache, 0.95x on one shared pool
  // (generate, 556-token prompt, 300 tokens, two rounds). Same pool size, same partition of the
  // matmuls, same results.
  const unsigned cores = std::thread::hardware_concurrency();
  const int want = options_.threads > 0 ? options_.threads : static_cast<int>(std::max(1U, cores));
  std::shared_ptr<base::ThreadPool> global = base::ThreadPool::global_shared();
  // (A negative count goes to the pool's constructor, which names it.)
  pool_ = options_.threads >= 0 && global->size() == want ? std::move(global)
                                                          : std::make_shared<base::ThreadPool>(options_.threads);
  layers_.resize(static_cast<std::size_t>(config_.n_layers));
  for (int l = 0; l < config_.n_layers; ++l) {
    LayerInfo& info = layers_[l];
    // Every layer attends, MoE layers included: the router and experts are stateless, so
    // they need no cache and for_model treats these layers like any attention layer.
    info.is_attention = true;
    info.head_dim = config_.head_dim;
    info.n_heads = config_.n_heads;
    info.n_kv_heads = config_.n_kv_heads;
    if (static_cast<std::size_t>(l) < hyper_.sliding_window.size()) info.sliding_window = hyper_.sliding_window[l];
    info.kind = info.sliding_window ? "sliding_attention" : "attention";
    const ShortConvWeights& conv = weights_.layers[l].shortconv;
    if (conv.present()) set_shortconv_layer_info(info, conv, config_.dim);  // lfm2: no attention here
  }
}

void LlamaModel::validate() const {
  const ModelConfig& c = config_;
  if (c.n_layers <= 0 || c.dim <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 || c.hidden_dim <= 0 ||
      c.vocab_size <= 0) {
    throw base::FormatError("model config has a non-positive size (layers " + std::to_string(c.n_layers) + ", dim " +
                            std::to_string(c.dim) + ", heads " + std::to_string(c.n_heads) + "/" +
                            std::to_string(c.n_kv_heads) + ", head_dim " + std::to_string(c.head_dim) + ", hidden " +
                            std::to_string(c.hidden_dim) + ", vocab " + std::to_string(c.vocab_size) + ")");
  }
  if (c.n_heads % c.n_kv_heads != 0) {
    throw base::FormatError("attention head count " + std::to_string(c.n_heads) +
                            " is not a multiple of kv head count " + std::to_string(c.n_kv_heads));
  }
  if (c.head_dim % 2 != 0)
    throw base::FormatError("head_dim " + std::to_string(c.head_dim) + " is odd; RoPE needs pairs");
  if (static_cast<int>(weights_.layers.size()) != c.n_layers) {
    throw base::FormatError("model has " + std::to_string(weights_.layers.size()) + " layers of weights, config says " +
                            std::to_string(c.n_layers));
  }
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
  expect_matrix(weights_.token_embedding, c.vocab_size, c.dim, "token_embd.weight");
  expect_matrix(weights_.output, c.vocab_size, c.dim, "output.weight");
  expect_vector(weights_.output_norm, c.dim, "output_norm.weight");
  if (!hyper_.rope_theta.empty() && static_cast<int>(hyper_.rope_theta.size()) != c.n_layers) {
    throw base::FormatError("model has " + std::to_string(hyper_.rope_theta.size()) + " per-layer RoPE bases for " +
                            std::to_string(c.n_layers) + " layers");
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LlamaLayerWeights& w = weights_.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    expect_vector(w.attn_norm, c.dim, p + "attn_norm.weight");
    if (w.shortconv.present()) {
      validate_shortconv(w.shortconv, c.dim, p);
    } else {
      expect_matrix(w.wq, q_dim, c.dim, p + "attn_q.weight");
      expect_matrix(w.wk, kv_dim, c.dim, p + "attn_k.weight");
      expect_matrix(w.wv, kv_dim, c.dim, p + "attn_v.weight");
      expect_matrix(w.wo, c.dim, q_dim, p + "attn_output.weight");
    }
    expect_vector(w.bq, q_dim, p + "attn_q.bias", true);
    expect_vector(w.bk, kv_dim, p + "attn_k.bias", true);
    expect_vector(w.bv, kv_dim, p + "attn_v.bias", true);
    expect_vector(w.q_norm, c.head_dim, p + "attn_q_norm.weight", true);
    expect_vector(w.k_norm, c.head_dim, p + "attn_k_norm.weight", true);
    expect_vector(w.attn_post_norm, c.dim, p + "post_attention_norm.weight", true);
    expect_vector(w.ffn_norm, c.dim, p + "ffn_norm.weight");
    expect_vector(w.ffn_post_norm, c.dim, p + "post_ffw_norm.weight", true);
    if (w.moe) {
      validate_moe_layer(*w.moe, c.dim, p);
      continue;
    }
    expect_matrix(w.w_gate, c.hidden_dim, c.dim, p + "ffn_gate.weight");
    expect_matrix(w.w_up, c.hidden_dim, c.dim, p + "ffn_up.weight");
    expect_matrix(w.w_down, c.dim, c.hidden_dim, p + "ffn_down.weight");
  }
}

CacheList LlamaModel::native_make_cache() const { return make_kv_type_caches(*this, options_.kv_type, pool_.get()); }

void LlamaModel::attention_block(int layer, int64_t n, const float* xb, float* attn_out, KVCache& cache) const {
  const LlamaLayerWeights& w = weights_.layers[layer];
  const int64_t hq = config_.n_heads, hkv = config_.n_kv_heads, d = config_.head_dim;
  base::ThreadPool* pool = pool_.get();

  // 1. Position of the first new token, 2. the mask — both before the cache changes.
  const int64_t pos0 = cache.offset();
  const std::optional<int64_t> window = layers_[layer].sliding_window;
  const AttentionMask mask = cache.make_mask(n, window);

  ForwardScratch& buf = scratch();
  float* q = sized(buf.q, n * hq * d);
  float* k = sized(buf.k, n * hkv * d);
  float* v = sized(buf.v, n * hkv * d);
  const kernels::MatmulJob qkv[] = {{&w.wq, q}, {&w.wk, k}, {&w.wv, v}};
  kernels::matmul_many(qkv, xb, n, pool, activations());
  const auto add_bias = [n](float* x, const std::vector<float>& bias) {
    if (bias.empty()) return;
    const std::size_t width = bias.size();
    for (int64_t t = 0; t < n; ++t) {
      for (std::size_t i = 0; i < width; ++i) x[t * width + i] += bias[i];
    }
  };
  add_bias(q, w.bq);
  add_bias(k, w.bk);
  add_bias(v, w.bv);
  const auto head_norm = [&](float* x, int64_t heads, const std::vector<float>& weight) {
    if (weight.empty()) return;
    for (int64_t off = 0; off < n * heads * d; off += d)
      kernels::rmsnorm(x + off, weight.data(), x + off, d, config_.norm_eps);
  };
  head_norm(q, hq, w.q_norm);
  head_norm(k, hkv, w.k_norm);
  const float theta = hyper_.rope_theta.empty() ? config_.rope_theta : hyper_.rope_theta[layer];
  kernels::rope(q, n, static_cast<int>(hq), static_cast<int>(d), pos0, theta, hyper_.rope_style, hyper_.rope_dim);
  kernels::rope(k, n, static_cast<int>(hkv), static_cast<int>(d), pos0, theta, hyper_.rope_style, hyper_.rope_dim);

  // [N, H, D] token-major -> [1, H, N, D] head-major, as the cache contract wants.
  Tensor queries({1, hq, n, d}, DType::F32);
  float* qt = queries.data<float>();
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < hq; ++h) {
      std::copy_n(q + (t * hq + h) * d, d, qt + (h * n + t) * d);
    }
  }
  // A block cache quantizes from f32, as llama.cpp quantizes its cache from the f32 K and V;
  // every other cache gets the model's float KV dtype.
  const DType kv_dtype = dynamic_cast<const BlockKVCache*>(&cache) ? DType::F32 : this->kv_dtype();
  Tensor keys({1, hkv, n, d}, kv_dtype), values({1, hkv, n, d}, kv_dtype);
  const std::size_t es = dtype_size(kv_dtype);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < hkv; ++h) {
      const std::size_t dst = static_cast<std::size_t>((h * n + t) * d) * es;
      convert_elements(reinterpret_cast<const std::byte*>(k + (t * hkv + h) * d), DType::F32, keys.raw_data() + dst,
                       kv_dtype, static_cast<std::size_t>(d));
      convert_elements(reinterpret_cast<const std::byte*>(v + (t * hkv + h) * d), DType::F32, values.raw_data() + dst,
                       kv_dtype, static_cast<std::size_t>(d));
    }
  }

  // 3. Queries to an observing cache, then fused attention or store + attend.
  if (cache.wants_queries()) cache.observe_queries(queries);
  const float scale = hyper_.attention_scale > 0.0f ? hyper_.attention_scale : 1.0f / std::sqrt(static_cast<float>(d));
  Tensor out({1, hq, n, d}, DType::F32);
  // A cache's fused attention knows no soft-capping, so soft-capped layers (Gemma 2) always
  // take the contract's other path: store + fetch, then the host's kernel, which caps.
  const float softcap = hyper_.attn_logit_softcap;
  if (cache.supports_fused_attention() && softcap == 0.0f) {
    FusedAttentionRequest request;
    request.queries = &queries;
    request.keys = &keys;
    request.values = &values;
    request.scale = scale;
    request.window = window;
    request.pool = pool;
    cache.fused_attention(request, out);
  } else {
    const KeysValues kv = cache.update_and_fetch(keys, values);
    kernels::attention(queries, kv.keys, kv.values, mask, window, scale, out, pool, softcap);
  }
  // [1, H_q, N, D] -> [N, H_q * D] for the output projection.
  const Tensor out_c = out.contiguous();
  const float* o = out_c.data<float>();
  float* merged = sized(buf.merged, n * hq * d);
  for (int64_t h = 0; h < hq; ++h) {
    for (int64_t t = 0; t < n; ++t) std::copy_n(o + (h * n + t) * d, d, merged + (t * hq + h) * d);
  }
  kernels::matmul(w.wo, merged, n, attn_out, pool, activations());
}

void LlamaModel::check_caches(const CacheList& caches, int64_t n) const {
  if (n <= 0) throw base::InvalidArgument("forward: no tokens given");
  if (static_cast<int>(caches.size()) != config_.n_layers) {
    throw base::InvalidArgument("forward: got " + std::to_string(caches.size()) + " caches for a model of " +
                                std::to_string(config_.n_layers) + " layers");
  }
  for (std::size_t l = 0; l < caches.size(); ++l) {
    if (!caches[l]) throw base::InvalidArgument("forward: cache of layer " + std::to_string(l) + " is null");
  }
  const int64_t start = caches[0]->offset();
  if (config_.context_length > 0 && start + n > config_.context_length) {
    throw base::InvalidArgument("forward: positions " + std::to_string(start) + ".." + std::to_string(start + n - 1) +
                                " exceed the context length " + std::to_string(config_.context_length));
  }
}

void LlamaModel::embed_tokens(const std::vector<int32_t>& tokens, float* out) const {
  const int64_t dim = config_.dim;
  for (int32_t token : tokens) {
    if (token < 0 || token >= config_.vocab_size) {
      throw base::InvalidArgument("forward: token id " + std::to_string(token) + " is outside the vocabulary [0, " +
                                  std::to_string(config_.vocab_size) + ")");
    }
  }
  for (std::size_t t = 0; t < tokens.size(); ++t) weights_.token_embedding.dequantize_row_to(tokens[t], out + t * dim);
  if (hyper_.embedding_scale != 1.0f) {
    for (std::size_t i = 0; i < tokens.size() * static_cast<std::size_t>(dim); ++i) out[i] *= hyper_.embedding_scale;
  }
}

void LlamaModel::forward(const std::vector<int32_t>& tokens, CacheList& caches, std::vector<float>& last_logits,
                         std::vector<float>* all_logits) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  check_caches(caches, n);
  float* x = sized(scratch().x, n * config_.dim);
  embed_tokens(tokens, x);
  run_layers(x, n, caches, last_logits, all_logits);
}

void LlamaModel::forward_embeddings(const float* embeddings, int64_t n, CacheList& caches,
                                    std::vector<float>& last_logits, std::vector<float>* all_logits) const {
  check_caches(caches, n);
  if (!embeddings) throw base::InvalidArgument("forward_embeddings: no embeddings given");
  float* x = sized(scratch().x, n * config_.dim);
  std::copy_n(embeddings, n * config_.dim, x);
  run_layers(x, n, caches, last_logits, all_logits);
}

void LlamaModel::run_layers(float* x, int64_t n, CacheList& caches, std::vector<float>& last_logits,
                            std::vector<float>* all_logits) const {
  const int64_t dim = config_.dim, hidden = config_.hidden_dim;
  base::ThreadPool* pool = pool_.get();
  ForwardScratch& buf = scratch();
  float* xb = sized(buf.xb, n * dim);
  float* delta = sized(buf.delta, n * dim);
  float* gate = sized(buf.gate, n * hidden);
  float* up = sized(buf.up, n * hidden);
  // Gemma's sandwich norms: each sub-block's output is normalised again before the residual add.
  const auto post_norm = [&](const std::vector<float>& weight) {
    if (weight.empty()) return;
    for (int64_t t = 0; t < n; ++t)
      kernels::rmsnorm(delta + t * dim, weight.data(), delta + t * dim, dim, config_.norm_eps);
  };

  for (int l = 0; l < config_.n_layers; ++l) {
    const LlamaLayerWeights& w = weights_.layers[l];
    for (int64_t t = 0; t < n; ++t) {
      kernels::rmsnorm(x + t * dim, w.attn_norm.data(), xb + t * dim, dim, config_.norm_eps);
    }
    if (w.shortconv.present()) {
      shortconv_block(w.shortconv, n, dim, xb, delta, shortconv_state(*caches[l], l), pool, activations());
    } else {
      attention_block(l, n, xb, delta, *caches[l]);
    }
    post_norm(w.attn_post_norm);
    for (int64_t i = 0; i < n * dim; ++i) x[i] += delta[i];

    for (int64_t t = 0; t < n; ++t) {
      kernels::rmsnorm(x + t * dim, w.ffn_norm.data(), xb + t * dim, dim, config_.norm_eps);
    }
    if (w.moe) {
      moe_ffn(*w.moe, xb, n, delta, pool, activations());
    } else {
      const kernels::MatmulJob gate_up[] = {{&w.w_gate, gate}, {&w.w_up, up}};
      kernels::matmul_many(gate_up, xb, n, pool, activations());
      if (hyper_.ffn_activation == FfnActivation::kGeluTanh) {
        kernels::geglu(gate, up, n * hidden);
      } else {
        kernels::swiglu(gate, up, n * hidden);
      }
      kernels::matmul(w.w_down, gate, n, delta, pool, activations());
    }
    post_norm(w.ffn_post_norm);
    for (int64_t i = 0; i < n * dim; ++i) x[i] += delta[i];
  }

  const int64_t vocab = config_.vocab_size;
  // Only the rows whose logits are wanted go through the final norm and the (large) head.
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t rows = n - first;
  for (int64_t t = first; t < n; ++t) {
    kernels::rmsnorm(x + t * dim, weights_.output_norm.data(), xb + t * dim, dim, config_.norm_eps);
  }
  float* logits = sized(buf.logits, rows * vocab);
  kernels::matmul(weights_.output, xb + first * dim, rows, logits, pool, activations());
  if (const float cap = hyper_.final_logit_softcap; cap > 0.0f) {
    for (int64_t i = 0; i < rows * vocab; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
  }
  last_logits.assign(logits + (rows - 1) * vocab, logits + rows * vocab);
  if (all_logits) all_logits->assign(logits, logits + rows * vocab);
}

}  // namespace lm
