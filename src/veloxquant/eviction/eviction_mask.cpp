#include "veloxquant/eviction/eviction_mask.h"

#include "base/error.h"

namespace veloxquant::eviction {

lm::AttentionMask positional_mask(const std::vector<std::vector<int64_t>>& key_positions, int64_t first_query,
                                  int64_t n_queries, std::optional<int64_t> window) {
  if (key_positions.empty()) throw base::InvalidArgument("positional_mask: no batch elements");
  const int64_t batch = static_cast<int64_t>(key_positions.size());
  const int64_t t = static_cast<int64_t>(key_positions[0].size());
  lm::Tensor mask({batch, 1, n_queries, t}, lm::DType::U8);
  uint8_t* m = mask.data<uint8_t>();
  for (int64_t b = 0; b < batch; ++b) {
    if (static_cast<int64_t>(key_positions[static_cast<std::size_t>(b)].size()) != t) {
      throw base::InvalidArgument("positional_mask: batch elements hold different row counts");
    }
    for (int64_t i = 0; i < n_queries; ++i) {
      const int64_t q = first_query + i;
      for (int64_t j = 0; j < t; ++j) {
        const int64_t k = key_positions[static_cast<std::size_t>(b)][static_cast<std::size_t>(j)];
        const bool visible = k <= q && (!window || q < k + *window);
        m[(b * n_queries + i) * t + j] = visible ? 1 : 0;
      }
    }
  }
  return {lm::AttentionMask::Kind::kExplicit, std::move(mask)};
}

}  // namespace veloxquant::eviction
