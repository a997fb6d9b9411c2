#pragma once
// Planning a cache before serving (`estimate-memory`, `recommend`, `auto-config`): a model's
// KV geometry (from a GGUF/llama2.c file or from flags), resident bytes per configuration at
// a context length, measured records from bench-methods, and the original's auto-config rules.
//
// Bytes are not computed from formulas: each configuration's real caches (for_model) are fed
// random rows through the cache contract, in prefill chunks as generate feeds them, and their
// nbytes() read at two lengths; beyond the measured length the bytes are extrapolated linearly
// (exact for quantizers, which grow by a fixed number of bytes per token, and for eviction
// caches once their budget is full, which stop growing).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lm/model.h"
#include "veloxquant/config/kv_cache_config.h"

namespace CLI {
class App;
}

namespace apps {

// A model with layers and no weights: enough for for_model and native_make_cache.
class GeometryModel : public lm::Model {
 public:
  GeometryModel(std::string name, int n_layers, int n_heads, int n_kv_heads, int head_dim);
  // The geometry of a loaded model (same layers, same native caches).
  static GeometryModel of(const lm::Model& model, std::string name);

  const lm::ModelConfig& config() const override { return config_; }
  const std::vector<lm::LayerInfo>& layers() const override { return layers_; }
  lm::CacheList native_make_cache() const override;
  void forward(const std::vector<int32_t>&, lm::CacheList&, std::vector<float>&, std::vector<float>*) const override;

 private:
  lm::ModelConfig config_;
  std::vector<lm::LayerInfo> layers_;
};

struct MemoryEstimate {
  std::string label;     // "native f16", "kivi --bits 2", "preset q4"
  std::string method;    // "none" for the host's cache
  std::string bits;      // as a string ("" when not read)
  std::string settings;  // FIELD=VALUE,... beyond the defaults
  double bytes = 0;      // resident bytes at the context, all sequences of the batch
  double bytes_per_token = 0;
  std::string source;  // "measured-here (N tokens fed)", "extrapolated from N tokens", "bench-methods record ..."
};

// Feeds `measure_tokens` random tokens (prefill chunks of 512) through the configuration's
// caches (nullopt = native) and extrapolates to `context` tokens x `batch` sequences.
// Throws what for_model throws for a configuration that does not fit the geometry.
MemoryEstimate measure_kv_bytes(const lm::Model& geometry, const std::optional<veloxquant::KVCacheConfig>& config,
                                int64_t context, int64_t batch, int64_t measure_tokens);

// One record of a bench-methods results.json (the fields planning reads).
struct MeasuredRecord {
  std::string model;  // file name without directories and extension
  std::string method, bits, settings;
  double kv_bytes_per_token = 0, kld = 0, top1 = 0, tok_per_s = 0, tok_per_s_baseline = 0, ppl = 0;
  int64_t ctx = 0;
  std::string file;
};
// Reads every record of a results.json (base::FormatError naming the file and the problem).
std::vector<MeasuredRecord> read_measured_records(const std::string& path);

// The original's auto-config rules (spec §8), adapted to the methods this build has.
struct AutoConfigInput {
  int head_dim = 128;
  int64_t seq_len = 4096;
  int n_layers = 32;
  int n_kv_heads = 8;
  int64_t batch = 1;
  double memory_total_bytes = 0;  // 0 = unknown: rule 1 is skipped
  double memory_used_bytes = 0;
};
struct AutoConfigChoice {
  std::string method;
  int bits = 0;
  std::vector<std::string> sets;
  std::string rule;  // which rule fired and why
  double fp16_kv_bytes = 0;
  std::string flags() const;  // "--method kivi --bits 2 --set kivi_group_size=32"
};
AutoConfigChoice auto_config(const AutoConfigInput& input);

// Total and used (total - available) memory of this machine from /proc/meminfo; zeros when
// unreadable.
std::pair<double, double> machine_memory_bytes();

}  // namespace apps

namespace apps {

// The geometry the planning commands work on: from --model (its real layers; the weights are
// memory-mapped and never run) or from --layers/--heads/--kv-heads/--head-dim.
struct GeometryFlags {
  std::string model;
  std::string layers = "32", heads = "32", kv_heads = "8", head_dim = "128";
};
void add_geometry_flags(CLI::App& command, GeometryFlags& flags);
GeometryModel geometry_from_flags(const GeometryFlags& flags);

}  // namespace apps
