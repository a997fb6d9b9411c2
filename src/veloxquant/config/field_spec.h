#pragma once
// Config fields declared once (DESIGN.md "Config is declared once"): each FieldSpec carries the
// name, type, help and bounds of one KVCacheConfig field plus typed accessors. The same
// declaration feeds `--set FIELD=VALUE` parsing, the JSON of `veloxquant methods`, the echo in
// reports and the bounds check of validation. Defaults are never restated: they are read from
// a default-constructed KVCacheConfig.
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

enum class FieldType { kInt, kOptionalInt, kBool, kString, kBitWidth, kFloat, kOptionalFloat };

// The value of one field: monostate = "None" (optional fields only). Float fields hold a
// double; their ranges are checked by the method's validate (they are often open intervals).
using FieldValue = std::variant<std::monostate, int64_t, bool, std::string, BitWidth, double>;

struct FieldSpec {
  std::string name;
  FieldType type = FieldType::kInt;
  std::string help;
  std::optional<int64_t> min;  // inclusive bounds on ints (each entry of a bit-width list)
  std::optional<int64_t> max;
  // What the member's C++ type holds (ints, optional ints, bit-width entries): a value outside
  // is refused when parsed, before anything narrows it (4294967298 must not become 2).
  int64_t holds_min = std::numeric_limits<int32_t>::min();
  int64_t holds_max = std::numeric_limits<int32_t>::max();
  std::function<FieldValue(const KVCacheConfig&)> get;
  std::function<void(KVCacheConfig&, const FieldValue&)> set;

  // The default, read from KVCacheConfig{} (the struct initialisers are the declaration).
  FieldValue default_value() const { return get(KVCacheConfig{}); }
  bool optional() const { return type == FieldType::kOptionalInt || type == FieldType::kOptionalFloat; }
};

std::string_view field_type_name(FieldType type);            // "int", "int?", "bool", "str", "int|list[int]", "float"
std::string field_value_to_string(const FieldValue& value);  // None, 42, true, "x", [2, 3]
nlohmann::json field_value_to_json(const FieldValue& value);

// Parses `text` as a value of `spec` (spec §8 `--set` rules): int; bool as 1/true/yes/on or
// 0/false/no/off; an empty value = None for optional fields; comma-separated ints for a list.
// Throws QuantizerConfigError naming the field and the text.
FieldValue parse_field_value(const FieldSpec& spec, std::string_view text);

// Throws QuantizerConfigError when an int (or any list entry) is outside [min, max].
void check_field_bounds(const FieldSpec& spec, const FieldValue& value);

// --- declaration helpers: a field that lives in an options struct of KVCacheConfig -------------

