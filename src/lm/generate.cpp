#include "lm/generate.h"

#include <algorithm>
#include <span>
#include <chrono>
#include <string>
#include <unordered_set>

#include "base/error.h"
#include "lm/stats.h"

namespace lm {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void validate_generate_options(const GenerateOptions& o) {
  validate(sampler_options(o));
  if (o.max_tokens < 0) throw base::InvalidArgument("max_tokens must be >= 0, got " + std::to_string(o.max_tokens));
  if (o.prefill_step_size < 1) {
    throw base::InvalidArgument("prefill_step_size must be >= 1, got " + std::to_string(o.prefill_step_size));
  }
  if (o.context_length && *o.context_length < 1) {
    throw base::InvalidArgument("context_length must be >= 1, got " + std::to_string(*o.context_length));
  }
}

// Expected length of a UTF-8 sequence from its lead byte; 0 for a continuation or invalid byte.
int utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return lead >= 0xC2 ? 2 : 0;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return lead <= 0xF4 ? 4 : 0;
  return 0;
}

}  // namespace

SamplerOptions sampler_options(const GenerateOptions& o) {
  SamplerOptions s;
  s.temperature = o.temperature;
  s.top_k = o.top_k;
  s.top_p = o.top_p;
  s.min_p = o.min_p;
  s.repetition_penalty = o.repetition_penalty;
  s.repetition_context = o.repetition_context;
  s.seed = o.seed;
  return s;
}

std::string_view stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kEos:
      return "eos";
    case StopReason::kMaxTokens:
      return "max_tokens";
    case StopReason::kContextLimit:
      return "context_limit";
    case StopReason::kCallback:
      return "stopped";
  }
  return "?";
}

std::string Utf8Stream::push(std::string_view bytes) {
  pending_.append(bytes);
  // Find the lead byte of the last character (at most 3 continuation bytes back).
  const std::size_t n = pending_.size();
  std::size_t lead = n;
  for (std::size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto byte = static_cast<unsigned char>(pending_[n - back]);
    if ((byte & 0xC0) != 0x80) {
      lead = n - back;
      break;
    }
  }
  std::string out;
  if (lead == n) {  // no lead byte nearby: malformed, pass through
    out.swap(pending_);
    return out;
  }
  const int want = utf8_sequence_length(static_cast<unsigned char>(pending_[lead]));
  if (want > 1 && n - lead < static_cast<std::size_t>(want)) {
    out = pending_.substr(0, lead);
    pending_.erase(0, lead);
    return out;
  }
  out.swap(pending_);
  return out;
}

std::string Utf8Stream::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

