#include "veloxquant/eval/eval_runner.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "base/error.h"
#include "veloxquant/eval/distribution_metrics.h"
#include "veloxquant/eval/metric_accumulators.h"
#include "veloxquant/eval/process_memory.h"
#include "veloxquant/eval/window_plan.h"

namespace veloxquant::eval {

namespace {

using Clock = std::chrono::steady_clock;

// Per set of caches, summed over windows.
struct SideTotals {
  PerplexityAccumulator ppl;
  AgreementAccumulator agreement;
  double seconds = 0.0;
  double bytes_per_token_sum = 0.0;
};

std::size_t total_nbytes(const lm::CacheList& caches) {
  std::size_t total = 0;
  for (const auto& cache : caches) {
    if (cache) total += cache->nbytes();
  }
  return total;
}

void validate(const lm::Model& model, const std::vector<MethodUnderTest>& methods, const EvalOptions& options) {
  const int64_t model_ctx = model.config().context_length;
  if (model_ctx > 0 && options.ctx > model_ctx) {
    throw base::InvalidArgument("ctx " + std::to_string(options.ctx) + " exceeds the model's context length " +
                                std::to_string(model_ctx));
  }
  if (options.batch < 1) {
    throw base::InvalidArgument("batch must be >= 1 token per forward call, got " + std::to_string(options.batch));
  }
  for (const auto& method : methods) {
    if (!method.make_caches) throw base::InvalidArgument("method '" + method.name + "' has no cache factory");
  }
}

// Forward one batch and return the seconds it took; the logits land in `rows`.
double timed_forward(const lm::Model& model, const std::vector<int32_t>& batch, lm::CacheList& caches,
                     std::vector<float>& last, std::vector<float>& rows) {
  const auto start = Clock::now();
  model.forward(batch, caches, last, &rows);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

SideResult finish(const std::string& name, const SideTotals& totals, int64_t n_fed, int64_t n_windows,
                  bool with_agreement) {
  SideResult r;
  r.name = name;
  r.ppl = totals.ppl.perplexity();
  r.ppl_stderr = totals.ppl.perplexity_stderr();
  r.forward_seconds = totals.seconds;
  r.tok_per_s = totals.seconds > 0.0 ? static_cast<double>(n_fed) / totals.seconds : 0.0;
  r.kv_bytes_per_token = totals.bytes_per_token_sum / static_cast<double>(n_windows);
  if (with_agreement) {
    r.kld = totals.agreement.mean_kl();
    r.kld_max = totals.agreement.max_kl();
    r.top1_agreement = totals.agreement.top1_percent();
  }
  return r;
}

// One target a method predicted, beside the baseline's row: its log-probability when the
// target is scored, KL and top-1 agreement when it is compared.
void add_method_target(SideTotals& totals, std::span<const float> base_row, std::span<const float> row,
                       int32_t target_token, bool scored, bool compared) {
  if (scored) totals.ppl.add(token_log_prob(row, target_token));
  if (compared) totals.agreement.add(kl_divergence(base_row, row), argmax(base_row) == argmax(row));
}

}  // namespace

EvalRun run_evaluation(const lm::Model& model, std::span<const int32_t> tokens, std::optional<int32_t> bos,
                       const std::vector<MethodUnderTest>& methods, const EvalOptions& options) {
  validate(model, methods, options);
  const auto n_tokens = static_cast<int64_t>(tokens.size());
  const std::vector<EvalWindow> windows =
      options.chunking == Chunking::kLlama
          ? plan_llama_chunks(n_tokens, options.ctx, options.max_chunks, options.tail)
          : plan_sliding_windows(n_tokens, options.ctx, options.stride == 0 ? options.ctx : options.stride,
                                 options.tail);
  if (windows.empty()) throw base::InvalidArgument("no evaluation window fits the text");
  reset_peak_rss();

  const auto vocab = static_cast<std::size_t>(model.config().vocab_size);
  SideTotals baseline;
  std::vector<SideTotals> method_totals(methods.size());
  std::vector<float> last, base_rows, method_rows;
  std::vector<int32_t> input, batch;
  EvalRun run;
  run.ctx = options.ctx;
  run.n_text_tokens = n_tokens;

  for (std::size_t wi = 0; wi < windows.size(); ++wi) {
    const EvalWindow& w = windows[wi];
    input.assign(tokens.begin() + w.begin, tokens.begin() + w.end);
    if (w.first_token_is_bos && bos) input.front() = *bos;

    lm::CacheList base_caches = model.native_make_cache();
    std::vector<lm::CacheList> caches(methods.size());
    for (std::size_t m = 0; m < methods.size(); ++m) caches[m] = methods[m].make_caches();

    for (int64_t b0 = 0; b0 < w.size(); b0 += options.batch) {
      const int64_t b1 = std::min(w.size(), b0 + options.batch);
      batch.assign(input.begin() + b0, input.begin() + b1);
      baseline.seconds += timed_forward(model, batch, base_caches, last, base_rows);
      if (base_rows.size() != batch.size() * vocab) {
        throw base::Unsupported("model returned " + std::to_string(base_rows.size()) + " logits for " +
                                std::to_string(batch.size()) + " tokens x vocab " + std::to_string(vocab));
      }
      // Row r of this batch sits at absolute position p = w.begin + b0 + r and predicts
      // target p + 1 (window_plan.h).
      auto for_each_target = [&](auto&& fn) {
        for (int64_t r = 0; r < b1 - b0; ++r) {
          const int64_t target = w.begin + b0 + r + 1;
          if (target >= w.end) break;
          fn(r, target);
        }
      };
      for_each_target([&](int64_t r, int64_t target) {
        if (target < w.score_begin) return;
        const std::span<const float> row(base_rows.data() + r * vocab, vocab);
        baseline.ppl.add(token_log_prob(row, tokens[target]));
      });
      for (std::size_t m = 0; m < methods.size(); ++m) {
        method_totals[m].seconds += timed_forward(model, batch, caches[m], last, method_rows);
        for_each_target([&](int64_t r, int64_t target) {
          add_method_target(method_totals[m], std::span<const float>(base_rows.data() + r * vocab, vocab),
                            std::span<const float>(method_rows.data() + r * vocab, vocab), tokens[target],
                            target >= w.score_begin, target >= w.compare_begin);
        });
      }
    }
    const double fed = static_cast<double>(w.size());
    baseline.bytes_per_token_sum += static_cast<double>(total_nbytes(base_caches)) / fed;
    for (std::size_t m = 0; m < methods.size(); ++m) {
      method_totals[m].bytes_per_token_sum += static_cast<double>(total_nbytes(caches[m])) / fed;
    }
    run.n_fed += w.size();
    run.n_scored += w.scored();
    run.n_compared += w.compared();
    if (options.on_window) options.on_window(static_cast<int64_t>(wi + 1), static_cast<int64_t>(windows.size()));
  }

  run.n_windows = static_cast<int64_t>(windows.size());
  run.baseline = finish("baseline", baseline, run.n_fed, run.n_windows, /*with_agreement=*/false);
  for (std::size_t m = 0; m < methods.size(); ++m) {
    run.methods.push_back(finish(methods[m].name, method_totals[m], run.n_fed, run.n_windows, true));
  }
  run.peak_rss_bytes = peak_rss_bytes();
  return run;
}

}  // namespace veloxquant::eval
