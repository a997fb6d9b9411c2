#include "veloxquant/registry/method_report.h"

#include <sstream>

#include <nlohmann/json.hpp>

#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/errors.h"
#include "veloxquant/presets/kv_presets.h"
#include "veloxquant/registry/method_registry.h"

namespace veloxquant {
namespace {

bool selected(const MethodDescriptor& m, const MethodFilter& filter) {
  if (filter.servable_only && !m.is_servable) return false;
  if (filter.family && m.family != *filter.family) return false;
  return true;
}

// The fields a method reads: the generic ones it names, then its own options.
std::vector<const FieldSpec*> method_fields(const MethodDescriptor& m) {
  std::vector<const FieldSpec*> out;
  for (const std::string& name : m.generic_fields) {
    if (const FieldSpec* spec = find_generic_field(name)) out.push_back(spec);
  }
  for (const FieldSpec& spec : m.fields) out.push_back(&spec);
  for (const std::string& name : m.borrowed_fields) {
    if (const FieldSpec* spec = find_field(name)) out.push_back(spec);
  }
  return out;
}

}  // namespace

void check_family_name(const std::string& family) {
  if (family != "quantization" && family != "eviction" && family != "hybrid") {
    throw QuantizerConfigError("unknown family '" + family + "'; valid families: quantization, eviction, hybrid");
  }
}

nlohmann::json methods_json(const MethodFilter& filter) {
  if (filter.family) check_family_name(*filter.family);
  nlohmann::json methods = nlohmann::json::array();
  for (const MethodDescriptor& m : method_registry()) {
    if (!selected(m, filter)) continue;
    nlohmann::json fields = nlohmann::json::array();
    nlohmann::json names = nlohmann::json::array();
    for (const FieldSpec* spec : method_fields(m)) {
      names.push_back(spec->name);
      nlohmann::json field = {{"name", spec->name},
                              {"type", std::string(field_type_name(spec->type))},
                              {"default", field_value_to_json(spec->default_value())},
                              {"optional", spec->optional()},
                              {"help", spec->help}};
      field["min"] = spec->min ? nlohmann::json(*spec->min) : nlohmann::json(nullptr);
      field["max"] = spec->max ? nlohmann::json(*spec->max) : nlohmann::json(nullptr);
      fields.push_back(std::move(field));
    }
    methods.push_back({{"name", m.name},
                       {"family", m.family},
                       {"is_servable", m.is_servable},
                       {"trimmable", m.capabilities.trimmable},
                       {"fused_attention", m.capabilities.fused_attention},
                       {"needs_coordinator", m.capabilities.needs_coordinator},
                       {"real_compression", m.capabilities.real_compression},
                       {"blurb", m.blurb},
                       {"paper", m.paper},
                       {"paper_deviation", m.deviations},
                       {"docs_url", m.docs},
                       {"config_fields", std::move(names)},
                       {"fields", std::move(fields)}});
  }
  nlohmann::json presets = nlohmann::json::array();
  for (const KvPreset& p : kv_presets()) {
    presets.push_back({{"name", p.name},
                       {"size_of", p.size_of},
                       {"bits_per_element", p.bits_per_element},
                       {"method", p.method},
                       {"sets", p.sets},
                       {"why", p.why}});
  }
  return {{"schema_version", 1},
          {"default_serve_method", KVCacheConfig{}.method},
          {"methods", std::move(methods)},
          {"presets", std::move(presets)}};
}

std::string methods_text(const MethodFilter& filter) {
  if (filter.family) check_family_name(*filter.family);
  std::ostringstream out;
  for (const MethodDescriptor& m : method_registry()) {
    if (!selected(m, filter)) continue;
    out << (m.is_servable ? "  " : "✗ ") << m.name << "  [" << m.family << "]"
        << (m.is_servable ? "" : " standalone (not servable)") << (m.capabilities.trimmable ? " trimmable" : "")
        << (m.capabilities.fused_attention ? " fused-attention" : "") << "\n"
        << "    " << m.blurb << "\n"
        << "    paper: " << m.paper << "\n";
    for (const FieldSpec* spec : method_fields(m)) {
      out << "    --set " << spec->name << "=" << field_value_to_string(spec->default_value()) << "  ("
          << field_type_name(spec->type) << ") " << spec->help << "\n";
    }
  }
  out << "✗ = standalone research cache (append/attend), refused by for_model and serving.\n";
  // Presets (--preset NAME on generate, eval, bench-host; --presets on bench-methods).
  out << "\npresets (--preset NAME): at most the size of a llama.cpp KV cache type\n";
  for (const KvPreset& p : kv_presets()) {
    out << "  " << p.name << "  = " << kv_preset_settings(p) << "  (" << p.bits_per_element << " bits/element, "
        << p.size_of << "): " << p.why << "\n";
  }
  return out.str();
}

}  // namespace veloxquant
