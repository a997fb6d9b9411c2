// `veloxquant generate`: load a model, stream generated text to stdout, print one stats line
// to stderr. Flags are read as text and validated here, so every bad value is one clear
// message and exit code 2 (main.cpp maps base::InvalidArgument to 2).
//
// Extending: add the flag in add_generate_flags(), read it in run_generate(); a cache method
// is installed through the model's make_cache hook between load and generation (the spot is
// marked below), and every generation still gets fresh caches from lm::make_prompt_cache.
#include <CLI/CLI.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "apps/command_registry.h"
#include "apps/image_generation.h"
#include "apps/kv_method_flags.h"
#include "apps/model_loading.h"
#include "apps/progress_bar.h"
#include "base/error.h"
#include "lm/cache/full_kv_cache.h"
#include "lm/generate.h"
#include "lm/load.h"
#include "lm/cache/prompt_cache_file.h"
#include "lm/stats.h"

namespace apps {
namespace {

// Every value as text; parsed and range-checked in run_generate.
struct GenerateFlags : apps::ModelFlags {  // --model, --tokenizer, --threads, --kv-dtype (model_loading.h)
  std::optional<std::string> prompt;
  std::string prompt_file;
  std::string max_tokens = "256";
  std::string temp = "0";
  std::string top_k = "0";
  std::string top_p = "1";
  std::string min_p = "0";
  std::string repeat_penalty = "1";
  std::string repeat_context = "64";
  std::string seed = "0";
  bool chat = false;
  std::string chat_template;  // a Jinja file used instead of the model's template
  std::string ctx;
  std::string prefill_step = "512";
  std::string save_prompt_cache;
  std::string load_prompt_cache;
  std::string mmproj;               // vision tower + projector GGUF (image_generation.h)
  std::vector<std::string> images;  // --image, repeatable
  KvMethodFlags kv;                 // --method/--bits/--set (kv_method_flags.h)
  bool seed_given = false;          // an explicit --seed also seeds the compressed cache
};

template <class T>
T parse_integer(const std::string& flag, const std::string& text, T min, T max) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    throw base::InvalidArgument(flag + " expects an integer, got '" + text + "'");
  }
  if (value < min || value > max) {
    throw base::InvalidArgument(flag + " must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                                text);
  }
  return value;
}

float parse_number(const std::string& flag, const std::string& text) {
  float value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value)) {
    throw base::InvalidArgument(flag + " expects a number, got '" + text + "'");
  }
  return value;
}

