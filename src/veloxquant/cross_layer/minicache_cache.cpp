#include "veloxquant/cross_layer/minicache_cache.h"

#include "base/error.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/cross_layer/slerp_merge.h"
#include "veloxquant/cross_layer/wiring_registry.h"

namespace veloxquant {

MiniCacheCache::MiniCacheCache(MiniCacheMergeOptions options, cross_layer::LayerRole role,
                               std::shared_ptr<MiniCacheCoordinator> coordinator, uint64_t wiring_id)
    : options_(options), role_(role), coordinator_(std::move(coordinator)), wiring_id_(wiring_id) {}

std::pair<lm::Tensor, lm::Tensor> MiniCacheCache::merge_with_primary(const lm::Tensor& keys, const lm::Tensor& values) {
  const std::shared_ptr<const MiniCacheRows> primary =
      coordinator_ ? coordinator_->fetch(role_.group_id, offset()) : nullptr;
  if (!primary || primary->keys.shape() != keys.shape() || primary->values.shape() != values.shape()) {
    return {keys, values};  // nothing to merge with: lossless
  }
  std::pair<lm::Tensor, lm::Tensor> out;
  for (const bool is_key : {true, false}) {
    const lm::Tensor& mine = is_key ? keys : values;
    const std::vector<float> p = (is_key ? primary->keys : primary->values).contiguous().to_f32();
    const std::vector<float> m = mine.contiguous().to_f32();
    std::vector<float> merged(m.size());
    const int64_t d = mine.dim(3), vectors = mine.numel() / d;
    for (int64_t i = 0; i < vectors; ++i) {
      const bool kept = cross_layer::merge_token(p.data() + i * d, m.data() + i * d, static_cast<int>(d),
                                                 options_.retention_threshold, options_.slerp_t, merged.data() + i * d);
      (kept ? retained_ : merged_) += 1;
    }
    (is_key ? out.first : out.second) = lm::Tensor::from_f32(merged, mine.shape(), mine.dtype());
  }
  return out;
}

lm::KeysValues MiniCacheCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "MiniCacheCache::update_and_fetch");
  if (!rows_) rows_ = std::make_shared<lm::FullKVCache>(keys.dtype());
  if (role_.leader) {
    if (coordinator_ && role_.n_readers > 0) {
      auto published = std::make_shared<MiniCacheRows>(MiniCacheRows{keys.clone(), values.clone()});
      coordinator_->publish(role_.group_id, offset(), keys.dim(2), role_.n_readers, std::move(published));
    }
    return rows_->update_and_fetch(keys, values);
  }
  const auto [k, v] = merge_with_primary(keys, values);
  return rows_->update_and_fetch(k, v);
}

int64_t MiniCacheCache::trim(int64_t n) {
  if (n < 0) throw base::InvalidArgument("MiniCacheCache::trim: n must be >= 0, got " + std::to_string(n));
  return rows_ ? rows_->trim(n) : 0;
}

std::vector<lm::Tensor> MiniCacheCache::state() const { return rows_ ? rows_->state() : std::vector<lm::Tensor>{}; }

std::vector<std::string> MiniCacheCache::meta_state() const {
  return {role_.leader ? "primary" : "merge",
          rows_ ? std::string(lm::dtype_name(rows_->kv_dtype())) : "none",
          std::to_string(role_.group_id),
          std::to_string(role_.n_readers),
          std::to_string(role_.member),
          std::to_string(wiring_id_),
          std::to_string(coordinator_ ? coordinator_->max_ctx() : 0)};
}

void MiniCacheCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "MiniCacheCache";
  if (meta.size() != 7 || (meta[0] != "primary" && meta[0] != "merge")) {
    throw base::FormatError(
        "MiniCacheCache::from_state: expected meta {primary|merge, dtype, group_id, n_readers, "
        "member, wiring_id, max_ctx}, got " +
        std::to_string(meta.size()) + " entries");
  }
  const bool leader = meta[0] == "primary";
  if (coordinator_ && leader != role_.leader) {
    throw base::FormatError("MiniCacheCache::from_state: the saved layer is a " + meta[0] +
                            " layer but this layer is wired as a " + (role_.leader ? "primary" : "merge") +
                            " layer (saved with other minicache options?)");
  }
  if (!coordinator_) {
    // Loaded alone: take the saved role and rejoin the list's coordinator (wiring_registry.h).
    role_ = {leader, static_cast<int>(cache_rows::parse_meta_int(meta[2], who, "group_id")),
             static_cast<int>(cache_rows::parse_meta_int(meta[3], who, "n_readers")),
             static_cast<int>(cache_rows::parse_meta_int(meta[4], who, "member"))};
    wiring_id_ = static_cast<uint64_t>(cache_rows::parse_meta_int(meta[5], who, "wiring_id"));
    const int64_t max_ctx = cache_rows::parse_meta_int(meta[6], who, "max_ctx");
    if (wiring_id_ != 0) {
      coordinator_ = cross_layer::rejoin_coordinator<MiniCacheCoordinator>(
          "minicache", wiring_id_, role_.group_id, role_.member,
          [&] { return std::make_shared<MiniCacheCoordinator>(max_ctx, "minicache_max_ctx"); });
    }
  }
  if (state.empty()) {
    rows_.reset();
    return;
  }
  rows_ = std::make_shared<lm::FullKVCache>(state[0].dtype());
  rows_->from_state(state, {std::string(lm::dtype_name(state[0].dtype()))});
}

std::shared_ptr<lm::KVCache> MiniCacheCache::clone() const {
  auto copy = std::make_shared<MiniCacheCache>(options_, role_, coordinator_, wiring_id_);
  if (rows_) copy->rows_ = std::static_pointer_cast<lm::FullKVCache>(rows_->clone());
  copy->merged_ = merged_;
  copy->retained_ = retained_;
  return copy;
}

std::shared_ptr<lm::KVCache> make_minicache_cache(const KVCacheConfig& config) {
  const MiniCacheOptions& o = config.minicache;
  return std::make_shared<MiniCacheCache>(MiniCacheMergeOptions{static_cast<float>(o.minicache_retention_threshold),
                                                                static_cast<float>(o.minicache_slerp_t)});
}

}  // namespace veloxquant
