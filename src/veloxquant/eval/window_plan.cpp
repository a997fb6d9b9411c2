#include "veloxquant/eval/window_plan.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"

namespace veloxquant::eval {

namespace {

void check_common(int64_t n_tokens, int64_t ctx, double tail) {
  if (ctx < 2) {
    throw base::InvalidArgument("ctx must be at least 2 tokens (one to read, one to predict), got " +
                                std::to_string(ctx));
  }
  if (!(tail > 0.0 && tail <= 1.0)) {
    throw base::InvalidArgument(
        "tail must be in (0, 1] (fraction of each window where KL/top-1 "
        "are measured), got " +
        std::to_string(tail));
  }
  if (n_tokens < ctx) {
    throw base::InvalidArgument("the text has " + std::to_string(n_tokens) + " tokens, fewer than one window of ctx " +
                                std::to_string(ctx));
  }
}

// Last ceil(tail * ctx) targets of the window, never before the first scored target.
int64_t compare_start(const EvalWindow& w, int64_t ctx, double tail) {
  const auto tail_targets = static_cast<int64_t>(std::ceil(tail * static_cast<double>(ctx) - 1e-9));
  return std::max(w.score_begin, w.end - tail_targets);
}

}  // namespace

std::vector<EvalWindow> plan_sliding_windows(int64_t n_tokens, int64_t ctx, int64_t stride, double tail) {
  check_common(n_tokens, ctx, tail);
  if (stride < 1 || stride > ctx) {
    throw base::InvalidArgument("stride must be in [1, ctx=" + std::to_string(ctx) + "], got " +
                                std::to_string(stride));
  }
  std::vector<EvalWindow> windows;
  int64_t scored_until = 0;  // targets < scored_until are already counted
  for (int64_t begin = 0; begin + ctx <= n_tokens; begin += stride) {
    EvalWindow w;
    w.begin = begin;
    w.end = begin + ctx;
    w.score_begin = std::max(begin + 1, scored_until);
    w.compare_begin = compare_start(w, ctx, tail);
    scored_until = w.end;
    windows.push_back(w);
  }
  return windows;
}

std::vector<EvalWindow> plan_llama_chunks(int64_t n_tokens, int64_t ctx, int64_t max_chunks, double tail) {
  check_common(n_tokens, ctx, tail);
  if (max_chunks < 0) {
    throw base::InvalidArgument("--chunks must be >= 0 (0 = all), got " + std::to_string(max_chunks));
  }
  int64_t n_chunks = n_tokens / ctx;
  if (max_chunks > 0) n_chunks = std::min(n_chunks, max_chunks);
  std::vector<EvalWindow> windows;
  windows.reserve(static_cast<std::size_t>(n_chunks));
  for (int64_t i = 0; i < n_chunks; ++i) {
    EvalWindow w;
    w.begin = i * ctx;
    w.end = w.begin + ctx;
    w.first_token_is_bos = true;
    w.score_begin = w.begin + ctx / 2 + 1;
    w.compare_begin = compare_start(w, ctx, tail);
    windows.push_back(w);
  }
  return windows;
}

}  // namespace veloxquant::eval
