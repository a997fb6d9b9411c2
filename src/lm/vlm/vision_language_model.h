#pragma once
// lm::VisionLanguageModel — a vision-language model as llama.cpp users hold one: a text model
// (an ordinary lm::Model, the one the text path runs; its GGUF) plus a vision tower and a
// projector (the `mmproj` GGUF). Images become rows of the language model's input embeddings
// at the image placeholders; everything after that — the decoder, its caches, sampling — is
// the language model's own.
//
// As mlx-vlm's wrappers, the wrapper has no decoder layers of its own: layers() is empty and
// language_model() is the model whose caches matter (KVCacheBuilder::for_model and
// patch_vlm_kv_cache find them there). Its Model methods delegate to the language model.
#include <memory>
#include <string>
#include <vector>

#include "lm/load.h"
#include "lm/model.h"
#include "lm/vlm/clip_vision_tower.h"
#include "lm/vlm/image.h"
#include "lm/vlm/vision_projector.h"

namespace lm {

class VisionLanguageModel : public Model {
 public:
  // Throws base::FormatError when the projector's output width is not the language model's
  // embedding width, or the tower's feature width not the projector's input.
  VisionLanguageModel(std::shared_ptr<const ClipVisionTower> vision, std::shared_ptr<const VisionProjector> projector,
                      std::shared_ptr<Model> language_model);

  const ModelConfig& config() const override { return language_model_->config(); }
  const std::vector<LayerInfo>& layers() const override { return no_layers_; }
  CacheList native_make_cache() const override { return language_model_->native_make_cache(); }
  void forward(const std::vector<int32_t>& tokens, CacheList& caches, std::vector<float>& last_logits,
               std::vector<float>* all_logits = nullptr) const override {
    language_model_->forward(tokens, caches, last_logits, all_logits);
  }
  void embed_tokens(const std::vector<int32_t>& tokens, float* out) const override {
    language_model_->embed_tokens(tokens, out);
  }
  void forward_embeddings(const float* embeddings, int64_t n, CacheList& caches, std::vector<float>& last_logits,
                          std::vector<float>* all_logits = nullptr) const override {
    language_model_->forward_embeddings(embeddings, n, caches, last_logits, all_logits);
  }
  const Model* language_model() const override { return language_model_.get(); }
  Model* language_model() override { return language_model_.get(); }

  const ClipVisionTower& vision_tower() const { return *vision_; }
  const VisionProjector& projector() const { return *projector_; }
  // Embedding rows one image becomes.
  int64_t tokens_per_image() const { return projector_->output_tokens(vision_->output_tokens()); }

  // The image as rows of the language model's input embeddings, [tokens_per_image, dim]: the
  // family's preprocessing (shortest edge to the tower's size, centre crop, normalise with the
  // mmproj's mean/std), the tower, the projector.
  std::vector<float> embed_image(const RgbImage& image) const;

 private:
  std::shared_ptr<const ClipVisionTower> vision_;
  std::shared_ptr<const VisionProjector> projector_;
  std::shared_ptr<Model> language_model_;
  std::vector<LayerInfo> no_layers_;
};

// The vision half of an mmproj GGUF (llama.cpp's clip.* metadata and v.* / mm.* tensors).
struct VisionModules {
  std::shared_ptr<const ClipVisionTower> tower;
  std::shared_ptr<const VisionProjector> projector;
};

// Throws base::FormatError (missing/corrupt file, missing tensor, bad shape) or
// base::Unsupported (a projector type or an audio-only mmproj this host does not run), each
// naming the file.
VisionModules load_mmproj(const std::string& path, int threads = 0);

struct LoadedVisionLanguageModel {
  std::shared_ptr<VisionLanguageModel> model;
  std::shared_ptr<Tokenizer> tokenizer;
};

// The text GGUF through lm::load (its options apply to the language model), the mmproj
// through load_mmproj; errors name the file they come from.
LoadedVisionLanguageModel load_vision_language_model(const std::string& text_path, const std::string& mmproj_path,
                                                     const LoadOptions& options = {});

}  // namespace lm
