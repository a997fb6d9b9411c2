#pragma once
// Shared by the attention benches: SmolLM2's attention geometry (9 query heads, 3 kv heads,
// head_dim 64), random rows, a cache by method name, and prefill / decode steps the way the
// host runs them for that cache. Header-only: every bench file is its own executable.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "lm/cache/cache.h"
#include "lm/cache/full_kv_cache.h"
#include "lm/kernels/attention.h"
#include "lm/tensor.h"
#include "veloxquant/config/config_validation.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/presets/kv_presets.h"
#include "veloxquant/registry/field_assignment.h"
#include "veloxquant/registry/method_registry.h"

namespace bench_attention {

constexpr int64_t kKvHeads = 3, kQueryHeads = 9, kDim = 64;
constexpr float kScale = 0.125f;

// N(0, 1) values in `dtype`: what attention's speed depends on.
inline lm::Tensor random_tensor(lm::Shape shape, lm::DType dtype, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = dist(rng);
  return lm::Tensor::from_f32(v, std::move(shape), dtype);
}

// The cache `method` names (`none`: the host's native f16 cache) with `bits` and FIELD=VALUE
// settings; throws the configuration's own error for a bad name or value.
inline std::shared_ptr<lm::KVCache> make_cache(const std::string& method, int bits,
                                               const std::vector<std::string>& set) {
  if (method == "none") return std::make_shared<lm::FullKVCache>(lm::DType::F16);
  veloxquant::KVCacheConfig config;
  config.method = method;
  config.head_dim = kDim;
  config.bit_width_inlier = veloxquant::BitWidth(bits);
  for (const std::string& a : set) veloxquant::apply_field_assignment(config, a);
  return veloxquant::validate_for_create(config).make_serving(config);
}

// The cache a preset (q8, q5, q4, q3) resolves to at this geometry.
inline std::shared_ptr<lm::KVCache> make_preset_cache(const std::string& preset) {
  veloxquant::KVCacheConfig config = veloxquant::kv_preset_config(veloxquant::require_kv_preset(preset), 0);
  config.head_dim = kDim;
  return veloxquant::validate_for_create(config).make_serving(config);
}

// One step (new rows k/v, queries q) the way the host runs it for this cache.
inline void step(lm::KVCache& cache, const lm::Tensor& q, const lm::Tensor& k, const lm::Tensor& v, lm::Tensor& out) {
  if (cache.wants_queries()) cache.observe_queries(q);
  if (cache.supports_fused_attention()) {
    lm::FusedAttentionRequest request{&q, &k, &v, kScale, std::nullopt};
    cache.fused_attention(request, out);
    return;
  }
  const lm::AttentionMask mask = cache.make_mask(q.dim(2), std::nullopt);
  const lm::KeysValues kv = cache.update_and_fetch(k, v);
  lm::kernels::attention(q, kv.keys, kv.values, mask, std::nullopt, kScale, out, &base::ThreadPool::global());
}

// Feeds ctx random rows in chunks of 512, as the host's prefill does.
inline void fill(lm::KVCache& cache, int64_t ctx, std::mt19937& rng) {
  for (int64_t done = 0; done < ctx;) {
    const int64_t s = std::min<int64_t>(512, ctx - done);
    const lm::Tensor q = random_tensor({1, kQueryHeads, s, kDim}, lm::DType::F32, rng);
    const lm::Tensor k = random_tensor({1, kKvHeads, s, kDim}, lm::DType::F16, rng);
    const lm::Tensor v = random_tensor({1, kKvHeads, s, kDim}, lm::DType::F16, rng);
    lm::Tensor out({1, kQueryHeads, s, kDim}, lm::DType::F32);
    step(cache, q, k, v, out);
    done += s;
  }
}

// The same rows (same random stream as fill) appended by update_and_fetch: no attention over them.
inline void fill_by_append(lm::KVCache& cache, int64_t ctx, std::mt19937& rng) {
  for (int64_t done = 0; done < ctx;) {
    const int64_t s = std::min<int64_t>(512, ctx - done);
    const lm::Tensor q = random_tensor({1, kQueryHeads, s, kDim}, lm::DType::F32, rng);  // drawn to keep the stream
    const lm::Tensor k = random_tensor({1, kKvHeads, s, kDim}, lm::DType::F16, rng);
    const lm::Tensor v = random_tensor({1, kKvHeads, s, kDim}, lm::DType::F16, rng);
    if (cache.wants_queries()) cache.observe_queries(q);
    (void)cache.update_and_fetch(k, v);
    done += s;
  }
}

}  // namespace bench_attention