std::string read_text_file(const std::string& path, const std::string& what = "prompt file") {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw base::FormatError(what + " '" + path + "' does not exist or is not a file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw base::FormatError("cannot read " + what + " '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void add_generate_flags(CLI::App& cmd, GenerateFlags& f) {
  apps::add_model_flags(cmd, f, {.model_required = false});
  cmd.add_option("--prompt,-p", f.prompt, "Prompt text (empty = start from BOS)")->type_name("TEXT");
  cmd.add_option("--prompt-file", f.prompt_file, "Read the prompt from a file")->type_name("PATH");
  cmd.add_option("--max-tokens,-n", f.max_tokens, "Tokens to generate")->capture_default_str()->type_name("N");
  cmd.add_option("--temp", f.temp, "Sampling temperature (0 = greedy)")->capture_default_str()->type_name("T");
  cmd.add_option("--top-k", f.top_k, "Keep the k most likely tokens (0 = off)")->capture_default_str()->type_name("K");
  cmd.add_option("--top-p", f.top_p, "Nucleus sampling mass in (0, 1] (1 = off)")
      ->capture_default_str()
      ->type_name("P");
  cmd.add_option("--min-p", f.min_p, "Drop tokens below min_p x the top probability (0 = off)")
      ->capture_default_str()
      ->type_name("P");
  cmd.add_option("--repeat-penalty", f.repeat_penalty, "Repetition penalty (1 = off)")
      ->capture_default_str()
      ->type_name("R");
  cmd.add_option("--repeat-context", f.repeat_context, "Tokens the repetition penalty looks back over")
      ->capture_default_str()
      ->type_name("N");
  cmd.add_option("--seed", f.seed, "Sampling seed (std::mt19937_64)")->capture_default_str()->type_name("S");
  cmd.add_flag("--chat", f.chat, "Wrap the prompt in the model's chat template as a user turn");
  cmd.add_option("--chat-template", f.chat_template,
                 "Jinja chat template file to use instead of the model's (implies --chat; for a GGUF without one)")
      ->type_name("FILE");
  cmd.add_option("--ctx", f.ctx, "Context length (default: the model's)")->type_name("N");
  cmd.add_option("--prefill-step", f.prefill_step, "Prompt tokens per prefill forward")
      ->capture_default_str()
      ->type_name("N");
  cmd.add_option("--save-prompt-cache", f.save_prompt_cache, "Save the caches after the prompt to this file")
      ->type_name("FILE");
  cmd.add_option("--load-prompt-cache", f.load_prompt_cache,
                 "Continue from a saved prompt cache; --prompt is appended after its tokens")
      ->type_name("FILE");
  cmd.add_option("--mmproj", f.mmproj,
                 "Vision tower + projector GGUF of a vision-language model (llama.cpp's mmproj file)")
      ->type_name("FILE");
  cmd.add_option("--image", f.images,
                 "Image (PNG or JPEG) for --mmproj; repeatable. Placed at each <__media__> or <image> marker "
                 "of the prompt, else before it")
      ->type_name("FILE");
  add_kv_method_flags(cmd, f.kv);
}

// What ties a prompt-cache file to the model that made it.
// What a prompt cache was made for: the model, and the cache flags (a kivi cache loaded under
// --method none would run kivi while the report says none; an f16 cache loaded under
// --kv-dtype f32 would be measured as f32).
std::map<std::string, std::string> model_fingerprint(const lm::Model& model, const std::string& kv_dtype,
                                                     const KvMethodFlags& kv) {
  const lm::ModelConfig& c = model.config();
  std::string cache = kv.preset.empty() ? "--method " + kv.method : "--preset " + kv.preset;
  if (!kv.bits.empty()) cache += " --bits " + kv.bits;
  for (const std::string& set : kv.sets) cache += " --set " + set;
  return {{"model.architecture", c.architecture},
          {"model.name", c.name},
          {"model.n_layers", std::to_string(c.n_layers)},
          {"model.dim", std::to_string(c.dim)},
          {"model.vocab_size", std::to_string(c.vocab_size)},
          {"kv_dtype", kv_dtype},
          {"kv_cache", cache}};
}

// The error for a fingerprint entry that differs (`saved` is null when the file lacks the key).
// Built outside check_fingerprint's loop: it runs once, on the way out.
[[noreturn]] void throw_fingerprint_mismatch(const std::string& path, const std::string& key, const std::string* saved,
                                             const std::string& value) {
  if (key == "kv_dtype" || key == "kv_cache") {
    const std::string flag = key == "kv_dtype" ? "--kv-dtype " : "";
    throw base::InvalidArgument("prompt cache '" + path + "' was saved with " + flag + *saved + "; this run asks for " +
                                flag + value +
                                ": give the flags it was saved with (the cache would run as saved and be reported "
                                "as asked)");
  }
  throw base::InvalidArgument("prompt cache '" + path + "' was made for a different model: " + key + " is '" +
                              (saved ? *saved : std::string("(missing)")) + "', this model has '" + value + "'");
}

void check_fingerprint(const std::map<std::string, std::string>& saved,
                       const std::map<std::string, std::string>& current, const std::string& path) {
  for (const auto& [key, value] : current) {
    const auto it = saved.find(key);
    const bool cache_flag = key == "kv_dtype" || key == "kv_cache";
    // Files from before the cache flags were recorded carry no such key: nothing to compare.
    if (cache_flag && it == saved.end()) continue;
    if (it != saved.end() && it->second == value) continue;
    throw_fingerprint_mismatch(path, key, it == saved.end() ? nullptr : &it->second, value);
  }
}

void run_generate(const GenerateFlags& f) {
  // 1. Validate every flag before touching any file.
  if (f.model.empty()) throw base::InvalidArgument("--model is required (a GGUF or llama2.c file)");
  if (f.prompt && !f.prompt_file.empty()) throw base::InvalidArgument("give --prompt or --prompt-file, not both");
  lm::GenerateOptions options;
  options.max_tokens = parse_integer<int>("--max-tokens", f.max_tokens, 0, 1 << 24);
  options.temperature = parse_number("--temp", f.temp);
  options.top_k = parse_integer<int>("--top-k", f.top_k, 0, 1 << 30);
  options.top_p = parse_number("--top-p", f.top_p);
  options.min_p = parse_number("--min-p", f.min_p);
  options.repetition_penalty = parse_number("--repeat-penalty", f.repeat_penalty);
  options.repetition_context = parse_integer<int>("--repeat-context", f.repeat_context, 0, 1 << 30);
  options.seed = parse_integer<uint64_t>("--seed", f.seed, 0, UINT64_MAX);
  options.prefill_step_size = parse_integer<int>("--prefill-step", f.prefill_step, 1, 1 << 20);
  lm::validate(lm::sampler_options(options));  // ranges of temp / top-p / min-p / penalty

  lm::LoadOptions load_options;
  load_options.kv_type = lm::parse_kv_cache_type(f.kv_dtype);
  load_options.threads = f.thread_count();
  apps::size_global_pool(load_options.threads);  // the caches' pool, shared with the model
  if (!f.ctx.empty()) {
    load_options.context_length = parse_integer<int64_t>("--ctx", f.ctx, 1, int64_t{1} << 40);
    options.context_length = load_options.context_length;
  }
  if (!f.tokenizer.empty()) load_options.tokenizer_path = f.tokenizer;

  KvMethodFlags kv = f.kv;
  if (f.seed_given) kv.seed = static_cast<int64_t>(options.seed);
  const std::optional<veloxquant::KVCacheConfig> kv_config = kv_config_from_flags(kv);  // before loading

  std::string prompt = f.prompt.value_or("");
  if (!f.prompt_file.empty()) prompt = read_text_file(f.prompt_file);

  if (!f.mmproj.empty() || !f.images.empty()) {
    if (!f.save_prompt_cache.empty() || !f.load_prompt_cache.empty()) {
      throw base::InvalidArgument(
          "--save-prompt-cache / --load-prompt-cache are not supported with --mmproj / --image");
    }
    ImageGenerationRequest request{
        f.model,      f.mmproj,  f.images,
        prompt,       f.chat,    options,
        load_options, kv_config, kv.preset.empty() ? kv.method : "preset " + kv.preset + ": " + kv_config->method};
    run_image_generation(request);
    return;
  }

  // 2. Load.
  const lm::LoadedModel loaded = lm::load(f.model, load_options);
  lm::Model& model = *loaded.model;
  const lm::Tokenizer& tokenizer = *loaded.tokenizer;
  apply_kv_method(model, kv_config);  // --method: patch_model_kv_cache installs the make_cache hook

  // 3. The prompt: chat template, then tokens (no BOS when continuing a cached prompt).
  std::optional<lm::SavedPromptCache> saved;
  if (!f.load_prompt_cache.empty()) {
    saved = lm::load_prompt_cache(f.load_prompt_cache);
    check_fingerprint(saved->metadata, model_fingerprint(model, f.kv_dtype, kv), f.load_prompt_cache);
    for (std::size_t i = 0; i < saved->cache.tokens.size(); ++i) {
      if (saved->cache.tokens[i] >= model.config().vocab_size) {
        throw base::InvalidArgument("prompt cache '" + f.load_prompt_cache + "': token " + std::to_string(i) +
                                    " has id " + std::to_string(saved->cache.tokens[i]) + ", past the vocabulary of " +
                                    std::to_string(model.config().vocab_size));
      }
    }
    if (saved->cache.caches.size() != model.layers().size()) {
      throw base::InvalidArgument("prompt cache '" + f.load_prompt_cache + "' has " +
                                  std::to_string(saved->cache.caches.size()) + " caches, the model " +
                                  std::to_string(model.layers().size()) + " layers");
    }
  }
  if (!f.chat_template.empty()) {
    prompt =
        tokenizer.apply_custom_chat_template({{"user", prompt}}, read_text_file(f.chat_template, "chat template file"));
  } else if (f.chat) {
    prompt = tokenizer.apply_chat_template({{"user", prompt}});
  }
  const bool continuing = saved && !saved->cache.tokens.empty();
  std::vector<int32_t> tokens;
  if (!prompt.empty()) tokens = tokenizer.encode(prompt, options.add_bos && !continuing);

  // 4. Generate, streaming whole UTF-8 characters, flushed per token.
  const bool long_prefill = static_cast<int64_t>(tokens.size()) > options.prefill_step_size;
  ProgressBar bar(stderr, "prefill", long_prefill && is_terminal(stderr));
  options.on_prefill_progress = [&](int64_t done, int64_t total) { bar.update(done, total); };
  options.on_prompt_processed = [&](const lm::PromptCache& state) {
    bar.finish();
    if (!f.save_prompt_cache.empty()) {
      lm::save_prompt_cache(f.save_prompt_cache, state, model_fingerprint(model, f.kv_dtype, kv));
    }
  };
  const lm::GenerationStats stats = lm::stream_generate(
      model, tokenizer, tokens, options,
      [](const lm::GenerationChunk& chunk) {
        std::fwrite(chunk.text.data(), 1, chunk.text.size(), stdout);
        std::fflush(stdout);
        return true;
      },
      saved ? &saved->cache : nullptr);
  std::fputc('\n', stdout);
  std::fflush(stdout);

  // 5. One stats line. The full-precision reference: every token the caches hold (the last
  // sampled token is never fed back) in the host's KV dtype, without growth slack.
  // A continued prompt cache holds every token fed in the call, the earlier ones included.
  const int64_t cached_tokens =
      saved ? static_cast<int64_t>(saved->cache.tokens.size())
            : stats.prompt_tokens + (stats.generation_tokens > 0 ? stats.generation_tokens - 1 : 0);
  // Two references: the bare rows in the KV dtype (no slack), and what the host's native cache
  // would really allocate for the same tokens (FullKVCache grows in 256-token steps, as the
  // compressed caches do), so "x smaller" compares allocation with allocation.
  // With a block type (q8_0 ...) the reference is the f16 cache those types are measured against.
  const lm::DType reference_dtype =
      lm::is_block_kv_type(load_options.kv_type) ? lm::DType::F16 : lm::kv_feed_dtype(load_options.kv_type);
  const std::size_t bare_rows = full_precision_kv_bytes(model, cached_tokens, reference_dtype);
  const int64_t step = lm::FullKVCache::kGrowthStep;
  const std::size_t native_resident =
      full_precision_kv_bytes(model, (cached_tokens + step - 1) / step * step, reference_dtype);
  const double smaller = stats.kv_bytes_resident ? static_cast<double>(native_resident) / stats.kv_bytes_resident : 0.0;
  std::fprintf(stderr,
               "prompt %lld tok %.1f tok/s | gen %lld tok %.1f tok/s | KV %s resident [%s] vs %s for the "
               "native %s cache (%.2fx smaller; bare %s rows %s) | peak RSS %s | stop %s\n",
               static_cast<long long>(stats.prompt_tokens), stats.prompt_tokens_per_s,
               static_cast<long long>(stats.generation_tokens), stats.generation_tokens_per_s,
               lm::format_bytes(stats.kv_bytes_resident).c_str(),
               (kv.preset.empty() ? kv.method : "preset " + kv.preset + ": " + kv_config->method).c_str(),
               lm::format_bytes(native_resident).c_str(), std::string(lm::dtype_name(reference_dtype)).c_str(), smaller,
               std::string(lm::dtype_name(reference_dtype)).c_str(), lm::format_bytes(bare_rows).c_str(),
               lm::format_bytes(stats.peak_rss_bytes).c_str(),
               std::string(lm::stop_reason_name(stats.stop_reason)).c_str());
}

CommandRegistration registration{"generate", [](CLI::App& root) {
                                   auto flags = std::make_shared<GenerateFlags>();
                                   auto* cmd = root.add_subcommand(
                                       "generate", "Generate text with a model (streams to stdout, stats to stderr)");
                                   add_generate_flags(*cmd, *flags);
                                   cmd->callback([flags, cmd] {
                                     flags->seed_given = cmd->count("--seed") > 0;
                                     run_generate(*flags);
                                   });
                                 }};

}  // namespace
}  // namespace apps
