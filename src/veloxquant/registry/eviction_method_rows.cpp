// Registry rows of the token-eviction methods (spec §2.3, §6 rows 20-24). Every one is servable,
// not trimmable (a trim cannot bring back evicted rows), and really shrinks memory: the rows
// are allocated once for the budget. All of them read the shared eviction_storage /
// eviction_scoring fields, and the storage's bit width / value options.
#include <string>
#include <vector>

#include "veloxquant/eviction/methods/h2o_cache.h"
#include "veloxquant/eviction/methods/pyramidkv_cache.h"
#include "veloxquant/eviction/methods/snapkv_cache.h"
#include "veloxquant/eviction/methods/streaming_llm_cache.h"
#include "veloxquant/eviction/methods/tova_cache.h"
#include "veloxquant/eviction/pyramid_schedule.h"
#include "veloxquant/registry/method_rows.h"

namespace veloxquant {
namespace {

MethodDescriptor eviction_row(std::string name) {
  MethodDescriptor m;
  m.name = std::move(name);
  m.family = "eviction";
  m.is_servable = true;
  m.capabilities = {.trimmable = false, .fused_attention = true, .real_compression = true};
  m.docs = "docs/methods/" + m.name + ".md";
  // bit_width_inlier and seed matter only with a quantized eviction_storage.
  m.generic_fields = {"head_dim", "bit_width_inlier", "seed", "eviction_storage", "eviction_scoring"};
  m.borrowed_fields = {"rvq_value_bits", "rvq_stage2_scale", "kivi_group_size"};
  m.reads_bit_width = [](const KVCacheConfig& c) { return c.eviction.eviction_storage != "dtype"; };
  return m;
}

const char* kCompositionNote =
    " New: eviction_storage stores the kept rows as turboquant_rvq or kivi codes; eviction_scoring=auto "
    "scores with the layer's real queries when the host offers them (proxy = the original's key-as-query).";

MethodDescriptor streaming_llm_row() {
  MethodDescriptor m = eviction_row("streaming_llm");
  m.blurb = "Attention sinks (first stream_n_sink positions) + a FIFO of the newest stream_window_size tokens; "
            "positions preserved";
  m.paper = "Efficient Streaming Language Models with Attention Sinks (Xiao et al., ICLR 2024, arXiv 2309.17453)";
  m.deviations = std::string("Rows allocated once for n_sink + window_size; explicit mask once rows are "
                             "non-contiguous.") + kCompositionNote;
  m.fields = {
      option_field("stream_n_sink", &KVCacheConfig::streaming_llm, &StreamingLLMOptions::stream_n_sink,
                   "First positions never evicted (attention sinks)", 0),
      option_field("stream_window_size", &KVCacheConfig::streaming_llm, &StreamingLLMOptions::stream_window_size,
                   "Newest tokens kept besides the sinks", 1),
  };
  m.validate = validate_streaming_llm_options;
  m.make_serving = make_streaming_llm_cache;
  return m;
}

MethodDescriptor h2o_row() {
  MethodDescriptor m = eviction_row("h2o");
  m.blurb = "Heavy hitters: accumulated attention (decayed) per row; evict the lowest past h2o_budget, sinks and "
            "the newest h2o_grace rows kept";
  m.paper = "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large Language Models (Zhang et al., "
            "NeurIPS 2023, arXiv 2306.14048)";
  m.deviations = std::string("The new token is scored by its own attention weight (the original appends it "
                             "with 0, the first token with 1). h2o_rope_base is accepted and unused: survivors "
                             "are never re-rotated.") + kCompositionNote;
  m.fields = {
      option_field("h2o_budget", &KVCacheConfig::h2o, &H2OOptions::h2o_budget, "Rows kept per head, sinks included", 1),
      option_field("h2o_n_sink", &KVCacheConfig::h2o, &H2OOptions::h2o_n_sink, "First positions never evicted", 0),
      option_field("h2o_rope_base", &KVCacheConfig::h2o, &H2OOptions::h2o_rope_base,
                   "Accepted for compatibility; survivors keep their rotation (unused)"),
      option_field("h2o_grace", &KVCacheConfig::h2o, &H2OOptions::h2o_grace, "Newest rows never evicted", 0),
      option_field("h2o_decay", &KVCacheConfig::h2o, &H2OOptions::h2o_decay,
                   "Score decay per step, in (0, 1]; 1 = plain accumulation"),
  };
  m.validate = validate_h2o_options;
  m.make_serving = make_h2o_cache;
  return m;
}

MethodDescriptor tova_row() {
  MethodDescriptor m = eviction_row("tova");
  m.blurb = "Memoryless: past tova_budget evict the row with the lowest attention weight of the current step";
  m.paper = "Transformers are Multi-State RNNs (Oren et al., arXiv 2401.06104)";
  m.deviations = std::string("Weights averaged over the GQA group of the kv head (the paper averages over all "
                             "heads; heads evict independently here). tova_backend accepted, unused.") +
                 kCompositionNote;
  m.fields = {
      option_field("tova_budget", &KVCacheConfig::tova, &TOVAOptions::tova_budget, "Rows kept per head, sinks included", 1),
      option_field("tova_n_sink", &KVCacheConfig::tova, &TOVAOptions::tova_n_sink, "First positions never evicted", 0),
      option_field("tova_backend", &KVCacheConfig::tova, &TOVAOptions::tova_backend,
                   "The original's kernel choice (auto); accepted, one CPU path here"),
  };
  m.validate = validate_tova_options;
  m.make_serving = make_tova_cache;
  return m;
}

MethodDescriptor snapkv_row() {
  MethodDescriptor m = eviction_row("snapkv");
  m.blurb = "Prefill chunks: the last snap_obs_window tokens vote (pooled attention) for the rows to keep; sinks and "
            "window kept";
  m.paper = "SnapKV: LLM Knows What You are Looking for Before Generation (Li et al., arXiv 2404.14469)";
  m.deviations = std::string("Decode steps respect the budget too (the original and the paper append them "
                             "without bound): their attention adds to the votes and the lowest-voted row past "
                             "snap_budget is evicted, the newest snap_obs_window rows kept. Votes average-pooled "
                             "over 5 rows (kvpress). snap_backend / snap_dtype / snap_batched_scoring are "
                             "validated and otherwise unused: rows are stored in the input dtype.") +
                 kCompositionNote;
  m.fields = {
      option_field("snap_dtype", &KVCacheConfig::snapkv, &SnapKVOptions::snap_dtype,
                   "auto or float16 (validated; rows keep the input dtype)"),
      option_field("snap_batched_scoring", &KVCacheConfig::snapkv, &SnapKVOptions::snap_batched_scoring,
                   "The original's batched scoring switch (accepted, unused)"),
      option_field("snap_backend", &KVCacheConfig::snapkv, &SnapKVOptions::snap_backend,
                   "auto / mlx / metal / reference (validated; one CPU path here)"),
      option_field("snap_budget", &KVCacheConfig::snapkv, &SnapKVOptions::snap_budget, "Rows kept per head, sinks included", 1),
      option_field("snap_obs_window", &KVCacheConfig::snapkv, &SnapKVOptions::snap_obs_window,
                   "Newest tokens of a prefill chunk that vote (and are kept)", 1),
      option_field("snap_n_sink", &KVCacheConfig::snapkv, &SnapKVOptions::snap_n_sink, "First positions never evicted", 0),
  };
  m.validate = validate_snapkv_options;
  m.make_serving = make_snapkv_cache;
  return m;
}

MethodDescriptor pyramidkv_row() {
  MethodDescriptor m = eviction_row("pyramidkv");
  m.blurb = "H2O scoring with per-layer budgets tapering linearly from shallow to deep layers, mean pyramid_budget; "
            "the newest pyramid_grace rows kept";
  m.paper = "PyramidKV: Dynamic KV Cache Compression based on Pyramidal Information Funneling (Cai et al., "
            "arXiv 2406.02069)";
  m.deviations = std::string("Within a layer the original's H2O scorer (no decay), the new token scored by its "
                             "own weight, plus pyramid_grace newest rows protected (new, default 16; the original "
                             "has none and then evicts nearly every new token); the paper selects by an "
                             "observation window. Schedule as the original (Python rounding, water-filling).") +
                 kCompositionNote;
  m.fields = {
      option_field("pyramid_budget", &KVCacheConfig::pyramidkv, &PyramidKVOptions::pyramid_budget,
                   "Average rows kept per head over the attention layers", 1),
      option_field("pyramid_backend", &KVCacheConfig::pyramidkv, &PyramidKVOptions::pyramid_backend,
                   "reference / mlx / metal / auto (validated; one CPU path here)"),
      option_field("pyramid_n_sink", &KVCacheConfig::pyramidkv, &PyramidKVOptions::pyramid_n_sink,
                   "First positions never evicted", 0),
      option_field("pyramid_beta", &KVCacheConfig::pyramidkv, &PyramidKVOptions::pyramid_beta,
                   "Taper strength, >= 1 (1 = flat)"),
      option_field("pyramid_resolved_budget", &KVCacheConfig::pyramidkv, &PyramidKVOptions::pyramid_resolved_budget,
                   "This layer's budget, injected by for_model (None = pyramid_budget)", 1),
      option_field("pyramid_grace", &KVCacheConfig::pyramidkv, &PyramidKVOptions::pyramid_grace,
                   "Newest rows never evicted, limited per layer to budget - n_sink - 1 (new; 0 = the "
                   "original)", 0),
  };
  m.validate = validate_pyramidkv_options;
  m.make_serving = make_pyramidkv_cache;
  // The schedule is resolved over the whole model once; each layer gets its budget.
  m.wire_model = [](const KVCacheConfig& config, std::size_t n_attention_layers) -> LayerCacheFactory {
    const std::vector<int> budgets =
        eviction::pyramid_budgets(config.pyramidkv.pyramid_budget, config.pyramidkv.pyramid_n_sink,
                                  config.pyramidkv.pyramid_beta, n_attention_layers);
    return [budgets](const KVCacheConfig& layer_config, std::size_t attention_index) {
      KVCacheConfig c = layer_config;
      c.pyramidkv.pyramid_resolved_budget = budgets.at(attention_index);
      return make_pyramidkv_cache(c);
    };
  };
  return m;
}

}  // namespace

std::vector<MethodDescriptor> eviction_method_rows() {
  return {snapkv_row(), streaming_llm_row(), h2o_row(), tova_row(), pyramidkv_row()};
}

}  // namespace veloxquant
