#pragma once
// SqueezeAttention's per-layer budgets (spec §4.3 "SqueezeAttention", the original's
// quantizers/squeeze.py and cache/squeeze_coordinator.py): each attention layer reports how
// concentrated its first call's keys are; once every layer has reported, the average budget is
// reallocated toward layers whose keys spread out (broad attention needs more rows) and away from
// layers whose keys cluster.
//   concentration  mean off-diagonal cosine similarity of the rows normalised by |k| + 1e-8
//                  (0 below 2 rows); a layer's value is the mean over its (batch, kv head)s;
//   budgets        c clamped to [0, 1], raw = 1 - c, weights = raw * n / sum(raw) (all 1 when
//                  sum(raw) <= 0), budget = max(round(avg * ((1 - strength) + strength * w)),
//                  n_sink + 1) with Python's round; one layer: max(avg, n_sink + 1).
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "lm/tensor.h"

namespace veloxquant::eviction {

// One head's rows (rows x dim, f32).
double concentration_score(const float* keys, int64_t rows, int64_t dim);
// The mean over (batch, kv head) of a call's keys [B, H, S, D].
double layer_concentration(const lm::Tensor& keys);

// Throws QuantizerConfigError naming squeeze_strength when it lies outside [0, 1].
std::vector<int> squeeze_budgets(const std::vector<double>& concentrations, int average_budget, int n_sink,
                                 double strength);

// What the layers of one model share (one per for_model): the first report of each layer wins;
// when the last layer reports the schedule is resolved and frozen.
class SqueezeSchedule {
 public:
  SqueezeSchedule(std::size_t n_layers, int average_budget, int n_sink, double strength);
  void report(std::size_t layer, double concentration);
  // The layer's resolved budget, or nothing until every layer has reported.
  std::optional<int> budget(std::size_t layer) const;
  std::size_t n_layers() const { return reports_.size(); }

 private:
  mutable std::mutex mutex_;  // servers may clone caches; reports stay consistent
  int average_budget_, n_sink_;
  double strength_;
  std::vector<std::optional<double>> reports_;
  std::vector<int> budgets_;  // empty until resolved
};

}  // namespace veloxquant::eviction
