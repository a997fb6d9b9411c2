#pragma once
// The check every compressed cache's test makes of its fused attention: two caches of the same
// configuration fed the same chunks, one attending over its own codes (fused_attention), the
// other returning its rows (update_and_fetch) to the plain reference attention. Each method test
// used to write this loop out; the tolerance and what the chunks hold stay with the test.
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "lm/cache/cache.h"
#include "support/kv_test_data.h"
#include "support/reference_attention.h"

namespace test_support {

// Rows [1, heads, n, d] of a chunk, from a seed.
using RowMaker = std::function<lm::Tensor(int64_t heads, int64_t n, int64_t d, uint64_t seed)>;

inline lm::Tensor random_rows(int64_t heads, int64_t n, int64_t d, uint64_t seed) {
  return random_kv(1, heads, n, d, seed, lm::DType::F32);
}

// Feeds both caches `chunks` (prefill, then decode steps); per chunk the keys, values and
// q_heads queries are made from seed, seed + 1, seed + 2 (then the next three), and the scale is
// 1/8. Returns the largest |fused - reference| of each chunk's output.
inline std::vector<float> fused_vs_fetched(lm::KVCache& fused, lm::KVCache& plain, int64_t heads, int64_t q_heads,
                                           int64_t d, const std::vector<int64_t>& chunks, uint64_t seed,
                                           const RowMaker& keys = random_rows, const RowMaker& values = random_rows) {
  std::vector<float> worst;
  int64_t first = 0;
  for (int64_t n : chunks) {
    const lm::Tensor k = keys(heads, n, d, seed++);
    const lm::Tensor v = values(heads, n, d, seed++);
    const lm::Tensor q = random_kv(1, q_heads, n, d, seed++, lm::DType::F32);
    lm::Tensor out({1, q_heads, n, d}, lm::DType::F32);
    const float scale = 0.125f;
    fused.fused_attention({&q, &k, &v, scale, std::nullopt}, out);
    const std::vector<float> want =
        reference_attention(plain.update_and_fetch(k, v), q.to_f32(), q_heads, n, first, scale);
    const std::vector<float> got = out.to_f32();
    float w = 0;
    for (std::size_t i = 0; i < want.size(); ++i) w = std::max(w, std::fabs(got[i] - want[i]));
    worst.push_back(w);
    first += n;
  }
  return worst;
}

}  // namespace test_support
