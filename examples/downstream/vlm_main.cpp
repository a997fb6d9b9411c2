// A downstream program with a vision-language model: load a text GGUF + its mmproj GGUF, wire
// a 4-bit TurboQuant-RVQ cache on the language model with patch_vlm_kv_cache, and answer about
// an image twice — each generation gets fresh compressed caches from the hook.
//   /tmp/ds/demo_vlm MODEL.gguf MMPROJ.gguf IMAGE.png "prompt"
#include <veloxquant/veloxquant.h>
#include <lm/vlm/vision_language_model.h>
#include <lm/vlm/vlm_generate.h>
#include <cstdio>
#include <set>
#include <memory>
#include <string>
#include <vector>
int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: demo_vlm MODEL.gguf MMPROJ.gguf IMAGE [PROMPT]\n");
    return 2;
  }
  auto loaded = lm::load_vision_language_model(argv[1], argv[2]);
  veloxquant::KVCacheConfig config;
  config.method = "turboquant_rvq";
  config.bit_width_inlier = 4;
  auto first = veloxquant::integration::patch_vlm_kv_cache(*loaded.model, config);
  const lm::VlmPrompt prompt = lm::build_vlm_prompt(*loaded.model, *loaded.tokenizer,
                                                    argc > 4 ? argv[4] : "Describe:", {lm::load_image(argv[3])});
  std::vector<std::shared_ptr<lm::KVCache>> held;  // kept alive: no address reused between runs
  std::string answers[2];
  for (std::string& answer : answers) {
    lm::GenerateOptions options;
    options.max_tokens = 8;
    options.on_prompt_processed = [&](const lm::PromptCache& state) {
      held.insert(held.end(), state.caches.begin(), state.caches.end());
    };
    lm::stream_generate(*loaded.model, *loaded.tokenizer, prompt, options, [&](const lm::GenerationChunk& chunk) {
      answer += std::to_string(chunk.token) + " ";
      return true;
    });
  }
  std::printf("%zu caches, %lld image tokens\nanswer 1: %s\nanswer 2: %s\n", first.size(),
              static_cast<long long>(prompt.image_tokens), answers[0].c_str(), answers[1].c_str());
  std::set<const lm::KVCache*> distinct;
  for (const auto& c : held) distinct.insert(c.get());
  for (const auto& c : first) distinct.insert(c.get());
  std::printf("fresh caches per generation: %s (%s)\n", distinct.size() == held.size() + first.size() ? "yes" : "no",
              held.front()->type_name().c_str());
  std::printf("same answer twice: %s\n", answers[0] == answers[1] ? "yes" : "no");
}
