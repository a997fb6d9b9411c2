// Resident memory of a whole for_model list of a cross-layer method: the sum of the layers'
// nbytes() is exactly what the list keeps allocated (tensor data), so bytes shared between
// layers (xquant's anchor codes) are counted once and nothing the coordinator holds is hidden.
#include <gtest/gtest.h>

#include "support/allocation_counter.h"
#include "support/kv_test_data.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

// A model with 5 attention layers, 2 KV heads of 16 dims.
class FiveLayers : public lm::Model {
 public:
  FiveLayers() {
    config_.n_layers = 5;
    config_.head_dim = 16;
    layers_.resize(5);
    for (auto& l : layers_) {
      l.head_dim = 16;
      l.n_heads = 2;
      l.n_kv_heads = 2;
    }
  }
  const lm::ModelConfig& config() const override { return config_; }
  const std::vector<lm::LayerInfo>& layers() const override { return layers_; }
  lm::CacheList native_make_cache() const override { return {}; }
  void forward(const std::vector<int32_t>&, lm::CacheList&, std::vector<float>&, std::vector<float>*) const override {}

 private:
  lm::ModelConfig config_;
  std::vector<lm::LayerInfo> layers_;
};

void expect_list_bytes_are_allocated(const KVCacheConfig& config) {
  FiveLayers model;
  const auto before = test_support::allocation_snapshot();
  {
    const lm::CacheList caches = KVCacheBuilder::for_model(model, config);
    uint64_t seed = 1;
    for (int64_t chunk : {70, 1, 1, 40, 1}) {  // a prefill, decode steps, a second chunk
      for (const auto& cache : caches) {       // layer by layer, as the host runs them
        const lm::Tensor k = test_support::random_kv(1, 2, chunk, 16, seed++, lm::DType::F16);
        const lm::Tensor v = test_support::random_kv(1, 2, chunk, 16, seed++, lm::DType::F16);
        cache->update_and_fetch(k, v);
      }
    }
    std::size_t total = 0;
    for (const auto& cache : caches) total += cache->nbytes();
    const auto after = test_support::allocation_snapshot();
    EXPECT_EQ(static_cast<std::size_t>(after.aligned_live_bytes - before.aligned_live_bytes), total) << config.method;
    EXPECT_GT(total, 0u);
  }
  // Dropping the list frees everything, coordinator included.
  EXPECT_EQ(test_support::allocation_snapshot().aligned_live_bytes, before.aligned_live_bytes) << config.method;
}

TEST(CrossLayerMemory, XQuantListNbytesIsWhatIsAllocated) {
  KVCacheConfig c;
  c.method = "xquant";
  expect_list_bytes_are_allocated(c);
  c.xquant.xquant_group_size = 3;
  c.xquant.xquant_residual_bits = 0;
  expect_list_bytes_are_allocated(c);
}

TEST(CrossLayerMemory, MiniCacheListNbytesIsWhatIsAllocated) {
  KVCacheConfig c;
  c.method = "minicache";
  c.minicache.minicache_start_frac = 0.0;  // two merge groups and a lone primary
  expect_list_bytes_are_allocated(c);
}

}  // namespace
}  // namespace veloxquant
