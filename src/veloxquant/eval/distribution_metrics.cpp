#include "veloxquant/eval/distribution_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "base/error.h"

namespace veloxquant::eval {

namespace {

// Returns log(sum_j exp(x_j - max)) and the max: log p_i = (x_i - max) - that. Keeping the
// max out of the sum means huge logits neither overflow exp nor swamp the small log term.
double shifted_log_sum_exp(std::span<const float> logits, double& max_out) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (float x : logits) max_logit = std::max(max_logit, static_cast<double>(x));
  max_out = max_logit;
  if (!std::isfinite(max_logit)) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0.0;
  for (float x : logits) sum += std::exp(static_cast<double>(x) - max_logit);
  return std::log(sum);
}

void require_row(std::span<const float> logits, const char* what) {
  if (logits.empty()) throw base::InvalidArgument(std::string(what) + ": empty logits row");
}

}  // namespace

void log_softmax(std::span<const float> logits, std::vector<double>& out) {
  require_row(logits, "log_softmax");
  double max_logit = 0.0;
  const double lse = shifted_log_sum_exp(logits, max_logit);
  out.resize(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) out[i] = (static_cast<double>(logits[i]) - max_logit) - lse;
}

double token_log_prob(std::span<const float> logits, int32_t token) {
  require_row(logits, "token_log_prob");
  if (token < 0 || static_cast<std::size_t>(token) >= logits.size()) {
    throw base::InvalidArgument("token_log_prob: token " + std::to_string(token) + " is outside the vocabulary of " +
                                std::to_string(logits.size()));
  }
  double max_logit = 0.0;
  const double lse = shifted_log_sum_exp(logits, max_logit);
  return (static_cast<double>(logits[static_cast<std::size_t>(token)]) - max_logit) - lse;
}

double kl_divergence(std::span<const float> reference_logits, std::span<const float> candidate_logits) {
  require_row(reference_logits, "kl_divergence");
  if (reference_logits.size() != candidate_logits.size()) {
    throw base::InvalidArgument("kl_divergence: rows differ in length (" + std::to_string(reference_logits.size()) +
                                " vs " + std::to_string(candidate_logits.size()) + ")");
  }
  double max_p = 0.0, max_q = 0.0;
  const double lse_p = shifted_log_sum_exp(reference_logits, max_p);
  const double lse_q = shifted_log_sum_exp(candidate_logits, max_q);
  // A method that produced NaN/inf logits is infinitely far from the baseline: say so
  // instead of averaging a NaN into the report.
  if (!std::isfinite(lse_q) || !std::isfinite(lse_p)) return std::numeric_limits<double>::infinity();
  double kl = 0.0;
  for (std::size_t i = 0; i < reference_logits.size(); ++i) {
    const double log_p = (static_cast<double>(reference_logits[i]) - max_p) - lse_p;
    const double log_q = (static_cast<double>(candidate_logits[i]) - max_q) - lse_q;
    const double p = std::exp(log_p);
    if (p > 0.0) kl += p * (log_p - log_q);
  }
  if (std::isnan(kl)) return std::numeric_limits<double>::infinity();
  return std::max(kl, 0.0);
}

int32_t argmax(std::span<const float> logits) {
  require_row(logits, "argmax");
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace veloxquant::eval
