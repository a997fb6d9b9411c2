// The method table of the cmake/tsan_eviction_caches.cmake build only (never part of the regular
// library): the eviction family's and the cross-layer family's registry rows, the same two
// functions the full table (src/veloxquant/registry/method_table.cpp) appends after its
// quantizers, so KVCacheBuilder builds these caches exactly as it does there. The full table also
// names every quantization cache and would link all of them.
#include <vector>

#include "veloxquant/registry/method_rows.h"

namespace veloxquant {

std::vector<MethodDescriptor> build_method_table() {
  std::vector<MethodDescriptor> rows = eviction_method_rows();
  for (MethodDescriptor& row : cross_layer_method_rows()) rows.push_back(std::move(row));
  return rows;
}

}  // namespace veloxquant
