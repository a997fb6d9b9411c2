#include "lm/sampler.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <unordered_set>

#include "base/error.h"

namespace lm {

namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// Shortest round-trip-ish text for a float option value ("0.9", "-1", "nan").
std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

// Indices of the unmasked tokens sorted by descending logit, ties by ascending index.
std::vector<int32_t> ranked(std::span<const float> logits) {
  std::vector<int32_t> order;
  order.reserve(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] != kMasked) order.push_back(static_cast<int32_t>(i));
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  return order;
}

}  // namespace

void validate(const SamplerOptions& o) {
  if (!(o.temperature >= 0.0f) || !std::isfinite(o.temperature)) {
    throw base::InvalidArgument("temperature must be a finite number >= 0, got " + num(o.temperature));
  }
  if (o.top_k < 0) throw base::InvalidArgument("top_k must be >= 0 (0 = off), got " + std::to_string(o.top_k));
  if (!(o.top_p > 0.0f && o.top_p <= 1.0f)) {
    throw base::InvalidArgument("top_p must be in (0, 1] (1 = off), got " + num(o.top_p));
  }
  if (!(o.min_p >= 0.0f && o.min_p <= 1.0f)) {
    throw base::InvalidArgument("min_p must be in [0, 1] (0 = off), got " + num(o.min_p));
  }
  if (!(o.repetition_penalty > 0.0f) || !std::isfinite(o.repetition_penalty)) {
    throw base::InvalidArgument("repetition_penalty must be a finite number > 0 (1 = off), got " +
                                num(o.repetition_penalty));
  }
  if (o.repetition_context < 0) {
    throw base::InvalidArgument("repetition_context must be >= 0, got " + std::to_string(o.repetition_context));
  }
}

void apply_repetition_penalty(std::span<float> logits, std::span<const int32_t> history, float penalty, int context) {
  if (penalty == 1.0f || context <= 0 || history.empty()) return;
  const std::size_t n = std::min<std::size_t>(history.size(), static_cast<std::size_t>(context));
  std::unordered_set<int32_t> seen;
  for (std::size_t i = history.size() - n; i < history.size(); ++i) {
    const int32_t token = history[i];
    if (token < 0 || static_cast<std::size_t>(token) >= logits.size()) {
      throw base::InvalidArgument("repetition penalty: token id " + std::to_string(token) +
                                  " outside the vocabulary of " + std::to_string(logits.size()));
    }
    if (!seen.insert(token).second) continue;
    float& l = logits[static_cast<std::size_t>(token)];
    l = l < 0.0f ? l * penalty : l / penalty;
  }
}

void apply_top_k(std::span<float> logits, int k) {
  if (k <= 0 || static_cast<std::size_t>(k) >= logits.size()) return;
  // O(V): find the k-th largest value, keep everything above it and, among the tokens equal
  // to it, the lowest indices until k are kept (the same result as a stable ranking).
  std::vector<float> values(logits.begin(), logits.end());
  std::nth_element(values.begin(), values.begin() + (k - 1), values.end(), std::greater<float>());
  const float kth = values[static_cast<std::size_t>(k - 1)];
  int64_t ties_left = k;
  for (float l : logits) {
    if (l > kth) --ties_left;
  }
  for (float& l : logits) {
    if (l > kth) continue;
    if (l == kth && ties_left > 0) {
      --ties_left;
      continue;
    }
    l = kMasked;
  }
}

void apply_top_p(std::span<float> logits, float p) {
  if (p >= 1.0f || logits.empty()) return;
  const std::vector<double> probs = softmax(logits);
  const std::vector<int32_t> order = ranked(logits);
  // The crossing token is the first whose mass ranked strictly above it reaches p; it stays,
  // and the cut is by value (as mlx_lm's threshold): every token below its logit goes.
  double above = 0.0;
  float threshold = logits[order.back()];
  for (int32_t token : order) {
    if (above >= static_cast<double>(p)) break;
    threshold = logits[token];
    above += probs[token];
  }
  for (float& l : logits) {
    if (l < threshold) l = kMasked;
  }
}

void apply_min_p(std::span<float> logits, float min_p) {
  if (min_p <= 0.0f || logits.empty()) return;
  // p_i >= min_p * p_max  <=>  logit_i >= logit_max + log(min_p) (softmax normaliser cancels).
  const float top = logits[argmax(logits)];
  const double threshold = static_cast<double>(top) + std::log(static_cast<double>(min_p));
  for (float& l : logits) {
    if (static_cast<double>(l) < threshold) l = kMasked;
  }
}

int32_t argmax(std::span<const float> logits) {
  if (logits.empty()) throw base::InvalidArgument("argmax of an empty logits vector");
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

std::vector<double> softmax(std::span<const float> logits, float temperature) {
  std::vector<double> probs(logits.size(), 0.0);
  if (logits.empty()) return probs;
  const double top = logits[argmax(logits)];
  if (std::isinf(top) && top < 0) throw base::InvalidArgument("softmax: every logit is masked");
  double total = 0.0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (std::isinf(logits[i]) && logits[i] < 0) continue;
    probs[i] = std::exp((static_cast<double>(logits[i]) - top) / static_cast<double>(temperature));
    total += probs[i];
  }
  for (double& p : probs) p /= total;
  return probs;
}

int32_t sample_categorical(std::span<const double> probs, std::mt19937_64& rng) {
  if (probs.empty()) throw base::InvalidArgument("sample_categorical: empty distribution");
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
  double cumulative = 0.0;
  int32_t last_possible = -1;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0) continue;
    cumulative += probs[i];
    last_possible = static_cast<int32_t>(i);
    if (u < cumulative) return last_possible;
  }
  // Rounding left the total a hair under 1 and u above it: the last possible token.
  if (last_possible < 0) throw base::InvalidArgument("sample_categorical: distribution has no mass");
  return last_possible;
}

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) { validate(options_); }

std::vector<float> Sampler::filtered_logits(std::span<const float> logits, std::span<const int32_t> history) const {
  if (logits.empty()) throw base::InvalidArgument("sampler: empty logits vector");
  std::vector<float> l(logits.begin(), logits.end());
  for (float v : l) {
    if (std::isnan(v)) throw base::InvalidArgument("sampler: logits contain NaN");
  }
  apply_repetition_penalty(l, history, options_.repetition_penalty, options_.repetition_context);
  if (options_.temperature == 0.0f) return l;
  apply_top_p(l, options_.top_p);
  apply_min_p(l, options_.min_p);
  apply_top_k(l, options_.top_k);
  return l;
}

std::vector<double> Sampler::distribution(std::span<const float> logits, std::span<const int32_t> history) const {
  const std::vector<float> l = filtered_logits(logits, history);
  if (options_.temperature == 0.0f) {
    std::vector<double> one_hot(l.size(), 0.0);
    one_hot[static_cast<std::size_t>(argmax(l))] = 1.0;
    return one_hot;
  }
  return softmax(l, options_.temperature);
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
  if (options_.temperature == 0.0f) return argmax(filtered_logits(logits, history));
  const std::vector<double> probs = distribution(logits, history);
  return sample_categorical(probs, rng_);
}

}  // namespace lm
