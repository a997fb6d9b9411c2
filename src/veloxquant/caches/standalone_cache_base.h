#pragma once
// What the standalone caches share (spec §2.4): a ring of `capacity` token slots (the oldest
// slot is overwritten when full; capacity = min(config.capacity or 1,000,000, sliding_window)),
// values quantized to int8 per token (scale = max|v|/127 floored at 1e-8, stored f16; codes
// clip(round(v/scale), -127, 127)), and attend() = softmax(score estimates / sqrt(d)) times the
// dequantized values. A subclass only says how a key is stored and how a query scores it.
//
// Storage grows in 256-token steps up to the capacity (a 1e6-token ring is never allocated up
// front); memory_bytes() is the sum of the buffers really allocated.
#include <cstdint>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "veloxquant/caches/standalone_cache.h"
#include "veloxquant/config/kv_cache_config.h"

namespace veloxquant {

class StandaloneCacheBase : public StandaloneCache {
 public:
  static constexpr int64_t kGrowthStep = 256;
  static constexpr int64_t kDefaultCapacity = 1'000'000;

  void append_key(std::span<const float> key) override;
  void append_value(std::span<const float> value) override;
  std::vector<float> attend(std::span<const float> query) const override;
  std::size_t memory_bytes() const override;
  void reset() override;
  std::size_t size() const override;
  int head_dim() const override { return dim_; }
  std::string method() const override { return method_; }

  int64_t capacity() const { return capacity_; }
  // The dequantized value of the token in `slot` (tests; attend uses it).
  void decode_value(int64_t slot, float* out) const;

 protected:
  StandaloneCacheBase(const KVCacheConfig& config, std::size_t key_bytes_per_token);

  // Stores one key into `slot` (key_slot(slot) has key_bytes_per_token bytes).
  virtual void encode_key(const float* key, int64_t slot) = 0;
  // Estimates of <query, k> for the keys in slots [first, first + count) of each range (at most
  // two ranges: the ring may wrap), written to `out` in range order. A subclass prepares the
  // query once (rotation, sketch, lookup tables) and scores every slot from its codes.
  struct SlotRange {
    int64_t first;
    int64_t count;
  };
  virtual void score_keys(const float* query, const std::vector<SlotRange>& ranges, float* out) const = 0;
  // Bytes a subclass holds besides the key slots (codebooks are shared; calibration data).
  virtual std::size_t extra_bytes() const { return 0; }

  uint8_t* key_slot(int64_t slot) { return keys_.as<uint8_t>() + slot * key_bytes_; }
  const uint8_t* key_slot(int64_t slot) const { return keys_.as<uint8_t>() + slot * key_bytes_; }
  int64_t keys_appended() const { return n_keys_; }
  const KVCacheConfig& config() const { return config_; }

  int dim_;

 private:
  void ensure_slots(int64_t slot);
  void check_length(std::span<const float> v, const char* what) const;

  KVCacheConfig config_;
  std::string method_;
  std::size_t key_bytes_;
  int64_t capacity_;
  int64_t allocated_slots_ = 0;
  int64_t n_keys_ = 0, n_values_ = 0;
  base::AlignedBuffer keys_;
  base::AlignedBuffer values_;  // per slot: d int8 codes then an f16 scale
};

}  // namespace veloxquant
