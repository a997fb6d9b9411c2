#include "lm/vlm/clip_vision_tower.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "lm/kernels/elementwise.h"
#include "lm/kernels/matmul.h"

namespace lm {

namespace {

void expect_matrix(const WeightMatrix& w, int64_t rows, int64_t cols, const std::string& name) {
  if (w.rows != rows || w.cols != cols) {
    throw base::FormatError("tensor '" + name + "' has " + std::to_string(w.rows) + " rows x " +
                            std::to_string(w.cols) + " cols, expected " + std::to_string(rows) + " x " +
                            std::to_string(cols));
  }
}

void expect_vector(const std::vector<float>& v, std::size_t n, const std::string& name, bool optional) {
  if (optional && v.empty()) return;
  if (v.size() != n) {
    throw base::FormatError("tensor '" + name + "' has " + std::to_string(v.size()) + " elements, expected " +
                            std::to_string(n));
  }
}

void add_bias(float* x, int64_t n, const std::vector<float>& bias) {
  if (bias.empty()) return;
  const std::size_t width = bias.size();
  for (int64_t t = 0; t < n; ++t) {
    for (std::size_t i = 0; i < width; ++i) x[t * width + i] += bias[i];
  }
}

}  // namespace

void layer_norm(const float* x, const std::vector<float>& w, const std::vector<float>& b, float* out, int64_t n,
                float eps) {
  double mean = 0.0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= static_cast<double>(n);
  const double inv = 1.0 / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>((x[i] - mean) * inv) * w[i];
    out[i] = b.empty() ? v : v + b[i];
  }
}

float vision_activation(VisionActivation act, float x) {
  switch (act) {
    case VisionActivation::kGeluErf:
      return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case VisionActivation::kGeluTanh:
      return kernels::gelu_tanh(x);
    case VisionActivation::kQuickGelu:
      return x / (1.0f + std::exp(-1.702f * x));
  }
  return x;
}

ClipVisionTower::ClipVisionTower(ClipVisionConfig config, ClipVisionWeights weights,
                                 std::shared_ptr<base::ThreadPool> pool)
    : config_(std::move(config)), weights_(std::move(weights)), pool_(std::move(pool)) {
  if (!pool_) throw base::InvalidArgument("vision tower needs a thread pool");
  const ClipVisionConfig& c = config_;
  if (c.image_size <= 0 || c.patch_size <= 0 || c.dim <= 0 || c.ffn_dim <= 0 || c.n_heads <= 0 || c.n_layers < 0) {
    throw base::FormatError("vision tower has a non-positive size (image " + std::to_string(c.image_size) + ", patch " +
                            std::to_string(c.patch_size) + ", dim " + std::to_string(c.dim) + ", ffn " +
                            std::to_string(c.ffn_dim) + ", heads " + std::to_string(c.n_heads) + ")");
  }
  if (c.image_size % c.patch_size != 0) {
    throw base::FormatError("image size " + std::to_string(c.image_size) + " is not a multiple of the patch size " +
                            std::to_string(c.patch_size));
  }
  if (c.dim % c.n_heads != 0) {
    throw base::FormatError("vision width " + std::to_string(c.dim) + " is not a multiple of the head count " +
                            std::to_string(c.n_heads));
  }
  for (int k : c.feature_layers) {
    if (k < 0 || k > c.n_layers) {
      throw base::FormatError("feature layer " + std::to_string(k) + " is outside [0, " + std::to_string(c.n_layers) +
                              "] (the file stores " + std::to_string(c.n_layers) + " blocks)");
    }
  }
  if (static_cast<int>(weights_.layers.size()) != c.n_layers) {
    throw base::FormatError("vision tower has " + std::to_string(weights_.layers.size()) + " blocks of weights, " +
                            "config says " + std::to_string(c.n_layers));
  }
  const std::size_t d = static_cast<std::size_t>(c.dim);
  const int64_t n_pos = c.n_patches() + (weights_.class_embedding.empty() ? 0 : 1);
  expect_matrix(weights_.patch, c.dim, int64_t{3} * c.patch_size * c.patch_size, "v.patch_embd.weight");
  expect_vector(weights_.patch_bias, d, "v.patch_embd.bias", true);
  expect_vector(weights_.class_embedding, d, "v.class_embd", true);
  expect_matrix(weights_.position, n_pos, c.dim, "v.position_embd.weight");
  expect_vector(weights_.pre_ln_w, d, "v.pre_ln.weight", true);
  expect_vector(weights_.pre_ln_b, d, "v.pre_ln.bias", true);
  expect_vector(weights_.post_ln_w, d, "v.post_ln.weight", true);
  expect_vector(weights_.post_ln_b, d, "v.post_ln.bias", true);
  for (int l = 0; l < c.n_layers; ++l) {
    const ClipLayerWeights& w = weights_.layers[l];
    const std::string p = "v.blk." + std::to_string(l) + ".";
    expect_vector(w.ln1_w, d, p + "ln1.weight", false);
    expect_vector(w.ln1_b, d, p + "ln1.bias", true);
    expect_vector(w.ln2_w, d, p + "ln2.weight", false);
    expect_vector(w.ln2_b, d, p + "ln2.bias", true);
    expect_matrix(w.wq, c.dim, c.dim, p + "attn_q.weight");
    expect_matrix(w.wk, c.dim, c.dim, p + "attn_k.weight");
    expect_matrix(w.wv, c.dim, c.dim, p + "attn_v.weight");
    expect_matrix(w.wo, c.dim, c.dim, p + "attn_out.weight");
    expect_matrix(w.fc1, c.ffn_dim, c.dim, p + "ffn_up.weight");
    expect_matrix(w.fc2, c.dim, c.ffn_dim, p + "ffn_down.weight");
    using Named = std::pair<const std::vector<float>*, const char*>;
    for (const auto& [v, name] : {Named{&w.bq, "attn_q"}, Named{&w.bk, "attn_k"}, Named{&w.bv, "attn_v"},
                                  Named{&w.bo, "attn_out"}, Named{&w.b2, "ffn_down"}}) {
      expect_vector(*v, d, p + name + ".bias", true);
    }
    expect_vector(w.b1, static_cast<std::size_t>(c.ffn_dim), p + "ffn_up.bias", true);
  }
}

