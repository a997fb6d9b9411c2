#pragma once
// One descriptor per method (DESIGN.md "Adding a method touches one new file, one registry
// row, one method card"): what `veloxquant methods` prints, what --set accepts, what the
// contract suite and the benchmarks enumerate, and how the cache is made.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lm/cache.h"
#include "veloxquant/caches/standalone_cache.h"
#include "veloxquant/config/field_spec.h"
#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

struct MethodCapabilities {
  bool trimmable = false;          // trim(n) rolls back exactly (spec §2.1 issue #623)
  bool fused_attention = false;    // attends over its own compressed storage
  bool needs_coordinator = false;  // cross-layer methods share one coordinator per for_model
  bool accepts_bit_width_list = false;  // the cache itself takes a list (the original: vecinfer)
  bool real_compression = false;   // nbytes shrinks for real (packed codes), not accounting
};

struct MethodDescriptor {
  std::string name;
  std::string family;  // "quantization" | "eviction" | "hybrid" (the original's editorial labels)
  bool is_servable = true;
  MethodCapabilities capabilities;
  std::string blurb;       // one line for `veloxquant methods`
  std::string paper;       // the paper the method follows
  std::string deviations;  // how this port departs from the paper / the original
  std::string docs;        // docs/methods/<name>.md

  // Generic KVCacheConfig fields the method reads (names of generic_fields()).
  std::vector<std::string> generic_fields;
  // The method's own options (the typed options struct), declared once.
  std::vector<FieldSpec> fields;

  // Cross-field checks beyond the declared bounds (run after them); may be empty.
  std::function<void(const KVCacheConfig&)> validate;
  // Exactly one of the two is set, by is_servable.
  std::function<std::shared_ptr<lm::KVCache>(const KVCacheConfig&)> make_serving;
  std::function<std::unique_ptr<StandaloneCache>(const KVCacheConfig&)> make_standalone;
};

}  // namespace veloxquant
