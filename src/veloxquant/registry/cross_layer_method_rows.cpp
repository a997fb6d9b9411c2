// Registry rows of the cross-layer methods (spec §4.3).
#include "veloxquant/registry/method_rows.h"

namespace veloxquant {

std::vector<MethodDescriptor> cross_layer_method_rows() { return {}; }

}  // namespace veloxquant
