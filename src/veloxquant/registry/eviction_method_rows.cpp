// Registry rows of the token-eviction methods (spec §2.3, §6).
#include "veloxquant/registry/method_rows.h"

namespace veloxquant {

std::vector<MethodDescriptor> eviction_method_rows() { return {}; }

}  // namespace veloxquant
