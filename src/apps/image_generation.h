#pragma once
// `veloxquant generate --mmproj P --image F ...`: generation from images with a
// vision-language model (a text GGUF + an mmproj GGUF). generate_command.cpp parses and
// validates the shared flags and hands over here.
#include <optional>
#include <string>
#include <vector>

#include "lm/generate.h"
#include "lm/load.h"
#include "veloxquant/config/kv_cache_config.h"

namespace apps {

struct ImageGenerationRequest {
  std::string model;                // the text GGUF
  std::string mmproj;               // the vision tower + projector GGUF
  std::vector<std::string> images;  // PNG / JPEG files, one per marker (or all first)
  std::string prompt;
  bool chat = false;
  lm::GenerateOptions options;
  lm::LoadOptions load_options;
  std::optional<veloxquant::KVCacheConfig> kv_config;  // --method / --preset, on the language model
  std::string method_label;                            // for the stats line
};

// Streams the answer to stdout and one stats line to stderr: images and image tokens, prompt
// and generated tokens, the language model's KV bytes against its native cache. Throws
// base::InvalidArgument (--image without --mmproj, marker count) and base::FormatError (a
// missing or corrupt image or mmproj, naming the file).
void run_image_generation(const ImageGenerationRequest& request);

}  // namespace apps
