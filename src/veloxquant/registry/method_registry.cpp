#include "veloxquant/registry/method_registry.h"

#include <algorithm>

#include "veloxquant/errors.h"

namespace veloxquant {

// Defined in method_table.cpp: the rows, one per method.
std::vector<MethodDescriptor> build_method_table();

bool is_standalone_method(std::string_view name) {
  return std::find(STANDALONE_METHODS.begin(), STANDALONE_METHODS.end(), name) != STANDALONE_METHODS.end();
}

const std::vector<MethodDescriptor>& method_registry() {
  static const std::vector<MethodDescriptor> table = [] {
    std::vector<MethodDescriptor> rows = build_method_table();
    // Servable first, then by name: the order the original's `methods` prints.
    std::sort(rows.begin(), rows.end(), [](const MethodDescriptor& a, const MethodDescriptor& b) {
      if (a.is_servable != b.is_servable) return a.is_servable;
      return a.name < b.name;
    });
    return rows;
  }();
  return table;
}

const MethodDescriptor* find_method(std::string_view name) {
  for (const MethodDescriptor& method : method_registry()) {
    if (method.name == name) return &method;
  }
  return nullptr;
}

std::vector<std::string> all_method_names() {
  std::vector<std::string> names;
  for (const MethodDescriptor& method : method_registry()) names.push_back(method.name);
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> servable_method_names() {
  std::vector<std::string> names;
  for (const MethodDescriptor& method : method_registry()) {
    if (method.is_servable) names.push_back(method.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

const MethodDescriptor& require_method(std::string_view name) {
  if (const MethodDescriptor* method = find_method(name)) return *method;
  std::string valid;
  for (const std::string& n : all_method_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw QuantizerConfigError("unknown method '" + std::string(name) + "'; valid methods: " + valid);
}

const FieldSpec* find_field(std::string_view name) {
  if (const FieldSpec* spec = find_generic_field(name)) return spec;
  for (const MethodDescriptor& method : method_registry()) {
    for (const FieldSpec& spec : method.fields) {
      if (spec.name == name) return &spec;
    }
  }
  return nullptr;
}

bool field_relevant_to(const MethodDescriptor& method, std::string_view field) {
  for (const FieldSpec& spec : method.fields) {
    if (spec.name == field) return true;
  }
  const auto names = [field](const std::vector<std::string>& list) {
    return std::find(list.begin(), list.end(), field) != list.end();
  };
  return names(method.generic_fields) || names(method.borrowed_fields);
}

bool method_reads_bit_width(const MethodDescriptor& method, const KVCacheConfig& config) {
  if (method.reads_bit_width) return method.reads_bit_width(config);
  return std::find(method.generic_fields.begin(), method.generic_fields.end(), "bit_width_inlier") !=
         method.generic_fields.end();
}

}  // namespace veloxquant
