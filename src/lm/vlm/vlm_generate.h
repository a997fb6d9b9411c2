#pragma once
// Prompts with images, and generation from them: the image markers in the text are replaced by
// as many placeholder positions as the image has embedding rows, and lm::stream_generate runs
// on the language model with those rows spliced into its input embeddings. The caches are the
// language model's: make_prompt_cache(language model), so a make_cache hook installed there
// (patch_vlm_kv_cache) gives every generation fresh compressed caches.
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "lm/generate.h"
#include "lm/tokenizer/tokenizer.h"
#include "lm/vlm/image.h"
#include "lm/vlm/vision_language_model.h"

namespace lm {

// Where an image goes in the prompt text: llama.cpp's mtmd marker, or LLaVA's.
inline constexpr std::string_view kMediaMarker = "<__media__>";
inline constexpr std::string_view kImageMarker = "<image>";
// The token id recorded at image positions (their embeddings are the image's rows; the id only
// fills the caches' token record). 0 is inside every vocabulary.
inline constexpr int32_t kImagePlaceholderId = 0;

struct VlmPrompt {
  std::vector<int32_t> tokens;     // BOS, text pieces, kImagePlaceholderId at image rows
  std::vector<int64_t> image_row;  // per token: row in image_rows, -1 for text
  std::vector<float> image_rows;   // [image_tokens, dim]
  int64_t image_tokens = 0;
  int images = 0;
};

// The tokens a family puts around each image's rows, when the model's vocabulary has them
// (llama.cpp's mtmd does the same): Idefics3 / SmolVLM wrap an image as
// <fake_token_around_image><global-img> ... <fake_token_around_image>. Empty for LLaVA, and
// for any vocabulary lacking one of the tokens.
struct ImageWrapping {
  std::vector<int32_t> before, after;
};
ImageWrapping image_wrapping(const std::string& projector_kind, const Tokenizer& tokenizer);

// Splits `text` at the markers (either kind; their count must equal images.size(), else
// base::InvalidArgument) — with no marker the images come first, right after BOS. Text pieces
// are encoded separately without BOS (as llama.cpp's mtmd does), BOS once at the start when
// add_bos. Each image goes through model.embed_image(), its rows wrapped by image_wrapping().
VlmPrompt build_vlm_prompt(const VisionLanguageModel& model, const Tokenizer& tokenizer, const std::string& text,
                           const std::vector<RgbImage>& images, bool add_bos = true);

// lm::stream_generate on model.language_model() with the prompt's image rows spliced in.
// `options.prompt_embeddings` is set here (a caller's is replaced).
GenerationStats stream_generate(const VisionLanguageModel& model, const Tokenizer& tokenizer, const VlmPrompt& prompt,
                                GenerateOptions options, const std::function<bool(const GenerationChunk&)>& on_token);

}  // namespace lm
