#pragma once
// Needle in a haystack: a fact ("The secret number is 48213.") placed at a chosen depth of a
// long filler text, the question at the end, the answer read by greedy decoding through the
// cache under test. A KV method that loses what it stored early (eviction, coarse quantization)
// fails at shallow depths first; exact-match accuracy per depth shows where.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lm/model.h"
#include "lm/tokenizer/tokenizer.h"

namespace veloxquant::eval {

struct NeedlePrompt {
  std::vector<int32_t> tokens;  // BOS (when the vocabulary adds one) + filler/needle + question
  std::string answer;           // the digits the model must produce
  double depth = 0.0;           // requested depth in [0, 1]
  // Where the needle sentence ended up, as a fraction of the haystack's characters.
  double actual_depth = 0.0;
};

// Builds a prompt of about `prompt_tokens` tokens: the first tokens of `filler`, the needle
// sentence inserted at the sentence boundary nearest to `depth` of the haystack (never inside
// a word), then the question "What is the secret number? The secret number is". Throws
// base::InvalidArgument when depth is outside [0, 1], the filler is empty, or prompt_tokens is
// too small to hold the needle and the question.
NeedlePrompt build_needle_prompt(const lm::Tokenizer& tokenizer, const std::string& filler, double depth,
                                 const std::string& secret, int64_t prompt_tokens);

// True when `generated` (the decoded continuation) starts, after spaces, with exactly the
// answer's digits (a longer number is wrong).
bool needle_answer_matches(const std::string& generated, const std::string& answer);

struct NeedleOptions {
  int64_t prompt_tokens = 1024;
  std::vector<double> depths = {0.0, 0.25, 0.5, 0.75, 1.0};
  int trials = 3;                                   // different secrets per depth
  uint64_t seed = 1234;                             // picks the secrets (5 digits)
  int max_new_tokens = 8;                           // greedy decode length
  int64_t batch = 512;                              // prompt tokens per forward call
  std::function<void(int64_t, int64_t)> on_prompt;  // progress: (prompts done, total)
};

struct NeedleCell {
  std::string method;
  double depth = 0.0;
  int correct = 0;
  int trials = 0;
  std::vector<std::string> answers;  // what was generated, per trial (for the report)
  double accuracy() const { return trials ? static_cast<double>(correct) / trials : 0.0; }
};

struct NeedleMethod {
  std::string name;
  std::function<lm::CacheList()> make_caches;
};

// Runs every (method, depth, trial); the same prompts for every method. Throws
// base::InvalidArgument when prompt_tokens + max_new_tokens exceeds the model's context,
// trials < 1 or no depth is given.
std::vector<NeedleCell> run_needle(const lm::Model& model, const lm::Tokenizer& tokenizer, const std::string& filler,
                                   const std::vector<NeedleMethod>& methods, const NeedleOptions& options);

// Greedy continuation of `prompt` with fresh caches from `make_caches` (stops at EOS).
std::vector<int32_t> greedy_continue(const lm::Model& model, const lm::Tokenizer& tokenizer,
                                     const std::vector<int32_t>& prompt,
                                     const std::function<lm::CacheList()>& make_caches, int max_new_tokens,
                                     int64_t batch);

}  // namespace veloxquant::eval
