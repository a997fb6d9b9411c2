// The method table of the cmake/tsan_server.cmake build only (never part of the regular library):
// the rows `veloxquant serve`'s tests and the integration tests under TSan ask for (kivi,
// turboquant_block behind the q8/q5/q4/q3 presets, turboquant_rvq) and the eviction family's rows
// (h2o among them; eviction_registration.cpp registers all 16 at once), each the cache's own
// registry row, so KVCacheBuilder builds them exactly as the full table
// (src/veloxquant/registry/method_table.cpp) does. "none" is the host's own cache, no row.
#include <vector>

#include "veloxquant/caches/kivi_cache.h"
#include "veloxquant/caches/turboquant_block_cache.h"
#include "veloxquant/caches/turboquant_rvq_cache.h"
#include "veloxquant/registry/method_rows.h"

namespace veloxquant {

std::vector<MethodDescriptor> build_method_table() {
  std::vector<MethodDescriptor> rows = {kivi_method(), turboquant_block_method(), turboquant_rvq_method()};
  for (MethodDescriptor& row : eviction_method_rows()) rows.push_back(std::move(row));
  return rows;
}

}  // namespace veloxquant
