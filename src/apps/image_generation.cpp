#include "apps/image_generation.h"

#include <cstdio>

#include "apps/kv_method_flags.h"
#include "base/error.h"
#include "lm/cache/full_kv_cache.h"
#include "lm/stats.h"
#include "lm/vlm/vlm_generate.h"
#include "veloxquant/integration/patch_vlm.h"

namespace apps {

void run_image_generation(const ImageGenerationRequest& r) {
  if (r.mmproj.empty()) {
    throw base::InvalidArgument("--image needs --mmproj (the GGUF holding the model's vision tower and projector)");
  }
  // Images first: a wrong path fails before the model is read.
  std::vector<lm::RgbImage> images;
  for (const std::string& path : r.images) images.push_back(lm::load_image(path));

  const lm::LoadedVisionLanguageModel loaded = lm::load_vision_language_model(r.model, r.mmproj, r.load_options);
  lm::VisionLanguageModel& vlm = *loaded.model;
  const lm::Tokenizer& tokenizer = *loaded.tokenizer;
  if (r.kv_config) veloxquant::integration::patch_vlm_kv_cache(vlm, *r.kv_config);

  std::string prompt = r.prompt;
  if (r.chat) {
    // The images belong to the user's turn: markers go in front of the text when it has none.
    if (prompt.find(lm::kMediaMarker) == std::string::npos && prompt.find(lm::kImageMarker) == std::string::npos) {
      std::string markers;
      for (std::size_t i = 0; i < images.size(); ++i) markers += lm::kMediaMarker;
      prompt = markers + prompt;
    }
    prompt = tokenizer.apply_chat_template({{"user", prompt}});
  }
  const lm::VlmPrompt vlm_prompt = lm::build_vlm_prompt(vlm, tokenizer, prompt, images, r.options.add_bos);

  const lm::GenerationStats stats =
      lm::stream_generate(vlm, tokenizer, vlm_prompt, r.options, [](const lm::GenerationChunk& chunk) {
        std::fwrite(chunk.text.data(), 1, chunk.text.size(), stdout);
        std::fflush(stdout);
        return true;
      });
  std::fputc('\n', stdout);
  std::fflush(stdout);

  // The language model's caches hold every prompt row (image rows included) and every
  // generated token but the last; the reference is its native cache for the same tokens.
  const lm::Model& text = *vlm.language_model();
  const int64_t cached = stats.prompt_tokens + (stats.generation_tokens > 0 ? stats.generation_tokens - 1 : 0);
  const lm::DType reference_dtype =
      lm::is_block_kv_type(r.load_options.kv_type) ? lm::DType::F16 : lm::kv_feed_dtype(r.load_options.kv_type);
  const int64_t step = lm::FullKVCache::kGrowthStep;
  const std::size_t native_resident = full_precision_kv_bytes(text, (cached + step - 1) / step * step, reference_dtype);
  const double smaller = stats.kv_bytes_resident ? static_cast<double>(native_resident) / stats.kv_bytes_resident : 0.0;
  std::fprintf(
      stderr,
      "images %d (%lld image tok) | prompt %lld tok %.1f tok/s | gen %lld tok %.1f tok/s | "
      "language-model KV %s resident [%s] vs %s for the native %s cache (%.2fx smaller) | peak RSS %s | "
      "stop %s\n",
      vlm_prompt.images, static_cast<long long>(vlm_prompt.image_tokens), static_cast<long long>(stats.prompt_tokens),
      stats.prompt_tokens_per_s, static_cast<long long>(stats.generation_tokens), stats.generation_tokens_per_s,
      lm::format_bytes(stats.kv_bytes_resident).c_str(), r.method_label.c_str(),
      lm::format_bytes(native_resident).c_str(), std::string(lm::dtype_name(reference_dtype)).c_str(), smaller,
      lm::format_bytes(stats.peak_rss_bytes).c_str(), std::string(lm::stop_reason_name(stats.stop_reason)).c_str());
}

}  // namespace apps