int ClipVisionTower::output_dim() const {
  return config_.dim * static_cast<int>(std::max<std::size_t>(1, config_.feature_layers.size()));
}

int ClipVisionTower::blocks_to_run() const {
  if (config_.feature_layers.empty()) return std::max(0, config_.n_layers - config_.skip_last_blocks);
  return *std::max_element(config_.feature_layers.begin(), config_.feature_layers.end());
}

void ClipVisionTower::block(const ClipLayerWeights& w, std::vector<float>& x, int64_t n) const {
  const int64_t d = config_.dim, heads = config_.n_heads, hd = d / heads, ffn = config_.ffn_dim;
  base::ThreadPool* pool = pool_.get();
  std::vector<float> xn(static_cast<std::size_t>(n * d)), q(xn.size()), k(xn.size()), v(xn.size()), att(xn.size());
  for (int64_t t = 0; t < n; ++t) layer_norm(&x[t * d], w.ln1_w, w.ln1_b, &xn[t * d], d, config_.norm_eps);
  const kernels::MatmulJob qkv[] = {{&w.wq, q.data()}, {&w.wk, k.data()}, {&w.wv, v.data()}};
  kernels::matmul_many(qkv, xn.data(), n, pool);
  add_bias(q.data(), n, w.bq);
  add_bias(k.data(), n, w.bk);
  add_bias(v.data(), n, w.bv);
  // Every patch attends to every patch (no mask). Per head, both products go through the
  // threaded SIMD matmul with the head's keys (and transposed values) as an f32 "weight": at
  // SigLIP's 1024 patches these are the tower's largest costs.
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> qh(static_cast<std::size_t>(n * hd)), kh(qh.size()), vt(qh.size()), oh(qh.size());
  std::vector<float> scores(static_cast<std::size_t>(n * n));
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(&q[t * d + h * hd], hd, &qh[t * hd]);
      std::copy_n(&k[t * d + h * hd], hd, &kh[t * hd]);
      for (int64_t e = 0; e < hd; ++e) vt[e * n + t] = v[t * d + h * hd + e];
    }
    const WeightMatrix keys = WeightMatrix::view(GgmlType::F32, n, hd, kh.data(), nullptr, "vision keys");
    kernels::matmul(keys, qh.data(), n, scores.data(), pool);  // scores[i][j] = q_i . k_j
    pool->parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        float* row = &scores[i * n];
        for (int64_t j = 0; j < n; ++j) row[j] *= scale;
        kernels::softmax(row, n);
      }
    });
    const WeightMatrix values_t = WeightMatrix::view(GgmlType::F32, hd, n, vt.data(), nullptr, "vision values");
    kernels::matmul(values_t, scores.data(), n, oh.data(), pool);  // out[i][e] = sum_j p_ij v_j[e]
    for (int64_t t = 0; t < n; ++t) std::copy_n(&oh[t * hd], hd, &att[t * d + h * hd]);
  }
  kernels::matmul(w.wo, att.data(), n, xn.data(), pool);
  add_bias(xn.data(), n, w.bo);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += xn[i];

  for (int64_t t = 0; t < n; ++t) layer_norm(&x[t * d], w.ln2_w, w.ln2_b, &xn[t * d], d, config_.norm_eps);
  std::vector<float> hidden(static_cast<std::size_t>(n * ffn));
  kernels::matmul(w.fc1, xn.data(), n, hidden.data(), pool);
  add_bias(hidden.data(), n, w.b1);
  for (float& h : hidden) h = vision_activation(config_.activation, h);
  kernels::matmul(w.fc2, hidden.data(), n, xn.data(), pool);
  add_bias(xn.data(), n, w.b2);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] += xn[i];
}

