#include "veloxquant/eviction/eviction_config.h"

#include "veloxquant/errors.h"
#include "veloxquant/quant/turboquant_rvq.h"

namespace veloxquant::eviction {

void validate_storage_and_scoring(const KVCacheConfig& config) {
  const StorageKind kind = parse_storage_kind(config.eviction.eviction_storage);
  parse_scoring(config.eviction.eviction_scoring);
  if (kind == StorageKind::kDtype) return;
  const int bits = config.bit_width_inlier.scalar();
  if (bits < 1 || bits > 8) {
    throw QuantizerConfigError("bit_width_inlier for eviction_storage='" + config.eviction.eviction_storage +
                               "' must lie in [1, 8], got " + std::to_string(bits));
  }
  if (kind == StorageKind::kTurboQuantRvq) {
    const int vb = config.turboquant_rvq.rvq_value_bits;
    if (vb != 0 && (vb < 2 || vb > 8)) {
      throw QuantizerConfigError("rvq_value_bits must be 0 (keep dtype) or 2..8, got " + std::to_string(vb));
    }
    quant::parse_rvq_stage2_scale(config.turboquant_rvq.rvq_stage2_scale);
  } else if (config.kivi.kivi_group_size < 1) {
    throw QuantizerConfigError("kivi_group_size must be >= 1, got " + std::to_string(config.kivi.kivi_group_size));
  }
}

void require_evictable(const std::string& budget_field, int budget, const std::string& sink_field, int n_sink,
                       const std::string& grace_field, int grace) {
  if (budget < 1) throw QuantizerConfigError(budget_field + " must be >= 1, got " + std::to_string(budget));
  if (n_sink < 0) throw QuantizerConfigError(sink_field + " must be >= 0, got " + std::to_string(n_sink));
  if (n_sink >= budget) {
    throw QuantizerConfigError(sink_field + "=" + std::to_string(n_sink) + " must be below " + budget_field + "=" +
                               std::to_string(budget) + ": the sinks would leave nothing evictable");
  }
  if (!grace_field.empty()) {
    if (grace < 0) throw QuantizerConfigError(grace_field + " must be >= 0, got " + std::to_string(grace));
    if ((n_sink != 0 || grace != 0) && int64_t{n_sink} + grace >= budget) {  // 64-bit: no overflow near INT_MAX
      throw QuantizerConfigError(sink_field + " + " + grace_field + " = " + std::to_string(n_sink) + " + " +
                                 std::to_string(grace) + " must be below " + budget_field + "=" +
                                 std::to_string(budget) + ": sinks and grace would leave nothing evictable");
    }
  }
}

StorageSpec storage_of(const KVCacheConfig& config) {
  validate_storage_and_scoring(config);
  return storage_spec_from(config);
}

Scoring scoring_of(const KVCacheConfig& config) { return parse_scoring(config.eviction.eviction_scoring); }

}  // namespace veloxquant::eviction
