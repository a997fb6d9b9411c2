#pragma once
// What `veloxquant methods` prints, built from the registry alone (so the CLI stays a thin
// parse-and-print layer and the JSON contract is testable from the library).
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace veloxquant {

struct MethodFilter {
  bool servable_only = false;
  std::optional<std::string> family;  // "quantization" | "eviction" | "hybrid"
};

// Throws QuantizerConfigError when the family is none of the three labels.
void check_family_name(const std::string& family);

// {"schema_version": 1, "default_serve_method": "turboquant_rvq", "methods": [ {name, family,
// is_servable, trimmable, fused_attention, needs_coordinator, real_compression, blurb, paper,
// paper_deviation, docs_url, config_fields: [names], fields: [{name, type, default, optional,
// help, min, max}]} ]} — servable methods first, then by name.
nlohmann::json methods_json(const MethodFilter& filter);

// A table for humans: one line per method, a mark on standalone ones, then its fields.
std::string methods_text(const MethodFilter& filter);

}  // namespace veloxquant
