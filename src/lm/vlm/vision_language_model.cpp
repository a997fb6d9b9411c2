#include "lm/vlm/vision_language_model.h"

#include <string>

#include "base/error.h"

namespace lm {

VisionLanguageModel::VisionLanguageModel(std::shared_ptr<const ClipVisionTower> vision,
                                         std::shared_ptr<const VisionProjector> projector,
                                         std::shared_ptr<Model> language_model)
    : vision_(std::move(vision)), projector_(std::move(projector)), language_model_(std::move(language_model)) {
  if (!vision_ || !projector_ || !language_model_) {
    throw base::InvalidArgument("a vision-language model needs a vision tower, a projector and a language model");
  }
  if (projector_->input_dim() != vision_->output_dim()) {
    throw base::FormatError("projector takes " + std::to_string(projector_->input_dim()) +
                            " features but the vision tower gives " + std::to_string(vision_->output_dim()));
  }
  if (projector_->output_dim() != language_model_->config().dim) {
    throw base::FormatError("projector gives " + std::to_string(projector_->output_dim()) +
                            "-wide embeddings but the language model's embeddings are " +
                            std::to_string(language_model_->config().dim) + " wide (mmproj of another model?)");
  }
}

std::vector<float> VisionLanguageModel::embed_image(const RgbImage& image) const {
  const ClipVisionConfig& c = vision_->config();
  const RgbImage fitted = c.fit == ImageFit::kResizeAndPad ? resize_to_fit_and_pad(image, c.image_size)
                                                           : resize_shortest_edge_and_center_crop(image, c.image_size);
  const std::vector<float> features = vision_->encode(normalize_to_chw(fitted, c.image_mean, c.image_std));
  return projector_->project(features, vision_->output_tokens());
}

LoadedVisionLanguageModel load_vision_language_model(const std::string& text_path, const std::string& mmproj_path,
                                                     const LoadOptions& options) {
  LoadedModel text = load(text_path, options);
  VisionModules vision = load_mmproj(mmproj_path, options.threads);
  LoadedVisionLanguageModel out;
  try {
    out.model = std::make_shared<VisionLanguageModel>(vision.tower, vision.projector, text.model);
  } catch (const base::FormatError& e) {
    throw base::FormatError("mmproj '" + mmproj_path + "' does not fit the model '" + text_path + "': " + e.what());
  }
  out.tokenizer = text.tokenizer;
  return out;
}

}  // namespace lm
