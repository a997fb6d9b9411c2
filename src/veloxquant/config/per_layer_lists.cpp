#include "veloxquant/config/per_layer_lists.h"

#include "veloxquant/config/config_validation.h"
#include "veloxquant/errors.h"
#include "veloxquant/registry/method_registry.h"

namespace veloxquant {
namespace {

// The bit-width fields of `config` that can hold a per-layer list: the generic one and the
// method's own (declared with a BitWidth member, so the registry is the one place that says so).
std::vector<const FieldSpec*> bit_width_fields(const KVCacheConfig& config) {
  std::vector<const FieldSpec*> fields = {find_generic_field("bit_width_inlier")};
  if (const MethodDescriptor* method = find_method(config.method)) {
    for (const FieldSpec& spec : method->fields) {
      if (spec.type == FieldType::kBitWidth) fields.push_back(&spec);
    }
  }
  return fields;
}

}  // namespace

std::vector<PerLayerList> per_layer_lists(const KVCacheConfig& config) {
  std::vector<PerLayerList> lists;
  for (const FieldSpec* spec : bit_width_fields(config)) {
    const BitWidth bits = std::get<BitWidth>(spec->get(config));
    if (bits.is_list()) lists.push_back({spec->name, bits.list().size()});
  }
  return lists;
}

void check_per_layer_lengths(const KVCacheConfig& config, std::size_t n_attention_layers) {
  for (const FieldSpec* spec : bit_width_fields(config)) {
    const BitWidth bits = std::get<BitWidth>(spec->get(config));
    if (bits.is_list() && bits.list().size() != n_attention_layers) {
      throw QuantizerConfigError(spec->name + " list " + bits.to_string() + " has " +
                                 std::to_string(bits.list().size()) + " entries but the model has " +
                                 std::to_string(n_attention_layers) +
                                 " attention layers (one entry per attention layer)");
    }
  }
}

std::optional<std::size_t> common_per_layer_length(const KVCacheConfig& config) {
  const std::vector<PerLayerList> lists = per_layer_lists(config);
  if (lists.empty()) return std::nullopt;
  for (const PerLayerList& list : lists) {
    if (list.length != lists.front().length) {
      throw QuantizerConfigError(lists.front().field + " has " + std::to_string(lists.front().length) +
                                 " per-layer entries but " + list.field + " has " + std::to_string(list.length) +
                                 " (both need one entry per attention layer)");
    }
  }
  return lists.front().length;
}

KVCacheConfig config_for_attention_layer(const KVCacheConfig& config, std::size_t attention_index) {
  KVCacheConfig layer = config;
  for (const FieldSpec* spec : bit_width_fields(config)) {
    const BitWidth bits = std::get<BitWidth>(spec->get(config));
    if (bits.is_list()) spec->set(layer, BitWidth(bits.for_attention_layer(attention_index)));
  }
  return layer;
}

void validate_per_layer_config(const KVCacheConfig& config) {
  const std::optional<std::size_t> length = common_per_layer_length(config);
  if (!length) {
    validate_for_create(config);
    return;
  }
  for (std::size_t i = 0; i < *length; ++i) {
    try {
      validate_for_create(config_for_attention_layer(config, i));
    } catch (const QuantizerConfigError& e) {
      throw QuantizerConfigError(std::string(e.what()) + " (attention layer " + std::to_string(i) + ")");
    }
  }
}

}  // namespace veloxquant