// Typed accessors of one option, given how to reach its struct in a config (`Access` returns
// Options& for a mutable config and const Options& for a const one).
template <class Options, class T, class Access>
FieldSpec option_field_via(std::string name, Access access, T Options::*member, std::string help,
                           std::optional<int64_t> min, std::optional<int64_t> max) {
  FieldSpec spec;
  spec.name = std::move(name);
  spec.help = std::move(help);
  spec.min = min;
  spec.max = max;
  const auto read = [access, member](const KVCacheConfig& c) -> const T& { return access(c).*member; };
  const auto write = [access, member](KVCacheConfig& c) -> T& { return access(c).*member; };
  if constexpr (std::is_same_v<T, bool>) {
    spec.type = FieldType::kBool;
    spec.get = [read](const KVCacheConfig& c) -> FieldValue { return read(c); };
    spec.set = [write](KVCacheConfig& c, const FieldValue& v) { write(c) = std::get<bool>(v); };
  } else if constexpr (std::is_same_v<T, std::string>) {
    spec.type = FieldType::kString;
    spec.get = [read](const KVCacheConfig& c) -> FieldValue { return read(c); };
    spec.set = [write](KVCacheConfig& c, const FieldValue& v) { write(c) = std::get<std::string>(v); };
  } else if constexpr (std::is_floating_point_v<T>) {
    spec.type = FieldType::kFloat;
    spec.get = [read](const KVCacheConfig& c) -> FieldValue { return static_cast<double>(read(c)); };
    spec.set = [write](KVCacheConfig& c, const FieldValue& v) { write(c) = static_cast<T>(std::get<double>(v)); };
  } else if constexpr (std::is_same_v<T, BitWidth>) {
    // An int, or one int per attention layer (resolved by for_model: per_layer_lists.h).
    spec.type = FieldType::kBitWidth;
    spec.get = [read](const KVCacheConfig& c) -> FieldValue { return read(c); };
    spec.set = [write](KVCacheConfig& c, const FieldValue& v) {
      if (const auto* bits = std::get_if<BitWidth>(&v)) {
        write(c) = *bits;
      } else {
        write(c) = static_cast<int>(std::get<int64_t>(v));
      }
    };
  } else if constexpr (std::is_same_v<T, std::optional<int>>) {
    // Values injected by for_model (pyramid_resolved_budget); None = not resolved yet.
    spec.type = FieldType::kOptionalInt;
    spec.holds_min = std::numeric_limits<int>::min();
    spec.holds_max = std::numeric_limits<int>::max();
    spec.get = [read](const KVCacheConfig& c) -> FieldValue {
      const std::optional<int>& value = read(c);
      if (!value) return std::monostate{};
      return static_cast<int64_t>(*value);
    };
    spec.set = [write](KVCacheConfig& c, const FieldValue& v) {
      if (std::holds_alternative<std::monostate>(v)) {
        write(c) = std::nullopt;
      } else {
        write(c) = static_cast<int>(std::get<int64_t>(v));
      }
    };
  } else if constexpr (std::is_same_v<T, std::optional<double>>) {
    // An optional float (keyformer_tau: None = anneal). Typed kOptionalFloat for the schema.
    spec.type = FieldType::kOptionalFloat;
    spec.get = [read](const KVCacheConfig& c) -> FieldValue {
      const std::optional<double>& value = read(c);
      if (!value) return std::monostate{};
      return *value;
    };
    spec.set = [write](KVCacheConfig& c, const FieldValue& v) {
      if (std::holds_alternative<std::monostate>(v)) {
        write(c) = std::nullopt;
      } else {
        write(c) = std::get<double>(v);
      }
    };
  } else {
    static_assert(std::is_integral_v<T>, "option fields are int, bit width, float, optional int/float, bool or string");
    spec.type = FieldType::kInt;
    spec.holds_min = static_cast<int64_t>(std::numeric_limits<T>::min());
    spec.holds_max =
        static_cast<int64_t>(std::min<uint64_t>(std::numeric_limits<T>::max(), std::numeric_limits<int64_t>::max()));
    spec.get = [read](const KVCacheConfig& c) -> FieldValue { return static_cast<int64_t>(read(c)); };
    spec.set = [write](KVCacheConfig& c, const FieldValue& v) { write(c) = static_cast<T>(std::get<int64_t>(v)); };
  }
  return spec;
}

// A field of an options struct that is a member of KVCacheConfig (the first methods).
template <class Options, class T>
FieldSpec option_field(std::string name, Options KVCacheConfig::*group, T Options::*member, std::string help,
                       std::optional<int64_t> min = std::nullopt, std::optional<int64_t> max = std::nullopt) {
  struct Access {
    Options KVCacheConfig::*group;
    Options& operator()(KVCacheConfig& c) const { return c.*group; }
    const Options& operator()(const KVCacheConfig& c) const { return c.*group; }
  };
  return option_field_via(std::move(name), Access{group}, member, std::move(help), min, max);
}

// A field of an options struct kept in KVCacheConfig::method_options (declared in its method's
// own header: options_bag.h).
template <class Options, class T>
FieldSpec option_field(std::string name, T Options::*member, std::string help,
                       std::optional<int64_t> min = std::nullopt, std::optional<int64_t> max = std::nullopt) {
  struct Access {
    Options& operator()(KVCacheConfig& c) const { return c.options<Options>(); }
    const Options& operator()(const KVCacheConfig& c) const { return c.options<Options>(); }
  };
  return option_field_via(std::move(name), Access{}, member, std::move(help), min, max);
}

// The generic fields of §3.1 that a user may set (method is chosen with --method, not --set).
const std::vector<FieldSpec>& generic_fields();
const FieldSpec* find_generic_field(std::string_view name);

}  // namespace veloxquant
