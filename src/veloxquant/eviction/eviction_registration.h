#pragma once
// What every eviction method's registration shares (spec §2.3): servable, not trimmable (a trim
// cannot bring back evicted rows), fused attention through the shared driver, real compression
// (rows allocated once for the budget); the generic eviction_storage / eviction_scoring fields and
// the storage's bit width / value options. A method's own registration
// (eviction/methods/<name>_cache.cpp) starts from eviction_method() and adds its fields, policy
// and budget setter.
#include <memory>
#include <string>

#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant::eviction {

// name, family "eviction", capabilities, generic and borrowed fields, card
// docs/methods/<name>.md, cache_type_name and a make_restorable that builds a placeholder
// EvictionCache of that type name (from_state restores policy and storage from the meta).
MethodDescriptor eviction_method(std::string name, std::string cache_type_name);

// Appended to every eviction method's deviations: what this port adds to all of them.
extern const char* const kCompositionNote;

// Refuses an option that the original accepts but that changes nothing here (a GPU backend, a
// batching switch, a RoPE base for re-rotation nobody does): the default passes, anything else
// throws QuantizerConfigError "<field>=<value> has no effect here: <why>".
void refuse_without_effect(const std::string& field, const std::string& value, const std::string& accepted,
                           const std::string& why);
void refuse_without_effect(const std::string& field, double value, double accepted, const std::string& why);

}  // namespace veloxquant::eviction
