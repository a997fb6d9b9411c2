#include "veloxquant/caches/age_tiered_cache.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/caches/age_tier_rows.h"
#include "veloxquant/errors.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

namespace {
constexpr const char* kTypeName = "AgeTieredCache";
constexpr int kOld = 0, kMid = 1, kRecent = 2;

void check_options(const AgeTieredOptions& o) {
  const auto check_bits = [](const char* field, int bits) {
    if (bits < 1 || bits > 8) {
      throw QuantizerConfigError(std::string(field) + " must lie in [1, 8], got " + std::to_string(bits));
    }
  };
  check_bits("age_bits_recent", o.age_bits_recent);
  check_bits("age_bits_mid", o.age_bits_mid);
  check_bits("age_bits_old", o.age_bits_old);
  if (o.age_group_size < 1 || o.age_group_size > 4096) {
    throw QuantizerConfigError("age_group_size must lie in [1, 4096], got " + std::to_string(o.age_group_size));
  }
  if (o.age_recent_boundary < 0) {
    throw QuantizerConfigError("age_recent_boundary must be >= 0, got " + std::to_string(o.age_recent_boundary));
  }
  if (o.age_mid_boundary < o.age_recent_boundary) {
    throw QuantizerConfigError("age_mid_boundary (" + std::to_string(o.age_mid_boundary) +
                               ") must not be below age_recent_boundary (" + std::to_string(o.age_recent_boundary) +
                               ")");
  }
}

const AgeTieredOptions& checked(const AgeTieredOptions& o) {
  check_options(o);
  return o;
}
}  // namespace

AgeTieredCache::AgeTieredCache(const AgeTieredOptions& options)
    : options_(checked(options)),
      tiers_{AgeTier(options.age_bits_old, options.age_group_size, -1),
             AgeTier(options.age_bits_mid, options.age_group_size,
                     int64_t{options.age_mid_boundary} - options.age_recent_boundary),
             AgeTier(options.age_bits_recent, options.age_group_size, options.age_recent_boundary)} {}

std::array<int64_t, 3> AgeTieredCache::tier_rows(int64_t tokens) const {
  const int64_t recent = std::min<int64_t>(tokens, options_.age_recent_boundary);
  const int64_t young = std::min<int64_t>(tokens, options_.age_mid_boundary);  // recent + mid
  return {tokens - young, young - recent, recent};
}

std::size_t AgeTieredCache::nbytes() const {
  std::size_t total = 0;
  for (const AgeTier& t : tiers_) total += t.nbytes();
  return total;
}

void AgeTieredCache::age_rows(int from, int to, int64_t count) {
  if (count <= 0) return;
  AgeTier& src = tiers_[static_cast<std::size_t>(from)];
  AgeTier& dst = tiers_[static_cast<std::size_t>(to)];
  dst.reserve_back(count);
  thread_local std::vector<float> key, value;  // this thread's, reused: no allocation per step
  key.resize(static_cast<std::size_t>(dk_));
  value.resize(static_cast<std::size_t>(dv_));
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      for (int64_t i = 0; i < count; ++i) {
        src.decode_key(b, h, i, key.data());
        src.decode_value(b, h, i, value.data());
        dst.encode_back(b, h, i, key.data(), value.data());
      }
    }
  }
  dst.commit_back(count);
  src.drop_front(count);
}

void AgeTieredCache::store(const lm::Tensor& keys, const lm::Tensor& values) {
  lm::check_new_tokens(keys, values, "AgeTieredCache::update_and_fetch");
  if (!tiers_[0].allocated()) {
    batch_ = keys.dim(0);
    heads_ = keys.dim(1);
    dk_ = keys.dim(3);
    dv_ = values.dim(3);
    dtype_ = keys.dtype();
    for (AgeTier& t : tiers_) t.allocate(batch_, heads_, dk_, dv_);
  } else {
    cache_rows::check_row_layout(keys, values, {batch_, heads_, dk_, dv_}, "AgeTieredCache::update_and_fetch");
  }
  const int64_t s = keys.dim(2), total = offset_ + s;
  const std::array<int64_t, 3> want = tier_rows(total);
  // Rows the new length ages past their tier move down, oldest first, so every tier stays a run
  // of consecutive positions: mid -> old, recent -> old, recent -> mid.
  age_rows(kMid, kOld, std::min(tiers_[kMid].rows(), want[kOld] - tiers_[kOld].rows()));
  age_rows(kRecent, kOld, std::min(tiers_[kRecent].rows(), want[kOld] - tiers_[kOld].rows()));
  age_rows(kRecent, kMid, std::min(tiers_[kRecent].rows(), want[kMid] - tiers_[kMid].rows()));
  // The new rows are coded straight into the tier their age puts them in.
  thread_local std::vector<float> new_k, new_v;
  cache_rows::widen_to_f32(keys, new_k);
  cache_rows::widen_to_f32(values, new_v);
  int64_t next = 0;  // first new row not yet stored
  for (int t = kOld; t <= kRecent; ++t) {
    AgeTier& tier = tiers_[static_cast<std::size_t>(t)];
    const int64_t count = std::min(s - next, want[static_cast<std::size_t>(t)] - tier.rows());
    if (count <= 0) continue;
    tier.reserve_back(count);
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t h = 0; h < heads_; ++h) {
        const int64_t bh = b * heads_ + h;
        for (int64_t i = 0; i < count; ++i) {
          tier.encode_back(b, h, i, new_k.data() + (bh * s + next + i) * dk_, new_v.data() + (bh * s + next + i) * dv_);
        }
      }
    }
    tier.commit_back(count);
    next += count;
  }
  offset_ = total;
  tiers_[kOld].set_first_position(0);
  tiers_[kMid].set_first_position(want[kOld]);
  tiers_[kRecent].set_first_position(want[kOld] + want[kMid]);
}

