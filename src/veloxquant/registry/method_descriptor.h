#pragma once
// One descriptor per method — its one registration (docs/architecture.md "Adding a method"): what
// `veloxquant methods` prints, what --set accepts, what the contract suite, the eviction
// invariants and the benchmarks enumerate, how the cache is made and how a saved one is restored.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/caches/standalone_cache.h"
#include "veloxquant/config/field_spec.h"
#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

struct MethodCapabilities {
  bool trimmable = false;               // trim(n) rolls back exactly (spec §2.1 issue #623)
  bool fused_attention = false;         // attends over its own compressed storage
  bool needs_coordinator = false;       // cross-layer methods share one coordinator per for_model
  bool accepts_bit_width_list = false;  // the cache itself takes a list (the original: vecinfer)
  bool real_compression = false;        // nbytes shrinks for real (packed codes), not accounting
  // fused attention reads a query-dependent subset of the stored rows (rocketkv's stage 2), so
  // it differs on purpose from attention over every row update_and_fetch returns
  bool sparse_attention = false;
};

// Makes attention layer `attention_index`'s cache from its per-layer config (head_dim, bits and
// seed already resolved by for_model).
using LayerCacheFactory =
    std::function<std::shared_ptr<lm::KVCache>(const KVCacheConfig& layer_config, std::size_t attention_index)>;

struct MethodDescriptor {
  std::string name;
  std::string family;  // "quantization" | "eviction" | "hybrid" (the original's editorial labels)
  bool is_servable = true;
  MethodCapabilities capabilities;
  std::string blurb;       // one line for `veloxquant methods`
  std::string paper;       // the paper the method follows
  std::string deviations;  // how this port departs from the paper / the original
  std::string docs;        // the method card, relative to the source root (a test checks it exists)

  // Generic KVCacheConfig fields the method reads (names of generic_fields()).
  std::vector<std::string> generic_fields;
  // The method's own options (the typed options struct), declared once.
  std::vector<FieldSpec> fields;
  // Options declared by another method that this one also reads (an eviction method storing
  // its rows as turboquant_rvq or kivi codes reads their value / group options).
  std::vector<std::string> borrowed_fields;
  // Whether this config reads bit_width_inlier (bench-methods then runs one row per --bits).
  // Unset: it does when generic_fields names it. Eviction methods read it only when their
  // rows are stored quantized.
  std::function<bool(const KVCacheConfig&)> reads_bit_width;

  // Cross-field checks beyond the declared bounds (run after them); may be empty.
  std::function<void(const KVCacheConfig&)> validate;
  // Exactly one of the two is set, by is_servable.
  std::function<std::shared_ptr<lm::KVCache>(const KVCacheConfig&)> make_serving;
  std::function<std::unique_ptr<StandaloneCache>(const KVCacheConfig&)> make_standalone;
  // Optional, servable methods only: whole-model wiring (spec §4.3). for_model calls it once
  // with the number of attention layers and makes every attention layer through the returned
  // factory, so layers can share one coordinator (xquant, minicache) or receive options
  // resolved over the whole model (pyramidkv's budget schedule). Unset: make_serving per layer.
  std::function<LayerCacheFactory(const KVCacheConfig& config, std::size_t n_attention_layers)> wire_model;

  // Servable methods: prompt-cache restore (lm/cache/prompt_cache_file.h). Caches of this method report
  // `cache_type_name`; make_restorable returns a placeholder that from_state() then rebuilds
  // entirely from the saved meta_state (integration/prompt_cache_types.cpp registers every row).
  std::string cache_type_name;
  std::function<std::shared_ptr<lm::KVCache>()> make_restorable;

  // Eviction methods: makes `config` keep `budget` rows per (layer, kv head), sinks included,
  // with the method's other options left valid at that budget. The eviction tests and reports
  // set budgets through it, so a new eviction method is covered without a hand-written list.
  std::function<void(KVCacheConfig& config, int budget)> set_budget;
};

}  // namespace veloxquant
