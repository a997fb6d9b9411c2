#include "veloxquant/eval/host_bench.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "base/error.h"
#include "lm/stats.h"

namespace veloxquant::eval {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

int32_t argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

HostBenchRun time_host_run(const lm::Model& model, const std::function<lm::CacheList()>& make_caches,
                           std::span<const int32_t> prompt, int64_t decode_tokens, int64_t batch) {
  // Built outside the clocks, as llama.cpp's timings exclude context creation.
  lm::CacheList caches = make_caches();
  std::vector<float> logits;
  std::vector<int32_t> chunk;
  chunk.reserve(static_cast<std::size_t>(batch));
  HostBenchRun run;
  const auto prefill_start = Clock::now();
  for (std::size_t begin = 0; begin < prompt.size(); begin += static_cast<std::size_t>(batch)) {
    const std::size_t end = std::min(prompt.size(), begin + static_cast<std::size_t>(batch));
    chunk.assign(prompt.begin() + static_cast<std::ptrdiff_t>(begin),
                 prompt.begin() + static_cast<std::ptrdiff_t>(end));
    model.forward(chunk, caches, logits);
  }
  run.prefill_seconds = seconds_since(prefill_start);
  if (decode_tokens > 0) {
    std::vector<int32_t> step(1);
    // Sized before the clock starts: recording a step must not allocate inside the timed loop.
    run.decode_step_seconds.assign(static_cast<std::size_t>(decode_tokens), 0.0);
    const auto decode_start = Clock::now();
    for (std::size_t i = 0; i < run.decode_step_seconds.size(); ++i) {
      const auto step_start = Clock::now();
      step[0] = argmax(logits);
      model.forward(step, caches, logits);
      run.decode_step_seconds[i] = seconds_since(step_start);
    }
    run.decode_seconds = seconds_since(decode_start);
  }
  run.kv_bytes = lm::kv_bytes_resident(caches);
  return run;
}

DecodeStatistic parse_decode_statistic(const std::string& name) {
  if (name == "total") return DecodeStatistic::kTotal;
  if (name == "median") return DecodeStatistic::kMedianStep;
  throw base::InvalidArgument("--decode-stat must be 'total' or 'median', got '" + name + "'");
}

std::string decode_statistic_name(DecodeStatistic statistic) {
  return statistic == DecodeStatistic::kMedianStep ? "median" : "total";
}

double decode_seconds_by(const HostBenchRun& run, DecodeStatistic statistic) {
  if (statistic == DecodeStatistic::kTotal) return run.decode_seconds;
  std::vector<double> steps = run.decode_step_seconds;
  if (steps.empty()) return 0.0;
  const std::size_t mid = steps.size() / 2;
  std::nth_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(mid), steps.end());
  double median = steps[mid];
  if (steps.size() % 2 == 0) {
    // The lower middle value is the largest of the elements nth_element left before `mid`.
    median = 0.5 * (median + *std::max_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(mid)));
  }
  return median * static_cast<double>(steps.size());
}

std::vector<HostBenchRow> host_bench_plan(const HostBenchOptions& options) {
  std::vector<HostBenchRow> plan;
  if (options.prefill_tokens > 0) {
    HostBenchRow row;
    row.kind = "prefill";
    row.ctx = options.prefill_tokens;
    row.prefill_tokens = options.prefill_tokens;
    plan.push_back(row);
  }
  for (const int64_t ctx : options.contexts) {
    HostBenchRow row;
    row.kind = "decode";
    row.ctx = ctx;
    row.prefill_tokens = ctx - options.decode_tokens;
    row.decode_tokens = options.decode_tokens;
    plan.push_back(row);
  }
  return plan;
}

void fill_rates(HostBenchRow& row) {
  row.prefill_tokens_per_s =
      row.prefill_seconds > 0 ? static_cast<double>(row.prefill_tokens) / row.prefill_seconds : 0.0;
  row.decode_tokens_per_s = 0.0;
  row.decode_ms_per_token = 0.0;
  if (row.decode_tokens > 0 && row.decode_seconds > 0) {
    row.decode_tokens_per_s = static_cast<double>(row.decode_tokens) / row.decode_seconds;
    row.decode_ms_per_token = 1000.0 * row.decode_seconds / static_cast<double>(row.decode_tokens);
  }
}

namespace {

// Best of `repeat` runs: the shortest prefill and the shortest decode (each phase's best).
HostBenchRow time_row(const lm::Model& model, std::span<const int32_t> prompt_tokens, HostBenchRow row,
                      const HostBenchOptions& options) {
  const auto prompt = prompt_tokens.first(static_cast<std::size_t>(row.prefill_tokens));
  const auto make_caches = [&model] { return lm::make_prompt_cache(model); };
  const std::string label = row.kind + " " + std::to_string(row.ctx);
  for (int r = 0; r < options.repeat; ++r) {
    if (options.on_run) options.on_run(label, r);
    const HostBenchRun run = time_host_run(model, make_caches, prompt, row.decode_tokens, options.batch);
    if (r == 0 || run.prefill_seconds < row.prefill_seconds) row.prefill_seconds = run.prefill_seconds;
    const double decode_seconds = decode_seconds_by(run, options.decode_statistic);
    if (r == 0 || decode_seconds < row.decode_seconds) row.decode_seconds = decode_seconds;
    row.kv_bytes = run.kv_bytes;
  }
  fill_rates(row);
  return row;
}

}  // namespace

