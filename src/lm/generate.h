#pragma once
// lm::generate / lm::stream_generate — the generation loop, mirroring mlx_lm's:
//   one fresh cache list per call from make_prompt_cache(model) (so a patched model's hook
//   runs once per generation), chunked prefill of the prompt (prefill_step_size tokens per
//   forward), then one token at a time: sample, emit, feed back. Stops on EOS / the
//   tokenizer's stop ids / extra stop ids (the stop token is not emitted), after max_tokens,
//   when the sequence reaches the context length, or when the callback returns false.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lm/cache/cache.h"
#include "lm/model.h"
#include "lm/sampler.h"
#include "lm/tokenizer/tokenizer.h"

namespace lm {

struct PromptCache;

struct GenerateOptions {
  int max_tokens = 256;
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  int repetition_context = 64;
  uint64_t seed = 0;
  int prefill_step_size = 512;
  // Longest sequence (cached + prompt + generated tokens); unset = the model's context
  // length (0 there = unlimited).
  std::optional<int64_t> context_length;
  bool add_bos = true;                  // prepend BOS when encoding a text prompt
  std::vector<int32_t> extra_stop_ids;  // stop tokens besides EOS and the tokenizer's stop ids
  // Called after each prefill chunk with (tokens processed, tokens to process).
  std::function<void(int64_t, int64_t)> on_prefill_progress;
  // Input embeddings for the new prompt tokens instead of the model's token lookup, for a
  // vision-language model whose image positions hold image features: called per prefill chunk
  // with the chunk's [begin, end) indices into the prompt tokens of this call; fills
  // (end - begin) * dim floats, and the chunk goes through Model::forward_embeddings. The
  // prompt's ids still fill the caches' token record (placeholders at image positions).
  std::function<void(std::size_t begin, std::size_t end, std::vector<float>& out)> prompt_embeddings;
  // Called once the prompt is in the caches, before the first token is sampled, with the
  // caches and the tokens they hold (e.g. to save a prompt-cache file).
  std::function<void(const PromptCache&)> on_prompt_processed;
};

SamplerOptions sampler_options(const GenerateOptions& options);

enum class StopReason { kEos, kMaxTokens, kContextLimit, kCallback };
std::string_view stop_reason_name(StopReason reason);  // "eos", "max_tokens", ...

struct GenerationStats {
  int64_t prompt_tokens = 0;      // tokens prefilled in this call (not those already cached)
  int64_t generation_tokens = 0;  // tokens sampled, the stop token included
  double prompt_seconds = 0.0;
  double generation_seconds = 0.0;
  double prompt_tokens_per_s = 0.0;      // prompt_tokens / prefill time
  double generation_tokens_per_s = 0.0;  // decode forwards / their time
  std::size_t kv_bytes_resident = 0;     // sum of the caches' nbytes() at the end
  std::size_t peak_rss_bytes = 0;        // VmHWM at the end
  StopReason stop_reason = StopReason::kMaxTokens;
};

struct GenerationChunk {
  // The generated token; -1 for the one trailing chunk that releases held-back bytes when a
  // stop token ends generation in the middle of a multi-byte character.
  int32_t token = 0;
  // Text completed by this token: whole UTF-8 characters only; bytes of a character still
  // being spelled out by byte tokens are held back until it completes.
  std::string text;
  int64_t index = 0;  // 0-based index among generated tokens
};

// Caches already holding `tokens` (a loaded prompt-cache file, or a previous turn). A call
// given one continues from it instead of making fresh caches, and leaves it holding every
// token fed in the call.
struct PromptCache {
  CacheList caches;
  std::vector<int32_t> tokens;
};

// Streams generated tokens to on_token (return false to stop). An empty prompt starts from
// BOS. Throws base::InvalidArgument for bad options, a prompt longer than the context (the
// message names both numbers), or a cache list that does not match the model's layers.
GenerationStats stream_generate(const Model& model, const Tokenizer& tokenizer,
                                const std::vector<int32_t>& prompt_tokens, const GenerateOptions& options,
                                const std::function<bool(const GenerationChunk&)>& on_token,
                                PromptCache* prompt_cache = nullptr);
GenerationStats stream_generate(const Model& model, const Tokenizer& tokenizer, const std::string& prompt,
                                const GenerateOptions& options,
                                const std::function<bool(const GenerationChunk&)>& on_token,
                                PromptCache* prompt_cache = nullptr);

// The generated text (public API of the seed).
std::string generate(const Model& model, const Tokenizer& tokenizer, const std::string& prompt,
                     const GenerateOptions& options);

// Holds back the bytes of an incomplete UTF-8 character across pushes, so streamed text is
// always whole characters. Malformed bytes pass through unchanged (never swallowed).
class Utf8Stream {
 public:
  std::string push(std::string_view bytes);
  std::string flush();  // whatever is still held back

 private:
  std::string pending_;
};

}  // namespace lm
