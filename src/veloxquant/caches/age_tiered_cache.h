#pragma once
// age_tiered (the original's AgeTieredKV, issue #256 there; no paper; spec §6 #43): precision
// gated by a token's age. After a call that leaves T tokens in the cache, the token at position p
// (age T - 1 - p) is held at
//   age_bits_recent  when its age is below age_recent_boundary   (defaults: the last 128 at 8 bits)
//   age_bits_mid     when its age is below age_mid_boundary      (the 896 before them at 4 bits)
//   age_bits_old     otherwise                                   (everything older at 2 bits)
// keys and values alike, each row by the per-token group code (age_group_size channels per f16
// (scale, min); rows/group_affine_codes.h). New tokens are coded straight into the tier their age
// puts them in; a row that ages out of a tier is decoded and re-coded at the next tier's bits.
// With the default widths that re-coding loses nothing against coding the original row: 2^8 - 1 =
// 15 * 17 and 2^4 - 1 = 3 * 5, so each coarser grid's rounding boundaries (odd multiples of half a
// coarse step) fall exactly on boundaries of the finer grid — up to the f16 rounding of the
// stored (scale, min), which tests/veloxquant/age_tiered_cache_test.cpp measures.
//
// Storage (all counted by nbytes()): three AgeTier queues (caches/age_tier.h), each
//   keys, values  U8 [B, H, capacity, row bytes]   row = packed_words(D, b) u32 + groups * (scale, min) f16
// Fused attention reads the three tiers as three segments of the shared driver, oldest first.
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "lm/cache/cache.h"
#include "veloxquant/caches/age_tier.h"
#include "veloxquant/config/kv_cache_config.h"
#include "veloxquant/registry/method_descriptor.h"

namespace veloxquant {

// The original's fields and defaults (spec §3.2 "AgeTieredKV").
struct AgeTieredOptions {
  int age_recent_boundary = 128;
  int age_mid_boundary = 1024;
  int age_bits_recent = 8;
  int age_bits_mid = 4;
  int age_bits_old = 2;
  int age_group_size = 32;
};

class AgeTieredCache : public lm::KVCache {
 public:
  explicit AgeTieredCache(const AgeTieredOptions& options);

  lm::KeysValues update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) override;
  int64_t offset() const override { return offset_; }
  bool empty() const override { return offset_ == 0; }
  std::size_t nbytes() const override;
  // Not trimmable: precision that a row lost when it aged cannot come back, so after a trim the
  // rows would be coarser than a cache fed only the kept tokens holds them (the original keeps
  // every row in full precision and re-quantizes all of them each step — it saves nothing).
  bool is_trimmable() const override { return false; }
  int64_t trim(int64_t) override { return 0; }
  std::vector<lm::Tensor> state() const override;
  std::vector<std::string> meta_state() const override;
  void from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) override;
  std::string type_name() const override { return "AgeTieredCache"; }
  std::shared_ptr<lm::KVCache> clone() const override;
  bool supports_fused_attention() const override { return true; }
  void fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) override;

  const AgeTieredOptions& options() const { return options_; }
  // Tiers oldest first: 0 old, 1 mid, 2 recent.
  const AgeTier& tier(int i) const { return tiers_[static_cast<std::size_t>(i)]; }
  // Live rows each tier holds after `tokens` tokens: {old, mid, recent}.
  std::array<int64_t, 3> tier_rows(int64_t tokens) const;

 private:
  void store(const lm::Tensor& keys, const lm::Tensor& values);
  // Moves the front rows of tier `from` that the new length `tokens` ages past it to the back of
  // tier `to`, re-coded.
  void age_rows(int from, int to, int64_t count);
  lm::KeysValues fetch(lm::DType dtype) const;

  AgeTieredOptions options_;
  std::array<AgeTier, 3> tiers_;
  int64_t batch_ = 0, heads_ = 0, dk_ = 0, dv_ = 0;
  lm::DType dtype_ = lm::DType::F16;
  int64_t offset_ = 0;
};

// QuantizerConfigError naming the field and value.
void validate_age_tiered_options(const KVCacheConfig& config);
std::shared_ptr<lm::KVCache> make_age_tiered_cache(const KVCacheConfig& config);
// The registration (registry/method_table.cpp lists it).
MethodDescriptor age_tiered_method();

}  // namespace veloxquant
