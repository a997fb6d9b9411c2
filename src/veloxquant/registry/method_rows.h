#pragma once
// The registry rows, by family file: method_table.cpp (quantizers), eviction_method_rows.cpp
// (token eviction), cross_layer_method_rows.cpp (layers sharing state). build_method_table()
// concatenates them in this order.
#include <vector>

#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

std::vector<MethodDescriptor> eviction_method_rows();
std::vector<MethodDescriptor> cross_layer_method_rows();

}  // namespace veloxquant
