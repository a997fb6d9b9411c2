#pragma once
// One evaluated (method, setting) as a flat record: what `eval --json` prints, one element of
// bench-methods' results.json, one row of its table and one point of its plot.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "veloxquant/eval/eval_runner.h"

namespace veloxquant::eval {

struct EvalRecord {
  std::string model;     // path as given
  std::string method;    // registry name, "none" = the host's native cache against itself
  std::string bits;      // as given ("" = the method's default)
  std::string settings;  // --set assignments, comma-joined ("" when none)
  std::string chunking;  // "sliding" or "llama"
  int64_t ctx = 0;
  int64_t stride = 0;
  double tail = 1.0;
  int64_t batch = 0;
  int64_t n_windows = 0;
  int64_t n_text_tokens = 0;
  int64_t n_tokens = 0;    // scored targets (the perplexity's denominator)
  int64_t n_compared = 0;  // positions in KL / top-1
  double ppl = 0.0;
  double ppl_stderr = 0.0;
  double ppl_baseline = 0.0;
  double ppl_baseline_stderr = 0.0;
  double kld = 0.0;
  double kld_max = 0.0;
  double top1_agreement = 0.0;
  double kv_bytes_per_token = 0.0;
  double kv_bytes_per_token_baseline = 0.0;
  double tok_per_s = 0.0;
  double tok_per_s_baseline = 0.0;
  int64_t peak_rss_bytes = 0;
};

struct RecordLabels {
  std::string model, method, bits, settings;
};

// Flattens method `method_index` of `run` (options echo the run's settings).
EvalRecord make_record(const EvalRun& run, std::size_t method_index, const EvalOptions& options,
                       const RecordLabels& labels);

// The keys of issue #5 (ppl, ppl_baseline, kld, top1_agreement, kv_bytes_per_token,
// kv_bytes_per_token_baseline, peak_rss_bytes, tok_per_s, tok_per_s_baseline, method, bits,
// model, ctx, n_tokens) plus the settings and uncertainties that make the figure reproducible.
// Non-finite numbers (a method whose logits went NaN) are written as null.
nlohmann::json to_json(const EvalRecord& record);
// Reads what to_json wrote (bench-methods re-renders tables from results.json).
EvalRecord record_from_json(const nlohmann::json& json);

const char* chunking_name(Chunking chunking);
// "sliding" or "llama" (the --chunking flag); base::InvalidArgument naming the value otherwise.
Chunking parse_chunking(const std::string& name);

}  // namespace veloxquant::eval