namespace {

// The cached token count, after checking the cache list fits the model and its token record.
int64_t checked_cached_tokens(const Model& model, const PromptCache& state) {
  if (state.caches.size() != model.layers().size()) {
    throw base::InvalidArgument("cache list has " + std::to_string(state.caches.size()) + " caches for a model of " +
                                std::to_string(model.layers().size()) + " layers");
  }
  const int64_t cached = state.caches.empty() || !state.caches.front() ? 0 : state.caches.front()->offset();
  if (cached != static_cast<int64_t>(state.tokens.size())) {
    throw base::InvalidArgument("prompt cache holds " + std::to_string(cached) + " tokens but records " +
                                std::to_string(state.tokens.size()) + " token ids");
  }
  return cached;
}

// The tokens to prefill on top of `cached` ones: the prompt (BOS when both are empty), checked
// against the vocabulary and the context; when everything is already cached, the last cached
// token is rolled back and returned (its logits are not stored).
std::vector<int32_t> tokens_to_prefill(const Tokenizer& tokenizer, const std::vector<int32_t>& prompt_tokens,
                                       int32_t vocab, int64_t ctx, int64_t cached, PromptCache& state) {
  std::vector<int32_t> prompt = prompt_tokens;
  if (prompt.empty() && cached == 0) {
    // An empty prompt starts from BOS, as llama2.c does.
    const auto bos = tokenizer.bos_id();
    if (!bos) throw base::InvalidArgument("empty prompt and the tokenizer has no BOS token to start from");
    prompt.push_back(*bos);
  }
  for (int32_t t : prompt) {
    if (t < 0 || t >= vocab) {
      throw base::InvalidArgument("prompt token id " + std::to_string(t) + " outside the vocabulary of " +
                                  std::to_string(vocab));
    }
  }
  const int64_t total_prompt = cached + static_cast<int64_t>(prompt.size());
  if (ctx > 0 && total_prompt > ctx) {
    throw base::InvalidArgument("prompt of " + std::to_string(total_prompt) +
                                " tokens is longer than the context length of " + std::to_string(ctx) + " tokens");
  }
  if (prompt.empty()) {
    // Everything is already cached: the cached sequence's last logits are not stored, so the
    // last cached token is rolled back and fed again (needs a trimmable cache).
    for (auto& cache : state.caches) {
      if (!cache->is_trimmable()) {
        throw base::InvalidArgument("no new prompt tokens and the " + cache->type_name() +
                                    " cache cannot be rolled back to recompute the last logits");
      }
    }
    for (auto& cache : state.caches) cache->trim(1);
    prompt.push_back(state.tokens.back());
    state.tokens.pop_back();
  }
  return prompt;
}

// Prefill in chunks; the last chunk's last-position logits (in `logits`) give the first token.
void prefill(const Model& model, const std::vector<int32_t>& prompt, const GenerateOptions& options, PromptCache& state,
             std::vector<float>& logits) {
  std::vector<float> embeddings;
  const auto step = static_cast<std::size_t>(options.prefill_step_size);
  for (std::size_t begin = 0; begin < prompt.size(); begin += step) {
    const std::size_t end = std::min(prompt.size(), begin + step);
    const std::vector<int32_t> chunk(prompt.begin() + static_cast<std::ptrdiff_t>(begin),
                                     prompt.begin() + static_cast<std::ptrdiff_t>(end));
    if (options.prompt_embeddings) {
      options.prompt_embeddings(begin, end, embeddings);
      const std::size_t want = (end - begin) * static_cast<std::size_t>(model.config().dim);
      if (embeddings.size() != want) {
        throw base::InvalidArgument("prompt_embeddings gave " + std::to_string(embeddings.size()) + " floats for " +
                                    std::to_string(end - begin) + " tokens of width " +
                                    std::to_string(model.config().dim));
      }
      model.forward_embeddings(embeddings.data(), static_cast<int64_t>(end - begin), state.caches, logits);
    } else {
      model.forward(chunk, state.caches, logits);
    }
    state.tokens.insert(state.tokens.end(), chunk.begin(), chunk.end());
    if (options.on_prefill_progress) {
      options.on_prefill_progress(static_cast<int64_t>(end), static_cast<int64_t>(prompt.size()));
    }
  }
}

}  // namespace