void validate_host_bench(const HostBenchOptions& options, int64_t context_length) {
  if (options.decode_tokens < 1) {
    throw base::InvalidArgument("--decode-tokens must be >= 1, got " + std::to_string(options.decode_tokens));
  }
  if (options.batch < 1) throw base::InvalidArgument("--batch must be >= 1, got " + std::to_string(options.batch));
  if (options.repeat < 1) throw base::InvalidArgument("--repeat must be >= 1, got " + std::to_string(options.repeat));
  if (options.prefill_tokens < 0) {
    throw base::InvalidArgument("--prefill must be >= 0, got " + std::to_string(options.prefill_tokens));
  }
  if (options.contexts.empty() && options.prefill_tokens == 0) {
    throw base::InvalidArgument("nothing to measure: --ctx is empty and --prefill is 0");
  }
  const auto beyond = [context_length](int64_t tokens) { return context_length > 0 && tokens > context_length; };
  for (const int64_t ctx : options.contexts) {
    if (ctx < 2) throw base::InvalidArgument("--ctx values must be >= 2, got " + std::to_string(ctx));
    if (beyond(ctx)) {
      throw base::InvalidArgument("--ctx " + std::to_string(ctx) + " is beyond the model's context length " +
                                  std::to_string(context_length));
    }
    // The row ends with ctx tokens cached, so the decode steps need a prompt before them.
    if (ctx <= options.decode_tokens) {
      throw base::InvalidArgument("--ctx " + std::to_string(ctx) + " leaves no prompt token before " +
                                  std::to_string(options.decode_tokens) +
                                  " decode steps (a row ends with ctx tokens cached; lower --decode-tokens)");
    }
  }
  if (beyond(options.prefill_tokens)) {
    throw base::InvalidArgument("--prefill " + std::to_string(options.prefill_tokens) +
                                " is beyond the model's context length " + std::to_string(context_length));
  }
}

std::vector<int32_t> cycle_tokens(std::span<const int32_t> source, int64_t count, std::optional<int32_t> bos) {
  if (source.empty()) throw base::InvalidArgument("no tokens to build a prompt from");
  std::vector<int32_t> out;
  out.reserve(static_cast<std::size_t>(std::max<int64_t>(count, 0)));
  // Repeats the text, not its BOS: a BOS in the middle would not be what a long prompt holds.
  std::size_t body_start = (bos && source.front() == *bos && source.size() > 1) ? 1 : 0;
  if (body_start == 1) out.push_back(source.front());
  for (std::size_t i = body_start; static_cast<int64_t>(out.size()) < count;) {
    out.push_back(source[i]);
    if (++i == source.size()) i = body_start;
  }
  out.resize(static_cast<std::size_t>(std::max<int64_t>(count, 0)));
  return out;
}

std::vector<int32_t> pattern_tokens(int64_t count, int32_t vocab_size, std::optional<int32_t> bos) {
  if (vocab_size < 1) throw base::InvalidArgument("vocab_size must be >= 1, got " + std::to_string(vocab_size));
  std::vector<int32_t> out;
  out.reserve(static_cast<std::size_t>(std::max<int64_t>(count, 0)));
  for (int64_t i = 0; i < count; ++i) {
    if (i == 0 && bos) {
      out.push_back(*bos);
      continue;
    }
    out.push_back(static_cast<int32_t>((7919 * i + 11) % vocab_size));
  }
  return out;
}

std::vector<HostBenchRow> run_host_bench(const lm::Model& model, std::span<const int32_t> prompt,
                                         const HostBenchOptions& options) {
  validate_host_bench(options, model.config().context_length);
  int64_t needed = options.prefill_tokens;
  for (const int64_t ctx : options.contexts) needed = std::max(needed, ctx);
  if (static_cast<int64_t>(prompt.size()) < needed) {
    throw base::InvalidArgument("the prompt holds " + std::to_string(prompt.size()) + " tokens, the runs need " +
                                std::to_string(needed));
  }
  std::vector<HostBenchRow> rows;
  for (const HostBenchRow& planned : host_bench_plan(options))
    rows.push_back(time_row(model, prompt, planned, options));
  return rows;
}

std::string cpu_description() {
  std::string name = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    // x86 says "model name", many ARM kernels only "CPU part"/"Hardware"; take the first.
    if (line.rfind("model name", 0) == 0 || line.rfind("Hardware", 0) == 0) {
      const auto colon = line.find(':');
      const auto value = colon == std::string::npos ? colon : line.find_first_not_of(" \t", colon + 1);
      if (value != std::string::npos) {
        name = line.substr(value);
        break;
      }
    }
  }
  return name + ", " + std::to_string(std::thread::hardware_concurrency()) + " hardware threads";
}

}  // namespace veloxquant::eval
