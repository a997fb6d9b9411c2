// mmproj loading (llama.cpp's clip GGUF: vision tower + projector) on arbitrary bytes: every
// outcome is a tower or a typed error, never a crash or a sanitizer report. A tower small
// enough is run on a grey image too, so shapes the loader accepted are shapes encode() takes.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <vector>

#include "fuzz_input_file.h"
#include "lm/vlm/vision_language_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const fuzz::InputFile file(data, size);
  if (!file.ok()) return 0;
  try {
    const lm::VisionModules vision = lm::load_mmproj(file.path(), 1);
    const lm::ClipVisionConfig& c = vision.tower->config();
    if (c.image_size <= 64 && c.dim <= 256 && c.ffn_dim <= 1024 && c.n_layers <= 4) {
      lm::RgbImage grey{c.image_size, c.image_size,
                        std::vector<uint8_t>(static_cast<std::size_t>(c.image_size) * c.image_size * 3, 128)};
      const std::vector<float> features = vision.tower->encode(lm::normalize_to_chw(grey, c.image_mean, c.image_std));
      if (vision.projector->input_dim() == vision.tower->output_dim()) {
        (void)vision.projector->project(features, vision.tower->output_tokens());
      }
    }
  } catch (const std::exception&) {
  }
  return 0;
}