lm::KeysValues AgeTieredCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  store(keys, values);
  return fetch(keys.dtype());
}

lm::KeysValues AgeTieredCache::fetch(lm::DType dtype) const {
  lm::Tensor k({batch_, heads_, offset_, dk_}, dtype);
  lm::Tensor v({batch_, heads_, offset_, dv_}, dtype);
  thread_local std::vector<float> key, value;  // this thread's, reused: no allocation per step
  key.resize(static_cast<std::size_t>(dk_));
  value.resize(static_cast<std::size_t>(dv_));
  const int64_t ke = static_cast<int64_t>(k.element_size()), ve = static_cast<int64_t>(v.element_size());
  for (int64_t b = 0; b < batch_; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t bh = b * heads_ + h;
      for (const AgeTier& tier : tiers_) {
        for (int64_t r = 0; r < tier.rows(); ++r) {
          const int64_t p = tier.first_position() + r;
          tier.decode_key(b, h, r, key.data());
          tier.decode_value(b, h, r, value.data());
          cache_rows::store_f32(key.data(), key.size(), k.raw_data() + (bh * offset_ + p) * dk_ * ke, dtype);
          cache_rows::store_f32(value.data(), value.size(), v.raw_data() + (bh * offset_ + p) * dv_ * ve, dtype);
        }
      }
    }
  }
  return {std::move(k), std::move(v)};
}

void AgeTieredCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument("AgeTieredCache::fused_attention: queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const int64_t first = offset_;
  store(*request.keys, *request.values);
  attention::check_fused_shapes("AgeTieredCache::fused_attention", q, *request.keys, batch_, heads_, dk_, dv_, out);
  // Oldest tier first; an empty tier is no segment.
  const AgeTierRows rows[] = {AgeTierRows(tiers_[kOld]), AgeTierRows(tiers_[kMid]), AgeTierRows(tiers_[kRecent])};
  const attention::RowSource* segments[3];
  int n = 0;
  for (const AgeTierRows& r : rows) {
    if (r.rows(0, 0) > 0) segments[n++] = &r;
  }
  lm::Tensor contiguous_queries;
  const attention::AttentionCall call = attention::call_from_request(request, heads_, first, out, contiguous_queries);
  attention::attend(call, segments, n, attention::request_pool(request));
}

std::vector<lm::Tensor> AgeTieredCache::state() const {
  if (!tiers_[0].allocated()) return {};
  std::vector<lm::Tensor> out;
  for (const AgeTier& t : tiers_) {
    for (lm::Tensor& x : t.state()) out.push_back(std::move(x));
  }
  return out;
}

std::vector<std::string> AgeTieredCache::meta_state() const {
  const AgeTieredOptions& o = options_;
  return {std::to_string(o.age_recent_boundary),
          std::to_string(o.age_mid_boundary),
          std::to_string(o.age_bits_recent),
          std::to_string(o.age_bits_mid),
          std::to_string(o.age_bits_old),
          std::to_string(o.age_group_size),
          std::to_string(dk_),
          std::to_string(dv_),
          std::to_string(offset_),
          std::string(lm::dtype_name(dtype_))};
}

void AgeTieredCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const char* who = "AgeTieredCache::from_state";
  if (meta.size() != 10) {
    throw base::FormatError(std::string(who) + ": expected 10 meta entries (recent boundary, mid boundary, recent / " +
                            "mid / old bits, group, key dim, value dim, offset, dtype), got " +
                            std::to_string(meta.size()));
  }
  const auto meta_int = [&](std::size_t i, const char* what) {
    return static_cast<int>(cache_rows::parse_meta_int(meta[i], who, what));
  };
  AgeTieredOptions o;
  o.age_recent_boundary = meta_int(0, "recent boundary");
  o.age_mid_boundary = meta_int(1, "mid boundary");
  o.age_bits_recent = meta_int(2, "recent bits");
  o.age_bits_mid = meta_int(3, "mid bits");
  o.age_bits_old = meta_int(4, "old bits");
  o.age_group_size = meta_int(5, "group");
  AgeTieredCache fresh(o);  // validates the options (QuantizerConfigError names the field)
  const int64_t dk = cache_rows::parse_meta_int(meta[6], who, "key dim");
  const int64_t dv = cache_rows::parse_meta_int(meta[7], who, "value dim");
  const int64_t offset = cache_rows::parse_meta_int(meta[8], who, "offset");
  const lm::DType dtype = lm::parse_float_dtype(meta[9]);
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(std::string(who) + ": no tensors for offset " + meta[8]);
    *this = std::move(fresh);
    return;
  }
  if (state.size() != 6)
    throw base::FormatError(std::string(who) + ": expected 6 tensors, got " + std::to_string(state.size()));
  if (dk < 1 || dv < 1 || offset < 1 || state[0].ndim() != 4) {
    throw base::FormatError(std::string(who) + ": bad key dim / value dim / offset " + meta[6] + " / " + meta[7] +
                            " / " + meta[8]);
  }
  fresh.batch_ = state[0].dim(0);
  fresh.heads_ = state[0].dim(1);
  fresh.dk_ = dk;
  fresh.dv_ = dv;
  fresh.dtype_ = dtype;
  const std::array<int64_t, 3> want = fresh.tier_rows(offset);
  int64_t position = 0;
  for (std::size_t t = 0; t < 3; ++t) {
    AgeTier& tier = fresh.tiers_[t];
    tier.allocate(fresh.batch_, fresh.heads_, dk, dv);
    tier.restore(state[2 * t], state[2 * t + 1], who);
    if (tier.rows() != want[t]) {
      throw base::FormatError(std::string(who) + ": the " + std::to_string(tier.bits()) + "-bit tier holds " +
                              std::to_string(tier.rows()) + " rows, offset " + meta[8] + " puts " +
                              std::to_string(want[t]) + " there");
    }
    tier.set_first_position(position);
    position += want[t];
  }
  fresh.offset_ = offset;
  *this = std::move(fresh);
}

std::shared_ptr<lm::KVCache> AgeTieredCache::clone() const {
  auto copy = std::make_shared<AgeTieredCache>(*this);
  for (std::size_t t = 0; t < 3; ++t) copy->tiers_[t] = tiers_[t].clone();
  return copy;
}

void validate_age_tiered_options(const KVCacheConfig& config) { check_options(config.options<AgeTieredOptions>()); }

std::shared_ptr<lm::KVCache> make_age_tiered_cache(const KVCacheConfig& config) {
  validate_age_tiered_options(config);
  return std::make_shared<AgeTieredCache>(config.options<AgeTieredOptions>());
}

MethodDescriptor age_tiered_method() {
  MethodDescriptor m;
  m.name = "age_tiered";
  m.family = "quantization";
  m.is_servable = true;
  m.capabilities = {.trimmable = false, .fused_attention = true, .real_compression = true};
  m.blurb =
      "Precision by token age: the last age_recent_boundary tokens at age_bits_recent, those younger than "
      "age_mid_boundary at age_bits_mid, older ones at age_bits_old (per-token group code, keys and values)";
  m.paper = "No paper: the original project's AgeTieredKV (its issue #256)";
  m.deviations =
      "Rows are really stored at their tier's width and re-coded from their decoded values when they age "
      "into the next tier (the original keeps every row in full precision and re-quantizes all of them at "
      "every step, so it only counts bytes); with the default widths the nested grids make the re-coding "
      "lossless up to the f16 rounding of the stored (scale, min). Not trimmable: precision a row lost "
      "cannot come back.";
  m.docs = "docs/methods/age_tiered.md";
  m.fields = {
      option_field("age_recent_boundary", &AgeTieredOptions::age_recent_boundary,
                   "Tokens younger than this (the most recent ones) are held at age_bits_recent", 0, 1 << 30),
      option_field("age_mid_boundary", &AgeTieredOptions::age_mid_boundary,
                   "Tokens younger than this (and not recent) are held at age_bits_mid; older ones at age_bits_old", 0,
                   1 << 30),
      option_field("age_bits_recent", &AgeTieredOptions::age_bits_recent, "Bits of the recent tier", 1, 8),
      option_field("age_bits_mid", &AgeTieredOptions::age_bits_mid, "Bits of the mid tier", 1, 8),
      option_field("age_bits_old", &AgeTieredOptions::age_bits_old, "Bits of the old tier", 1, 8),
      option_field("age_group_size", &AgeTieredOptions::age_group_size,
                   "Channels per (scale, min) pair of a row's group code", 1, 4096),
  };
  m.validate = validate_age_tiered_options;
  m.make_serving = make_age_tiered_cache;
  m.cache_type_name = kTypeName;
  // Placeholder options: from_state() rebuilds every one of them from meta_state().
  m.make_restorable = [] { return std::make_shared<AgeTieredCache>(AgeTieredOptions{}); };
  return m;
}

}  // namespace veloxquant