GenerationStats stream_generate(const Model& model, const Tokenizer& tokenizer,
                                const std::vector<int32_t>& prompt_tokens, const GenerateOptions& options,
                                const std::function<bool(const GenerationChunk&)>& on_token,
                                PromptCache* prompt_cache) {
  validate_generate_options(options);
  Sampler sampler(sampler_options(options));
  const int32_t vocab = model.config().vocab_size;
  // A tokenizer may know fewer tokens than the model has logit rows (padded embeddings, or a
  // mismatched tokenizer file): only ids the tokenizer can decode are ever sampled, instead of
  // failing mid-generation after partial output.
  const int32_t sampled_vocab = std::min(vocab, tokenizer.vocab_size());
  if (sampled_vocab < 1) {
    throw base::InvalidArgument("the tokenizer has no tokens (vocab_size " + std::to_string(tokenizer.vocab_size()) +
                                ")");
  }

  // The caches: the caller's (continuing a prompt cache) or a fresh list for this call only.
  PromptCache local;
  PromptCache& state = prompt_cache ? *prompt_cache : local;
  if (!prompt_cache) state.caches = make_prompt_cache(model);
  const int64_t cached = checked_cached_tokens(model, state);
  const int64_t ctx = options.context_length.value_or(model.config().context_length);
  const std::vector<int32_t> prompt = tokens_to_prefill(tokenizer, prompt_tokens, vocab, ctx, cached, state);

  std::unordered_set<int32_t> stops(options.extra_stop_ids.begin(), options.extra_stop_ids.end());
  if (const auto eos = tokenizer.eos_id()) stops.insert(*eos);
  for (int32_t t : tokenizer.stop_ids()) stops.insert(t);

  GenerationStats stats;
  stats.prompt_tokens = static_cast<int64_t>(prompt.size());

  std::vector<float> logits;
  const auto prefill_start = Clock::now();
  prefill(model, prompt, options, state, logits);
  stats.prompt_seconds = seconds_since(prefill_start);
  if (options.on_prompt_processed) options.on_prompt_processed(state);
  if (stats.prompt_seconds > 0) stats.prompt_tokens_per_s = static_cast<double>(prompt.size()) / stats.prompt_seconds;

  // Decode: sample, emit, feed back.
  std::vector<int32_t> history = state.tokens;
  Utf8Stream utf8;
  int64_t decode_forwards = 0;
  const auto decode_start = Clock::now();
  stats.stop_reason = StopReason::kMaxTokens;
  int32_t previous = history.empty() ? -1 : history.back();
  int64_t sequence = static_cast<int64_t>(history.size());
  for (int64_t i = 0; i < options.max_tokens; ++i) {
    if (ctx > 0 && sequence >= ctx) {
      stats.stop_reason = StopReason::kContextLimit;
      break;
    }
    if (static_cast<int32_t>(logits.size()) != vocab) {
      throw base::InvalidArgument("model returned " + std::to_string(logits.size()) + " logits for a vocabulary of " +
                                  std::to_string(vocab));
    }
    const int32_t token =
        sampler.sample(std::span<const float>(logits).first(static_cast<std::size_t>(sampled_vocab)), history);
    ++stats.generation_tokens;
    ++sequence;
    if (stops.count(token)) {
      stats.stop_reason = StopReason::kEos;
      // Bytes of a character the stop token cut short still go out (never swallowed).
      std::string rest = utf8.flush();
      if (!rest.empty() && on_token) {
        GenerationChunk tail;
        tail.token = -1;
        tail.index = i;
        tail.text = std::move(rest);
        on_token(tail);
      }
      break;
    }
    GenerationChunk chunk;
    chunk.token = token;
    chunk.index = i;
    chunk.text = utf8.push(tokenizer.decode_token(previous, token));
    history.push_back(token);
    previous = token;
    const bool last = i + 1 == options.max_tokens || (ctx > 0 && sequence >= ctx);
    if (last) chunk.text += utf8.flush();
    if (on_token && !on_token(chunk)) {
      stats.stop_reason = StopReason::kCallback;
      break;
    }
    if (last) {
      stats.stop_reason = i + 1 == options.max_tokens ? StopReason::kMaxTokens : StopReason::kContextLimit;
      break;
    }
    model.forward({token}, state.caches, logits);
    state.tokens.push_back(token);
    ++decode_forwards;
  }
  stats.generation_seconds = seconds_since(decode_start);
  if (decode_forwards > 0 && stats.generation_seconds > 0) {
    stats.generation_tokens_per_s = static_cast<double>(decode_forwards) / stats.generation_seconds;
  }
  stats.kv_bytes_resident = kv_bytes_resident(state.caches);
  stats.peak_rss_bytes = peak_rss_bytes();
  return stats;
}

GenerationStats stream_generate(const Model& model, const Tokenizer& tokenizer, const std::string& prompt,
                                const GenerateOptions& options,
                                const std::function<bool(const GenerationChunk&)>& on_token,
                                PromptCache* prompt_cache) {
  // A continuation of cached tokens gets no second BOS.
  const bool continuing = prompt_cache && !prompt_cache->tokens.empty();
  std::vector<int32_t> tokens;
  if (!prompt.empty()) tokens = tokenizer.encode(prompt, options.add_bos && !continuing);
  return stream_generate(model, tokenizer, tokens, options, on_token, prompt_cache);
}

std::string generate(const Model& model, const Tokenizer& tokenizer, const std::string& prompt,
                     const GenerateOptions& options) {
  std::string text;
  stream_generate(model, tokenizer, prompt, options, [&](const GenerationChunk& chunk) {
    text += chunk.text;
    return true;
  });
  return text;
}

}  // namespace lm
