#pragma once
// What the MoE family tests (hf_qwen3moe_test.cpp, hf_mixtral_test.cpp) add to hf_fixture.h.
//
// Routing is discontinuous: a perturbation of a layer's input (a quantized KV cache changes the
// attention output a little) can move a token's router across a near-tie between its k-th and
// (k+1)-th expert, and that token then runs a different expert — its logits move by O(1) while
// every other position moves by the perturbation's size. hf_fixture's production check bounds
// the maximum over all positions; these families bound instead how many positions move by more
// than a small threshold, so that a bug (which moves many positions) still fails.
#include <cmath>
#include <cstddef>

#include "hf_fixture.h"

namespace hf_moe {

// Positions of the passage whose logits (lm at production settings with `kv`, chunked prefill)
// differ from transformers' by more than `threshold` anywhere in the row.
inline int positions_moved(const hf_fixture::Fixture& f, lm::KVCacheType kv, double threshold) {
  const lm::LoadedModel m = hf_fixture::load_production(f, kv);
  const std::vector<float> ours = hf_fixture::forward_chunked(*m.model, f.tokens);
  EXPECT_EQ(ours.size(), f.logits.size());
  int moved = 0;
  for (std::size_t p = 0; p < f.tokens.size(); ++p) {
    double worst = 0.0;
    for (int v = 0; v < f.vocab; ++v) {
      const std::size_t i = p * static_cast<std::size_t>(f.vocab) + v;
      worst = std::max(worst, std::abs(static_cast<double>(ours[i]) - f.logits[i]));
    }
    if (worst > threshold) {
      std::cout << "[hf] " << f.family << " " << lm::kv_cache_type_name(kv) << " KV: position " << p << " moved by "
                << worst << std::endl;
      ++moved;
    }
  }
  return moved;
}

}  // namespace hf_moe
