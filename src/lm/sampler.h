#pragma once
// lm::Sampler — picks the next token from a logits vector.
//
// The chain is mlx_lm's (make_logits_processors + make_sampler), each step a pure function:
//   1. repetition penalty on the raw logits over the last `repetition_context` tokens of the
//      history (prompt + generated): a positive logit is divided by the penalty, a negative
//      one multiplied (CTRL rule; each distinct token penalised once);
//   2. temperature 0 -> greedy: the arg-max (lowest index among ties);
//   3. top-p over the full softmax: keep the smallest set of most likely tokens whose mass
//      reaches p — the token that crosses p is kept, and so is every token tied with it;
//   4. min-p: keep tokens whose probability is >= min_p * the largest probability;
//   5. top-k: keep the k largest logits (ties broken by lower index);
//   6. softmax(logits / temperature) over the survivors and one draw.
// Masked tokens get -inf. (llama.cpp orders top-k before top-p, which renormalises over the
// top-k survivors and can keep fewer tokens; we follow mlx_lm, the host this project mirrors.)
// tools/make_sampler_fixtures.py records mlx_lm's own masks and probabilities for the tests.
//
// Randomness: std::mt19937_64 seeded with `seed`; one draw consumes exactly one 64-bit output
// u = (x >> 11) * 2^-53 in [0, 1) and picks the first token whose cumulative probability (in
// token-index order) exceeds u. std::mt19937_64's sequence is fixed by the C++ standard, so a
// seed gives the same tokens on every platform and standard library.
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace lm {

struct SamplerOptions {
  float temperature = 0.0f;         // 0 = greedy
  int top_k = 0;                    // 0 = off
  float top_p = 1.0f;               // 1 = off; (0, 1]
  float min_p = 0.0f;               // 0 = off; [0, 1]
  float repetition_penalty = 1.0f;  // 1 = off; > 0
  int repetition_context = 64;      // how many of the latest tokens are penalised; >= 0
  uint64_t seed = 0;
};

// Throws base::InvalidArgument naming the field and the value.
void validate(const SamplerOptions& options);

// The pure steps (in place on a logits vector; masked entries become -inf).
void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> history, float penalty, int context);
void apply_top_k(std::span<float> logits, int k);
void apply_top_p(std::span<float> logits, float p);
void apply_min_p(std::span<float> logits, float min_p);
// Index of the largest logit, lowest index among ties. Throws on an empty vector.
int32_t argmax(std::span<const float> logits);
// softmax(logits / temperature) in double; -inf entries get probability 0.
std::vector<double> softmax(std::span<const float> logits, float temperature = 1.0f);
// One draw from `probs` (must sum to ~1) using one output of `rng` (see the header comment).
int32_t sample_categorical(std::span<const double> probs, std::mt19937_64& rng);

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);  // validates

  // The next token given the logits of the last position and the history so far.
  int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
  // The distribution step 6 would draw from (after every mask), for tests and diagnostics.
  // Greedy options give a one-hot vector on the arg-max.
  std::vector<double> distribution(std::span<const float> logits, std::span<const int32_t> history) const;

  const SamplerOptions& options() const { return options_; }

 private:
  std::vector<float> filtered_logits(std::span<const float> logits, std::span<const int32_t> history) const;

  SamplerOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace lm
