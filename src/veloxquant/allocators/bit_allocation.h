#pragma once
// Bit allocation under a byte budget (the original's RateQuant allocator produces a per-layer
// bit_width_inlier list; issue 17). Each item (one attention layer's keys, or its values) picks
// one of its choices, each with a cost in bytes per token and a measured loss (the KL increase
// when that item alone is quantized at those bits). The allocation minimises the sum of the
// losses with the sum of the costs within the budget: a multiple-choice knapsack, solved exactly
// by dynamic programming over integer costs. Summing losses assumes the items' errors add up,
// which holds to first order for small errors; allocate-bits measures the result to check it.
#include <cstdint>
#include <string>
#include <vector>

namespace veloxquant::allocators {

struct BitChoice {
  int bits = 0;
  int64_t cost = 0;   // bytes per token (>= 0)
  double loss = 0.0;  // e.g. KL increase in nats (any finite value)
};

struct AllocationItem {
  std::string name;  // "layer 3 keys"; for messages
  std::vector<BitChoice> choices;
};

struct Allocation {
  std::vector<std::size_t> choice;  // index into each item's choices
  int64_t cost = 0;
  double loss = 0.0;
};

// The exact minimum of the summed loss with summed cost <= budget; among allocations of equal
// loss the cheaper one. Throws base::InvalidArgument when there is no item, an item has no
// choice, a cost is negative, a loss is not finite, or even the cheapest choices exceed the
// budget (the message gives both figures). Time and memory O(items x choices x budget / g),
// g the greatest common divisor of the costs; above 2^26 (items x budget / g) it is refused.
Allocation solve_bit_allocation(const std::vector<AllocationItem>& items, int64_t budget);

}  // namespace veloxquant::allocators
