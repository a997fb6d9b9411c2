#pragma once
// Several caches timed in one process, for `veloxquant bench-host --methods`: the same rows as
// run_host_bench (host_bench.h says what one row times) for every cache, so that each method's
// tokens/s can be divided by the native cache's measured minutes apart on the same machine
// state, not in another process or another hour.
//
// Rounds alternate: round r times the first planned row for cache A, B, C, ..., then the next
// row for A, B, C, ..., and so on; --repeat rounds, the best (shortest) time of each phase kept.
// Machine noise (someone else's build) then hits every method of a row alike.
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lm/model.h"
#include "veloxquant/eval/decode_traffic.h"
#include "veloxquant/eval/host_bench.h"

namespace veloxquant::eval {

struct BenchCache {
  std::string label;                           // the --methods entry it came from; "none" = the host's native cache
  std::function<lm::CacheList()> make_caches;  // fresh caches for one run
};

struct MethodBenchRow {
  std::string label;
  HostBenchRow row;                               // best of the rounds, rates filled
  std::vector<std::pair<double, double>> rounds;  // (prefill, decode) seconds of every round, decode by
                                                  // the options' decode_statistic
  double spread = 0.0;  // slowest / fastest time of the row's phase (decode, or prefill on the prefill row)
  // This row's tokens/s over the baseline's ("none") at the same kind and ctx, measured in the
  // same rounds; nullopt when the run has no baseline.
  std::optional<double> decode_ratio;  // decode rows only
  std::optional<double> prefill_ratio;
  std::optional<DecodeTraffic> traffic;  // decode rows only, set by fill_traffic
};

// Rows ordered by planned row (the prefill row, then the contexts in the order given), and
// within one by cache in the order given. `on_run` of the options is called before every run
// with "LABEL: decode CTX" and the round. Throws base::InvalidArgument for an empty cache list,
// a cache without a factory, two caches with the same label, or what run_host_bench refuses.
std::vector<MethodBenchRow> run_host_bench_methods(const lm::Model& model, std::span<const int32_t> prompt,
                                                   const HostBenchOptions& options,
                                                   const std::vector<BenchCache>& caches);

// Sets decode_ratio / prefill_ratio of every row against the row labelled `baseline` with the
// same kind and ctx (the baseline's own ratios are 1). Rows without such a baseline, or whose
// baseline rate is 0, keep nullopt.
void fill_ratios(std::vector<MethodBenchRow>& rows, const std::string& baseline = "none");

// Sets `traffic` of every decode row: weight_bytes plus the row's KV bytes (the caches'
// nbytes() at its context) per token, over its measured time per token, and the share of the
// probe's streaming-read rate (probe_bytes_per_s <= 0: no probe, share 0).
void fill_traffic(std::vector<MethodBenchRow>& rows, std::size_t weight_bytes, double probe_bytes_per_s);

}  // namespace veloxquant::eval
