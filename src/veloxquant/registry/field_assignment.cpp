#include "veloxquant/registry/field_assignment.h"

#include "veloxquant/errors.h"
#include "veloxquant/registry/method_registry.h"

namespace veloxquant {

std::optional<std::string> apply_field_assignment(KVCacheConfig& config, std::string_view assignment) {
  const std::size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    throw QuantizerConfigError("--set expects FIELD=VALUE, got '" + std::string(assignment) + "'");
  }
  const std::string name(assignment.substr(0, eq));
  const std::string_view text = assignment.substr(eq + 1);
  if (name == "method") {
    throw QuantizerConfigError("--set method=... is refused; choose the method with --method");
  }
  const FieldSpec* spec = find_field(name);
  if (!spec) {
    throw QuantizerConfigError("unknown config field '" + name + "' in --set " + std::string(assignment));
  }
  const FieldValue value = parse_field_value(*spec, text);
  check_field_bounds(*spec, value);
  spec->set(config, value);
  const MethodDescriptor* method = find_method(config.method);
  if (method && !field_relevant_to(*method, name)) {
    return "field '" + name + "' is not read by method '" + config.method + "'; it has no effect";
  }
  return std::nullopt;
}

}  // namespace veloxquant
