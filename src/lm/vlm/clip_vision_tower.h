#pragma once
// lm::ClipVisionTower — the CLIP / SigLIP-style ViT that turns a normalised image into patch
// features: a patch convolution (stride = patch size), a class token when the tower has one,
// learned position embeddings, an optional pre-LayerNorm, pre-norm transformer blocks
// (LayerNorm -> bidirectional multi-head attention -> residual, LayerNorm -> fc1 -> GELU ->
// fc2 -> residual), then the hidden state of the configured feature layer(s), class token
// dropped. Weights are views into the memory-mapped mmproj GGUF, as the text model's are.
#include <memory>
#include <vector>

#include "base/thread_pool.h"
#include "lm/weights/weight_matrix.h"

namespace lm {

enum class VisionActivation { kGeluErf, kGeluTanh, kQuickGelu };

// How an image of any size is brought to the tower's square input.
enum class ImageFit {
  kShortestEdgeCenterCrop,  // CLIP / LLaVA (transformers' CLIPImageProcessor)
  kResizeAndPad,            // SigLIP / Idefics3 as llama.cpp runs them (no tiling)
};

struct ClipVisionConfig {
  int image_size = 0;
  int patch_size = 0;
  int dim = 0;
  int ffn_dim = 0;
  int n_heads = 0;
  int n_layers = 0;  // blocks stored in the file
  float norm_eps = 1e-5f;
  VisionActivation activation = VisionActivation::kQuickGelu;
  // Hidden states whose concatenation is the output: k = after k blocks (0 = the embeddings
  // after the pre-norm). Empty = after every stored block (then the post-norm, when present).
  std::vector<int> feature_layers;
  // With no feature layers: the last blocks not run. LLaVA files without clip.vision.feature_layer
  // stop one block early (the second-to-last hidden state), as llama.cpp runs them.
  int skip_last_blocks = 0;
  ImageFit fit = ImageFit::kShortestEdgeCenterCrop;
  float image_mean[3] = {0.5f, 0.5f, 0.5f};
  float image_std[3] = {0.5f, 0.5f, 0.5f};

  int patches_per_side() const { return patch_size > 0 ? image_size / patch_size : 0; }
  int n_patches() const { return patches_per_side() * patches_per_side(); }
};

struct ClipLayerWeights {
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;
  WeightMatrix wq, wk, wv, wo, fc1, fc2;      // fc1 [ffn_dim, dim], fc2 [dim, ffn_dim]
  std::vector<float> bq, bk, bv, bo, b1, b2;  // empty = no bias
};

struct ClipVisionWeights {
  WeightMatrix patch;                  // [dim rows, 3 * patch * patch cols], (channel, y, x) order
  std::vector<float> patch_bias;       // empty for CLIP
  std::vector<float> class_embedding;  // empty = no class token (SigLIP)
  WeightMatrix position;               // [n_positions rows, dim]
  std::vector<float> pre_ln_w, pre_ln_b, post_ln_w, post_ln_b;
  std::vector<ClipLayerWeights> layers;
};

class ClipVisionTower {
 public:
  // Validates every shape (base::FormatError naming the tensor, in llama.cpp's names).
  // `pool` runs the products (shared with the projector: one image is encoded at a time).
  ClipVisionTower(ClipVisionConfig config, ClipVisionWeights weights, std::shared_ptr<base::ThreadPool> pool);

  const ClipVisionConfig& config() const { return config_; }
  // Feature rows per image and their width.
  int output_tokens() const { return config_.n_patches(); }
  int output_dim() const;

  // pixels: [3, image_size, image_size] (normalize_to_chw); returns [output_tokens, output_dim].
  std::vector<float> encode(const std::vector<float>& pixels) const;

 private:
  void block(const ClipLayerWeights& w, std::vector<float>& x, int64_t n) const;
  int blocks_to_run() const;

  ClipVisionConfig config_;
  ClipVisionWeights weights_;
  std::shared_ptr<base::ThreadPool> pool_;
};

// Row-wise LayerNorm: out = (x - mean) / sqrt(var + eps) * w + b over n elements (b may be
// empty; out may alias x).
void layer_norm(const float* x, const std::vector<float>& w, const std::vector<float>& b, float* out, int64_t n,
                float eps);
float vision_activation(VisionActivation act, float x);

}  // namespace lm
