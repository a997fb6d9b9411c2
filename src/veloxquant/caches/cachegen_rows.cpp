#include "veloxquant/caches/cachegen_rows.h"

#include <algorithm>

#include "veloxquant/caches/cachegen_cache.h"

namespace veloxquant {

CachegenRows::CachegenRows(const CachegenCache& cache)
    : attention::DecodedRunRows(cache.dk_, cache.dv_, cache.offset_, cache.frontier_, cache.tail_k_, cache.tail_v_),
      cache_(cache) {}

int64_t CachegenRows::decode_run(int64_t b, int64_t h, int64_t a, int64_t end, bool keys,
                                 attention::TileScratch& scratch, const float** rows) const {
  const int64_t group = cache_.group_, d = keys ? cache_.dk_ : cache_.dv_;
  const int64_t block = a / group;
  float* decoded = scratch.f32(static_cast<std::size_t>(group * d));
  cache_.decode_record(block, b, h, keys ? 0 : 1, decoded);
  *rows = decoded + (a - block * group) * d;
  return std::min(end, (block + 1) * group);
}

}  // namespace veloxquant
