#include "veloxquant/cross_layer/segment_coordinator.h"

namespace veloxquant::cross_layer {

void throw_capacity_exceeded(const std::string& max_ctx_option, int group_id, int64_t live, int64_t max_ctx) {
  throw CrossLayerCapacityError(max_ctx_option + ": layer group " + std::to_string(group_id) + " would hold " +
                                std::to_string(live) + " live (published, not yet read) tokens, above " +
                                max_ctx_option + " = " + std::to_string(max_ctx) + ". Increase " + max_ctx_option +
                                " (or prefill in smaller chunks).");
}

}  // namespace veloxquant::cross_layer