std::vector<float> ClipVisionTower::encode(const std::vector<float>& pixels) const {
  const ClipVisionConfig& c = config_;
  const int64_t s = c.image_size, p = c.patch_size, side = c.patches_per_side(), d = c.dim;
  if (pixels.size() != static_cast<std::size_t>(3 * s * s)) {
    throw base::InvalidArgument("vision tower expects 3 x " + std::to_string(s) + " x " + std::to_string(s) +
                                " pixel values, got " + std::to_string(pixels.size()));
  }
  // The patch convolution as a product: one row of 3 * p * p pixels per patch, in the weight's
  // (channel, y, x) order.
  const int64_t n_patches = side * side, patch_len = 3 * p * p;
  std::vector<float> patches(static_cast<std::size_t>(n_patches * patch_len));
  for (int64_t py = 0; py < side; ++py) {
    for (int64_t px = 0; px < side; ++px) {
      float* row = &patches[(py * side + px) * patch_len];
      for (int64_t ch = 0; ch < 3; ++ch) {
        for (int64_t y = 0; y < p; ++y) {
          std::copy_n(&pixels[(ch * s + py * p + y) * s + px * p], p, row + (ch * p + y) * p);
        }
      }
    }
  }
  const bool has_class = !weights_.class_embedding.empty();
  const int64_t first = has_class ? 1 : 0, n = n_patches + first;
  std::vector<float> x(static_cast<std::size_t>(n * d));
  kernels::matmul(weights_.patch, patches.data(), n_patches, &x[first * d], pool_.get());
  add_bias(&x[first * d], n_patches, weights_.patch_bias);
  if (has_class) std::copy(weights_.class_embedding.begin(), weights_.class_embedding.end(), x.begin());
  std::vector<float> pos(static_cast<std::size_t>(d));
  for (int64_t t = 0; t < n; ++t) {
    weights_.position.dequantize_row_to(t, pos.data());
    for (int64_t i = 0; i < d; ++i) x[t * d + i] += pos[i];
  }
  if (!weights_.pre_ln_w.empty()) {
    for (int64_t t = 0; t < n; ++t)
      layer_norm(&x[t * d], weights_.pre_ln_w, weights_.pre_ln_b, &x[t * d], d, c.norm_eps);
  }

  // Hidden state k = after k blocks; the requested ones are kept (without the class token)
  // and concatenated along the features, as llama.cpp stacks them.
  const int run = blocks_to_run();
  const std::size_t width = static_cast<std::size_t>(output_dim());
  std::vector<float> out(static_cast<std::size_t>(n_patches) * width);
  std::size_t column = 0;
  const auto keep = [&](const std::vector<float>& state) {
    for (int64_t t = 0; t < n_patches; ++t) {
      std::copy_n(&state[(t + first) * d], d, &out[t * width + column]);
    }
    column += static_cast<std::size_t>(d);
  };
  const auto wanted = [&](int k) {
    return std::find(c.feature_layers.begin(), c.feature_layers.end(), k) != c.feature_layers.end();
  };
  for (int l = 0; l <= run; ++l) {
    if (l == run) {
      // After the last block run: the post-norm when the file has one (llama.cpp's order).
      if (!weights_.post_ln_w.empty()) {
        for (int64_t t = 0; t < n; ++t)
          layer_norm(&x[t * d], weights_.post_ln_w, weights_.post_ln_b, &x[t * d], d, c.norm_eps);
      }
      if (c.feature_layers.empty() || wanted(l)) keep(x);
      break;
    }
    if (wanted(l)) keep(x);
    block(weights_.layers[l], x, n);
  }
  return out;
}

}  // namespace lm
