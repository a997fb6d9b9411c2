#include "veloxquant/allocators/bit_allocation.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/error.h"

namespace veloxquant::allocators {

Allocation solve_bit_allocation(const std::vector<AllocationItem>& items, int64_t budget) {
  if (items.empty()) throw base::InvalidArgument("bit allocation: no items to allocate");
  int64_t g = 0;
  int64_t cheapest_total = 0, dearest_total = 0;
  for (const AllocationItem& item : items) {
    if (item.choices.empty()) throw base::InvalidArgument("bit allocation: item '" + item.name + "' has no choice");
    int64_t cheapest = std::numeric_limits<int64_t>::max(), dearest = 0;
    for (const BitChoice& c : item.choices) {
      if (c.cost < 0) {
        throw base::InvalidArgument("bit allocation: item '" + item.name + "' has a negative cost (" +
                                    std::to_string(c.cost) + ") at " + std::to_string(c.bits) + " bits");
      }
      if (!std::isfinite(c.loss)) {
        throw base::InvalidArgument("bit allocation: item '" + item.name + "' has a non-finite loss at " +
                                    std::to_string(c.bits) + " bits");
      }
      g = std::gcd(g, c.cost);
      cheapest = std::min(cheapest, c.cost);
      dearest = std::max(dearest, c.cost);
    }
    cheapest_total += cheapest;
    dearest_total += dearest;
  }
  if (cheapest_total > budget) {
    throw base::InvalidArgument("bit allocation: the cheapest choices take " + std::to_string(cheapest_total) +
                                " bytes per token, above the budget of " + std::to_string(budget));
  }
  // Costs in units of their gcd keep the table small (bytes of whole rows are multiples of 2+).
  if (g == 0) g = 1;
  // Budget beyond what the dearest choices cost buys nothing: the table stops there.
  const int64_t units = std::min(budget, dearest_total) / g;
  // The walk-back table holds one int32 per (item, cost unit): at most 2^26 of them (256 MiB).
  if (static_cast<double>(units + 1) * static_cast<double>(items.size()) > static_cast<double>(int64_t{1} << 26)) {
    throw base::InvalidArgument("bit allocation: budget " + std::to_string(budget) + " is " + std::to_string(units) +
                                " cost units over " + std::to_string(items.size()) +
                                " items; at most 2^26 (items x units) are supported");
  }
  const auto width = static_cast<std::size_t>(units + 1);
  const double inf = std::numeric_limits<double>::infinity();
  // best[u]: least loss of the items so far at total cost exactly u units; from[i][u]: the
  // choice of item i on that path (for the walk back).
  std::vector<double> best(width, inf), next(width);
  best[0] = 0.0;
  std::vector<std::vector<int32_t>> from(items.size(), std::vector<int32_t>(width, -1));
  for (std::size_t i = 0; i < items.size(); ++i) {
    std::fill(next.begin(), next.end(), inf);
    for (std::size_t u = 0; u < width; ++u) {
      if (best[u] == inf) continue;
      for (std::size_t c = 0; c < items[i].choices.size(); ++c) {
        const auto v = u + static_cast<std::size_t>(items[i].choices[c].cost / g);
        if (v >= width) continue;
        const double loss = best[u] + items[i].choices[c].loss;
        if (loss < next[v]) {
          next[v] = loss;
          from[i][v] = static_cast<int32_t>(c);
        }
      }
    }
    best.swap(next);
  }
  // The least loss over every total cost; ties go to the cheaper total (scanned upwards).
  std::size_t end = 0;
  for (std::size_t u = 0; u < width; ++u) {
    if (best[u] < best[end]) end = u;
  }
  Allocation out;
  out.choice.resize(items.size());
  out.loss = best[end];
  std::size_t u = end;
  for (std::size_t i = items.size(); i-- > 0;) {
    const auto c = static_cast<std::size_t>(from[i][u]);
    out.choice[i] = c;
    out.cost += items[i].choices[c].cost;
    u -= static_cast<std::size_t>(items[i].choices[c].cost / g);
  }
  return out;
}

}  // namespace veloxquant::allocators
