#pragma once
// The Markdown table of bench-methods: one row per (method, setting), sorted by KV bytes per
// token (smallest first), with the host's native cache as the first reference row.
#include <string>
#include <vector>

#include "veloxquant/eval/eval_record.h"

namespace veloxquant::eval {

// Columns: method, bits, settings, KV bytes/token, x smaller than the baseline, KL (mean and
// max), top-1 %, PPL (and delta to the baseline), tok/s (method / baseline). Throws
// base::InvalidArgument on an empty list.
std::string markdown_results_table(std::vector<EvalRecord> records);

// Rows sorted by bytes/token, ties by KL then method name (the table's order).
std::vector<EvalRecord> sorted_by_bytes(std::vector<EvalRecord> records);

// "%.3g"-like formatting that keeps small KL values readable (1.23e-05) and prints "inf" for
// non-finite values.
std::string format_metric(double value);

}  // namespace veloxquant::eval
