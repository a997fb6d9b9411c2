#pragma once
// The method registry: every method this build implements, looked up by name. The table
// itself is registry/method_table.cpp (explicit rows, not static self-registration, which a
// static library would silently drop at link time).
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The research quantizers with their own append/attend interface (spec §2.4, §4.4): refused by
// for_model and the patches, built only by KVCacheBuilder::build().
inline constexpr std::array<std::string_view, 5> STANDALONE_METHODS = {"turboquant_prod", "turboquant_mse", "polar",
                                                                       "qjl", "spectral"};
bool is_standalone_method(std::string_view name);

// Every registered method, servable ones first, then by name (the order `methods` prints).
const std::vector<MethodDescriptor>& method_registry();
// nullptr when unknown.
const MethodDescriptor* find_method(std::string_view name);
// Throws QuantizerConfigError "unknown method 'x'; valid methods: a, b, ..." when unknown.
const MethodDescriptor& require_method(std::string_view name);

std::vector<std::string> all_method_names();       // sorted
std::vector<std::string> servable_method_names();  // sorted

// A field the method accepts through --set: its own option or a generic field it reads.
// nullptr when the name is no field at all.
const FieldSpec* find_field(std::string_view name);
// True when `field` is one of the method's own options, generic fields or borrowed fields
// (issue #345: a field irrelevant to the chosen method is a warning, not an error).
bool field_relevant_to(const MethodDescriptor& method, std::string_view field);
// Whether `config` (of this method) reads bit_width_inlier: MethodDescriptor::reads_bit_width.
bool method_reads_bit_width(const MethodDescriptor& method, const KVCacheConfig& config);

}  // namespace veloxquant
