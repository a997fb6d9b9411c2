#include "veloxquant/config/field_spec.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>
#include <limits>

#include <nlohmann/json.hpp>

#include "veloxquant/errors.h"

namespace veloxquant {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

int64_t parse_int(const FieldSpec& spec, std::string_view text) {
  const std::string_view t = trim(text);
  int64_t value = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (!t.empty() && ec == std::errc::result_out_of_range && end == t.data() + t.size()) {
    throw QuantizerConfigError("field '" + spec.name + "' value " + std::string(t) + " is out of range (it holds " +
                               std::to_string(spec.holds_min) + ".." + std::to_string(spec.holds_max) + ")");
  }
  if (t.empty() || ec != std::errc() || end != t.data() + t.size()) {
    throw QuantizerConfigError("field '" + spec.name + "' expects an integer, got '" + std::string(text) + "'");
  }
  if (value < spec.holds_min || value > spec.holds_max) {
    throw QuantizerConfigError("field '" + spec.name + "' value " + std::string(t) + " is out of range (it holds " +
                               std::to_string(spec.holds_min) + ".." + std::to_string(spec.holds_max) + ")");
  }
  return value;
}

double parse_real(const FieldSpec& spec, std::string_view text) {
  const std::string t(trim(text));
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (t.empty() || used != t.size() || !std::isfinite(value)) {
    throw QuantizerConfigError("field '" + spec.name + "' expects a finite number, got '" + std::string(text) + "'");
  }
  return value;
}

// Shortest text that reads back as the same double ("0.98", not "0.980000").
std::string format_real(double value) {
  char buffer[64];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return ec == std::errc() ? std::string(buffer, end) : std::to_string(value);
}

// Accessors for the generic fields of KVCacheConfig (they are plain members, not options).
template <class T>
FieldSpec generic(std::string name, T KVCacheConfig::*member, std::string help,
                  std::optional<int64_t> min = std::nullopt, std::optional<int64_t> max = std::nullopt) {
  FieldSpec spec;
  spec.name = std::move(name);
  spec.help = std::move(help);
  spec.min = min;
  spec.max = max;
  if constexpr (std::is_same_v<T, bool>) {
    spec.type = FieldType::kBool;
    spec.get = [member](const KVCacheConfig& c) -> FieldValue { return c.*member; };
    spec.set = [member](KVCacheConfig& c, const FieldValue& v) { c.*member = std::get<bool>(v); };
  } else if constexpr (std::is_same_v<T, BitWidth>) {
    spec.type = FieldType::kBitWidth;
    spec.get = [member](const KVCacheConfig& c) -> FieldValue { return c.*member; };
    spec.set = [member](KVCacheConfig& c, const FieldValue& v) {
      if (const auto* bits = std::get_if<BitWidth>(&v)) {
        c.*member = *bits;
      } else {
        c.*member = static_cast<int>(std::get<int64_t>(v));
      }
    };
  } else if constexpr (std::is_integral_v<T>) {
    spec.type = FieldType::kInt;
    spec.holds_min = static_cast<int64_t>(std::numeric_limits<T>::min());
    spec.holds_max =
        static_cast<int64_t>(std::min<uint64_t>(std::numeric_limits<T>::max(), std::numeric_limits<int64_t>::max()));
    spec.get = [member](const KVCacheConfig& c) -> FieldValue { return static_cast<int64_t>(c.*member); };
    spec.set = [member](KVCacheConfig& c, const FieldValue& v) { c.*member = static_cast<T>(std::get<int64_t>(v)); };
  } else {  // std::optional<integral>
    using Inner = typename T::value_type;
    spec.type = FieldType::kOptionalInt;
    spec.holds_min = static_cast<int64_t>(std::numeric_limits<Inner>::min());
    spec.holds_max = static_cast<int64_t>(
        std::min<uint64_t>(std::numeric_limits<Inner>::max(), std::numeric_limits<int64_t>::max()));
    spec.get = [member](const KVCacheConfig& c) -> FieldValue {
      if (!(c.*member)) return std::monostate{};
      return static_cast<int64_t>(*(c.*member));
    };
    spec.set = [member](KVCacheConfig& c, const FieldValue& v) {
      if (std::holds_alternative<std::monostate>(v)) {
        c.*member = std::nullopt;
      } else {
        c.*member = static_cast<Inner>(std::get<int64_t>(v));
      }
    };
  }
  return spec;
}

}  // namespace

std::string_view field_type_name(FieldType type) {
  switch (type) {
    case FieldType::kInt:
      return "int";
    case FieldType::kOptionalInt:
      return "int?";
    case FieldType::kBool:
      return "bool";
    case FieldType::kString:
      return "str";
    case FieldType::kBitWidth:
      return "int|list[int]";
    case FieldType::kFloat:
      return "float";
    case FieldType::kOptionalFloat:
      return "float?";
  }
  return "?";
}

