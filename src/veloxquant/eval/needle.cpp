#include "veloxquant/eval/needle.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <random>
#include <string>

#include "base/error.h"
#include "veloxquant/eval/distribution_metrics.h"

namespace veloxquant::eval {

namespace {

const char* kQuestion = "\nWhat is the secret number? The secret number is";

std::string needle_sentence(const std::string& secret) { return " The secret number is " + secret + ". "; }

// The sentence boundary (just after ". ", "! ", "? " or a newline) closest to `target`;
// 0 and size() are boundaries too.
std::size_t nearest_boundary(const std::string& text, std::size_t target) {
  std::size_t best = 0;
  std::size_t best_distance = target;
  auto consider = [&](std::size_t pos) {
    const std::size_t d = pos > target ? pos - target : target - pos;
    if (d < best_distance) {
      best = pos;
      best_distance = d;
    }
  };
  consider(text.size());
  for (std::size_t i = 0; i + 1 < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n' || ((c == '.' || c == '!' || c == '?') && text[i + 1] == ' ')) consider(i + 1);
  }
  return best;
}

}  // namespace

NeedlePrompt build_needle_prompt(const lm::Tokenizer& tokenizer, const std::string& filler, double depth,
                                 const std::string& secret, int64_t prompt_tokens) {
  if (!(depth >= 0.0 && depth <= 1.0)) {
    throw base::InvalidArgument("needle depth must be in [0, 1], got " + std::to_string(depth));
  }
  if (filler.empty()) throw base::InvalidArgument("needle filler text is empty");
  const auto fixed_cost = static_cast<int64_t>(tokenizer.encode(needle_sentence(secret) + kQuestion, true).size());
  if (prompt_tokens < fixed_cost + 16) {
    throw base::InvalidArgument("needle prompt of " + std::to_string(prompt_tokens) +
                                " tokens cannot hold the needle and the question (" + std::to_string(fixed_cost) +
                                " tokens) plus a haystack");
  }
  const std::vector<int32_t> filler_tokens = tokenizer.encode(filler, false);
  int64_t budget = prompt_tokens - fixed_cost;
  NeedlePrompt prompt;
  prompt.answer = secret;
  prompt.depth = depth;
  // Token counts do not add exactly across the joins; shrink the haystack until it fits.
  for (int attempt = 0; attempt < 8; ++attempt) {
    const auto take =
        std::min<std::size_t>(filler_tokens.size(), static_cast<std::size_t>(std::max<int64_t>(budget, 1)));
    const std::string haystack =
        tokenizer.decode(std::vector<int32_t>(filler_tokens.begin(), filler_tokens.begin() + static_cast<long>(take)));
    const std::size_t at = nearest_boundary(haystack, static_cast<std::size_t>(std::llround(depth * haystack.size())));
    const std::string text = haystack.substr(0, at) + needle_sentence(secret) + haystack.substr(at) + kQuestion;
    prompt.tokens = tokenizer.encode(text, true);
    prompt.actual_depth = haystack.empty() ? 0.0 : static_cast<double>(at) / static_cast<double>(haystack.size());
    const auto excess = static_cast<int64_t>(prompt.tokens.size()) - prompt_tokens;
    if (excess <= 0) return prompt;
    budget -= excess;
  }
  throw base::InvalidArgument("could not fit a needle prompt into " + std::to_string(prompt_tokens) + " tokens");
}

bool needle_answer_matches(const std::string& generated, const std::string& answer) {
  std::size_t i = 0;
  while (i < generated.size() && std::isspace(static_cast<unsigned char>(generated[i]))) ++i;
  if (generated.compare(i, answer.size(), answer) != 0) return false;
  const std::size_t after = i + answer.size();
  return after >= generated.size() || !std::isdigit(static_cast<unsigned char>(generated[after]));
}

std::vector<int32_t> greedy_continue(const lm::Model& model, const lm::Tokenizer& tokenizer,
                                     const std::vector<int32_t>& prompt,
                                     const std::function<lm::CacheList()>& make_caches, int max_new_tokens,
                                     int64_t batch) {
  lm::CacheList caches = make_caches();
  std::vector<float> last;
  std::vector<int32_t> chunk;
  for (std::size_t b0 = 0; b0 < prompt.size(); b0 += static_cast<std::size_t>(batch)) {
    const std::size_t b1 = std::min(prompt.size(), b0 + static_cast<std::size_t>(batch));
    chunk.assign(prompt.begin() + static_cast<long>(b0), prompt.begin() + static_cast<long>(b1));
    model.forward(chunk, caches, last);
  }
  std::vector<int32_t> out;
  const auto eos = tokenizer.eos_id();
  for (int i = 0; i < max_new_tokens; ++i) {
    const int32_t next = argmax(last);
    if (eos && next == *eos) break;
    out.push_back(next);
    if (i + 1 < max_new_tokens) model.forward({next}, caches, last);
  }
  return out;
}

std::vector<NeedleCell> run_needle(const lm::Model& model, const lm::Tokenizer& tokenizer, const std::string& filler,
                                   const std::vector<NeedleMethod>& methods, const NeedleOptions& options) {
  const int64_t model_ctx = model.config().context_length;
  if (model_ctx > 0 && options.prompt_tokens + options.max_new_tokens > model_ctx) {
    throw base::InvalidArgument("needle prompt of " + std::to_string(options.prompt_tokens) + " tokens + " +
                                std::to_string(options.max_new_tokens) + " generated exceeds the model's context " +
                                std::to_string(model_ctx));
  }
  if (options.trials < 1)
    throw base::InvalidArgument("needle trials must be >= 1, got " + std::to_string(options.trials));
  if (options.depths.empty()) throw base::InvalidArgument("needle: no depth given");
  if (options.batch < 1) throw base::InvalidArgument("needle batch must be >= 1, got " + std::to_string(options.batch));
  std::mt19937_64 rng(options.seed);
  std::uniform_int_distribution<int> five_digits(10000, 99999);
  // Same prompts for every method: built once.
  std::vector<NeedlePrompt> prompts;
  for (double depth : options.depths) {
    for (int t = 0; t < options.trials; ++t) {
      prompts.push_back(
          build_needle_prompt(tokenizer, filler, depth, std::to_string(five_digits(rng)), options.prompt_tokens));
    }
  }
  std::vector<NeedleCell> cells;
  const auto total = static_cast<int64_t>(prompts.size() * methods.size());
  int64_t done = 0;
  for (const auto& method : methods) {
    for (std::size_t d = 0; d < options.depths.size(); ++d) {
      NeedleCell cell;
      cell.method = method.name;
      cell.depth = options.depths[d];
      for (int t = 0; t < options.trials; ++t) {
        const NeedlePrompt& p = prompts[d * static_cast<std::size_t>(options.trials) + static_cast<std::size_t>(t)];
        const auto generated =
            greedy_continue(model, tokenizer, p.tokens, method.make_caches, options.max_new_tokens, options.batch);
        std::string text;
        int32_t previous = p.tokens.back();
        for (int32_t tok : generated) {
          text += tokenizer.decode_token(previous, tok);
          previous = tok;
        }
        cell.answers.push_back(text);
        ++cell.trials;
        if (needle_answer_matches(text, p.answer)) ++cell.correct;
        if (options.on_prompt) options.on_prompt(++done, total);
      }
      cells.push_back(std::move(cell));
    }
  }
  return cells;
}

}  // namespace veloxquant::eval
