#pragma once
// Running totals behind the reported figures. Kept separate from the runner so the
// arithmetic (what is averaged over what) is unit-tested on hand-computed values.
#include <cstdint>

namespace veloxquant::eval {

// Perplexity = exp(mean negative log-likelihood over scored targets), the definition
// llama.cpp's llama-perplexity uses, so baseline figures can be compared with its output.
class PerplexityAccumulator {
 public:
  // log_prob: natural-log probability the model gave to the true next token.
  void add(double log_prob);
  int64_t count() const { return count_; }
  double mean_nll() const;    // throws base::InvalidArgument when nothing was added
  double perplexity() const;  // exp(mean_nll)
  // llama.cpp's "± x": ppl * standard error of the mean NLL (sqrt(var/(n-1))); 0 for n < 2.
  double perplexity_stderr() const;

 private:
  double nll_sum_ = 0.0;
  double nll_sq_sum_ = 0.0;
  int64_t count_ = 0;
};

// KL(baseline || method) and greedy (top-1) agreement over compared positions.
class AgreementAccumulator {
 public:
  void add(double kl, bool same_top1);
  int64_t count() const { return count_; }
  double mean_kl() const;  // throws base::InvalidArgument when nothing was added
  double max_kl() const { return max_kl_; }
  double top1_percent() const;  // 100 * agreeing / compared

 private:
  double kl_sum_ = 0.0;
  double max_kl_ = 0.0;
  int64_t agree_ = 0;
  int64_t count_ = 0;
};

}  // namespace veloxquant::eval
