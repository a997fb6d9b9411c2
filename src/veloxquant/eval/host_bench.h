#pragma once
// The host's speed, measured the way llama-bench does it: prompt processing (prefill) and
// token generation (decode) tokens/s at several context lengths, best of R runs, each run on
// fresh caches from lm::make_prompt_cache (so a patched model times its compressed cache).
//
// One "decode" row at context L fills the caches to exactly L tokens: a prefill of
// L - decode_tokens prompt tokens (forward calls of `batch` tokens, like llama.cpp's
// n_batch), then decode_tokens greedy steps of one token each (forward + argmax, the token fed
// back). Ending at L, not L + decode_tokens, lets L be the model's full context length. The
// "prefill" row times prefill_tokens tokens from empty caches and decodes nothing.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "lm/model.h"

namespace veloxquant::eval {

// What a decode row's time is made of. kTotal: the wall clock of all its steps (llama-bench's
// measure). kMedianStep: the median step times the step count, which a few steps stalled by
// other work on a shared machine (a build, a scheduler pause) cannot move; on a quiet machine
// both agree within the steps' own spread.
enum class DecodeStatistic { kTotal, kMedianStep };

// "total" or "median" (the --decode-stat values); throws base::InvalidArgument naming the value
// and the choices for anything else.
DecodeStatistic parse_decode_statistic(const std::string& name);
std::string decode_statistic_name(DecodeStatistic statistic);

struct HostBenchOptions {
  std::vector<int64_t> contexts{128, 1024, 4096, 8192};
  int64_t decode_tokens = 32;
  int64_t prefill_tokens = 512;  // the fixed prefill row; 0 = no such row
  int64_t batch = 512;           // tokens per prefill forward call
  int repeat = 1;                // best of R (highest tokens/s) per row
  DecodeStatistic decode_statistic = DecodeStatistic::kTotal;
  // Called before each timed run with (row label, repeat index from 0), for progress lines.
  std::function<void(const std::string&, int)> on_run;
};

struct HostBenchRow {
  std::string kind;  // "prefill" or "decode"
  int64_t ctx = 0;   // tokens in the caches when the row ends
  int64_t prefill_tokens = 0;
  double prefill_seconds = 0.0;
  double prefill_tokens_per_s = 0.0;
  int64_t decode_tokens = 0;  // 0 on the prefill row
  double decode_seconds = 0.0;
  double decode_tokens_per_s = 0.0;
  double decode_ms_per_token = 0.0;
  std::size_t kv_bytes = 0;  // sum of the caches' nbytes() when the row ends
};

// One timed run: fresh caches from `make_caches`, `prompt` fed in forward calls of `batch`
// tokens, then `decode_tokens` greedy steps (argmax of the last logits fed back). Only the
// forward calls and the argmax are inside the clocks.
struct HostBenchRun {
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;              // all decode steps, one clock around them
  std::vector<double> decode_step_seconds;  // each step (forward + argmax) on its own clock
  std::size_t kv_bytes = 0;                 // sum of the caches' nbytes() at the end of the run
};
HostBenchRun time_host_run(const lm::Model& model, const std::function<lm::CacheList()>& make_caches,
                           std::span<const int32_t> prompt, int64_t decode_tokens, int64_t batch);

// The decode seconds one run contributes to its row under `statistic`: decode_seconds, or the
// median of decode_step_seconds times their count (0 when the run decoded nothing).
double decode_seconds_by(const HostBenchRun& run, DecodeStatistic statistic);

// A row to time, in run_host_bench's order: the prefill row (when prefill_tokens > 0), then one
// decode row per context. Only the counts; the times are filled in by whoever runs them.
std::vector<HostBenchRow> host_bench_plan(const HostBenchOptions& options);

// Sets the row's tokens/s and ms/token from its seconds and token counts (0 where a phase did
// not run or took no measurable time).
void fill_rates(HostBenchRow& row);

// Throws base::InvalidArgument naming the value when a context is < 2 or beyond
// context_length (0 = unlimited), a context leaves no prompt token before decode_tokens
// steps, decode_tokens < 1, prefill_tokens < 0 or beyond context_length, batch < 1 or
// repeat < 1.
void validate_host_bench(const HostBenchOptions& options, int64_t context_length);

// `count` prompt tokens: `source` repeated end to end as often as needed (its first token,
// a BOS, kept only at the start). Throws base::InvalidArgument when source is empty.
std::vector<int32_t> cycle_tokens(std::span<const int32_t> source, int64_t count, std::optional<int32_t> bos);

// The fixed token pattern used when no text is given: bos (when set) then
// (7919 * i + 11) mod vocab_size for i = 1, 2, ... — tokenizer-free, so another engine can
// rebuild the exact ids. The ids' values do not change the work a forward does.
std::vector<int32_t> pattern_tokens(int64_t count, int32_t vocab_size, std::optional<int32_t> bos);

// Rows in order: the prefill row (when prefill_tokens > 0), then one decode row per context.
// `prompt` must hold at least max(contexts, prefill_tokens) tokens. Validates first.
std::vector<HostBenchRow> run_host_bench(const lm::Model& model, std::span<const int32_t> prompt,
                                         const HostBenchOptions& options);

// "model name" of /proc/cpuinfo ("unknown" where unavailable), with the hardware thread count.
std::string cpu_description();

}  // namespace veloxquant::eval
