#include "veloxquant/eval/metric_accumulators.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"

namespace veloxquant::eval {

void PerplexityAccumulator::add(double log_prob) {
  const double nll = -log_prob;
  nll_sum_ += nll;
  nll_sq_sum_ += nll * nll;
  ++count_;
}

double PerplexityAccumulator::mean_nll() const {
  if (count_ == 0) throw base::InvalidArgument("perplexity: no token was scored");
  return nll_sum_ / static_cast<double>(count_);
}

double PerplexityAccumulator::perplexity() const { return std::exp(mean_nll()); }

double PerplexityAccumulator::perplexity_stderr() const {
  if (count_ < 2) return 0.0;
  const double n = static_cast<double>(count_);
  const double mean = nll_sum_ / n;
  const double variance = std::max(0.0, nll_sq_sum_ / n - mean * mean);
  return perplexity() * std::sqrt(variance / (n - 1.0));
}

void AgreementAccumulator::add(double kl, bool same_top1) {
  kl_sum_ += kl;
  max_kl_ = std::max(max_kl_, kl);
  if (same_top1) ++agree_;
  ++count_;
}

double AgreementAccumulator::mean_kl() const {
  if (count_ == 0) throw base::InvalidArgument("KL divergence: no position was compared");
  return kl_sum_ / static_cast<double>(count_);
}

double AgreementAccumulator::top1_percent() const {
  if (count_ == 0) throw base::InvalidArgument("top-1 agreement: no position was compared");
  return 100.0 * static_cast<double>(agree_) / static_cast<double>(count_);
}

}  // namespace veloxquant::eval