std::string field_value_to_string(const FieldValue& value) {
  if (std::holds_alternative<std::monostate>(value)) return "None";
  if (const auto* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  if (const auto* d = std::get_if<double>(&value)) return format_real(*d);
  return std::get<BitWidth>(value).to_string();
}

nlohmann::json field_value_to_json(const FieldValue& value) {
  if (std::holds_alternative<std::monostate>(value)) return nullptr;
  if (const auto* i = std::get_if<int64_t>(&value)) return *i;
  if (const auto* b = std::get_if<bool>(&value)) return *b;
  if (const auto* s = std::get_if<std::string>(&value)) return *s;
  if (const auto* d = std::get_if<double>(&value)) return *d;
  const BitWidth& bits = std::get<BitWidth>(value);
  if (bits.is_list()) return bits.list();
  return bits.scalar();
}

FieldValue parse_field_value(const FieldSpec& spec, std::string_view text) {
  const std::string_view t = trim(text);
  switch (spec.type) {
    case FieldType::kInt:
      return parse_int(spec, t);
    case FieldType::kOptionalInt:
      if (t.empty() || lower(t) == "none") return std::monostate{};
      return parse_int(spec, t);
    case FieldType::kBool: {
      const std::string v = lower(t);
      if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
      if (v == "0" || v == "false" || v == "no" || v == "off") return false;
      throw QuantizerConfigError("field '" + spec.name + "' expects a bool (1/true/yes/on or " +
                                 "0/false/no/off), got '" + std::string(text) + "'");
    }
    case FieldType::kString:
      return std::string(t);
    case FieldType::kFloat:
      return parse_real(spec, t);
    case FieldType::kOptionalFloat:
      if (t.empty() || lower(t) == "none") return std::monostate{};
      return parse_real(spec, t);
    case FieldType::kBitWidth: {
      // "4" is the scalar form, "2,3,4" (or "[2,3,4]") the per-attention-layer list.
      std::string_view body = t;
      const bool bracketed = body.size() >= 2 && body.front() == '[' && body.back() == ']';
      if (bracketed) body = body.substr(1, body.size() - 2);
      if (!bracketed && body.find(',') == std::string_view::npos) {
        return BitWidth(static_cast<int>(parse_int(spec, body)));
      }
      std::vector<int> list;
      while (true) {
        const std::size_t comma = body.find(',');
        list.push_back(static_cast<int>(parse_int(spec, body.substr(0, comma))));
        if (comma == std::string_view::npos) break;
        body.remove_prefix(comma + 1);
      }
      return BitWidth(std::move(list));
    }
  }
  throw QuantizerConfigError("field '" + spec.name + "' has an unknown type");
}

void check_field_bounds(const FieldSpec& spec, const FieldValue& value) {
  auto check = [&](int64_t v) {
    if ((spec.min && v < *spec.min) || (spec.max && v > *spec.max)) {
      std::string range = "[" + (spec.min ? std::to_string(*spec.min) : std::string("-inf")) + ", " +
                          (spec.max ? std::to_string(*spec.max) : std::string("inf")) + "]";
      throw QuantizerConfigError(spec.name + " must lie in " + range + ", got " + std::to_string(v));
    }
  };
  if (const auto* i = std::get_if<int64_t>(&value)) {
    check(*i);
  } else if (const auto* bits = std::get_if<BitWidth>(&value)) {
    if (bits->is_list()) {
      for (int b : bits->list()) check(b);
    } else {
      check(bits->scalar());
    }
  }
}

const std::vector<FieldSpec>& generic_fields() {
  static const std::vector<FieldSpec> fields = {
      generic("head_dim", &KVCacheConfig::head_dim,
              "Vector length per head; for_model overrides it per layer. build() wants a power of two"),
      generic("bit_width_inlier", &KVCacheConfig::bit_width_inlier,
              "Bits per coordinate: one int, or a comma list with one entry per attention layer"),
      generic("bit_width_outlier", &KVCacheConfig::bit_width_outlier,
              "Bits of outlier channels (standalone TurboQuant two-stream); None = inlier bits", 1, 8),
      generic("jl_dim", &KVCacheConfig::jl_dim, "QJL sketch size m; None = method default (d)"),
      generic("n_outlier_channels", &KVCacheConfig::n_outlier_channels,
              "Outlier channels kept in int8 (standalone TurboQuant two-stream)", 0),
      generic("n_calib_tokens", &KVCacheConfig::n_calib_tokens,
              "Tokens observed before outlier channels are chosen (None = 200)"),
      generic("enable_vectorized_attend", &KVCacheConfig::enable_vectorized_attend,
              "Standalone TurboQuant: score all keys in one pass"),
      generic("enable_outlier_two_stream", &KVCacheConfig::enable_outlier_two_stream,
              "Standalone TurboQuant: store the top outlier channels separately in int8"),
      generic("enable_fused_query_dot", &KVCacheConfig::enable_fused_query_dot,
              "Standalone TurboQuant: rotate the query once and dot in the rotated domain"),
      generic("seed", &KVCacheConfig::seed, "Random seed; for_model uses seed + layer index"),
      generic("capacity", &KVCacheConfig::capacity, "Standalone caches: token capacity (ring buffer); None = 1,000,000",
              1),
      generic("sliding_window", &KVCacheConfig::sliding_window, "Standalone caches only: keep the newest N tokens", 1),
      // Read by every eviction method (one declaration, so not in a method row's fields).
      option_field("eviction_storage", &KVCacheConfig::eviction, &EvictionStorageOptions::eviction_storage,
                   "Eviction methods: how retained rows are stored: dtype, turboquant_rvq (keys as RVQ codes "
                   "at bit_width_inlier bits, values per rvq_value_bits) or kivi (keys and values group-affine "
                   "per row at bit_width_inlier bits, group kivi_group_size)"),
      option_field("eviction_scoring", &KVCacheConfig::eviction, &EvictionStorageOptions::eviction_scoring,
                   "Eviction methods: auto (the layer's real queries when the host offers them) or proxy (the "
                   "incoming key stands in for the query, as the original)"),
  };
  return fields;
}

const FieldSpec* find_generic_field(std::string_view name) {
  for (const FieldSpec& spec : generic_fields()) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

}  // namespace veloxquant
