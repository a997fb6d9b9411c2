#include "veloxquant/eviction/eviction_cache.h"

#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/kv_rows.h"
#include "veloxquant/caches/cache_rows.h"
#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_mask.h"

namespace veloxquant::eviction {

Scoring parse_scoring(const std::string& name) {
  if (name == "auto") return Scoring::kAuto;
  if (name == "proxy") return Scoring::kProxy;
  throw QuantizerConfigError("eviction_scoring must be 'auto' (real queries when the host offers them) or 'proxy' "
                             "(the key-as-query proxy), got '" + name + "'");
}

const char* scoring_name(Scoring scoring) { return scoring == Scoring::kAuto ? "auto" : "proxy"; }

EvictionCache::EvictionCache(std::string type_name, EvictionPolicy policy, StorageSpec storage, Scoring scoring)
    : type_name_(std::move(type_name)),
      policy_(policy),
      scoring_(scoring),
      rows_(policy.budget, policy.uses_scores(), std::move(storage)) {}

void EvictionCache::observe_queries(const lm::Tensor& queries) {
  if (wants_queries()) observed_.observe(queries);
}

lm::KeysValues EvictionCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  const std::string who = type_name_ + "::update_and_fetch";
  lm::check_new_tokens(keys, values, who.c_str());
  const int64_t batch = keys.dim(0), heads = keys.dim(1), s = keys.dim(2), dk = keys.dim(3), dv = values.dim(3);
  if (!rows_.allocated()) {
    rows_.allocate(batch, heads, dk, dv, keys.dtype());
  } else {
    cache_rows::check_row_layout(keys, values, {rows_.batch(), rows_.heads(), rows_.key_dim(), rows_.value_dim()},
                                 who);
  }
  if (offset_ + s > INT32_MAX) throw base::InvalidArgument(who + ": positions past 2^31 are not supported");
  const int64_t stored = rows_.rows(), total = stored + s;
  const std::vector<float> new_k = keys.to_f32(), new_v = values.to_f32();
  const lm::DType dtype = keys.dtype();
  lm::Tensor out_k({batch, heads, total, dk}, dtype), out_v({batch, heads, total, dv}, dtype);
  const bool real = wants_queries() && observed_.matches(batch, heads, s, dk);
  last_used_queries_ = real;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  std::vector<std::vector<int32_t>> kept(static_cast<std::size_t>(batch * heads));

  // Heads are independent: each task reads its own rows and writes its own output rows.
  base::ThreadPool::global().parallel_for(batch * heads, [&](int64_t begin, int64_t end) {
    Candidates c;
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      const float* k_new = new_k.data() + bh * s * dk;
      const float* v_new = new_v.data() + bh * s * dv;
      c.stored = stored;
      c.dim = dk;
      c.keys.resize(static_cast<std::size_t>(total * dk));
      rows_.decode_keys(b, h, c.keys.data());
      std::copy_n(k_new, s * dk, c.keys.data() + stored * dk);
      c.positions.assign(rows_.positions(b, h), rows_.positions(b, h) + stored);
      for (int64_t t = 0; t < s; ++t) c.positions.push_back(static_cast<int32_t>(offset_ + t));
      c.scores.assign(static_cast<std::size_t>(total), 0.0f);
      if (const float* carried = rows_.scores(b, h)) std::copy_n(carried, stored, c.scores.data());
      // The returned rows: every candidate, in the input dtype (stored rows copied as stored,
      // new rows converted back exactly from their f32 widening).
      const int64_t es = static_cast<int64_t>(out_k.element_size());
      std::byte* head_k = out_k.raw_data() + bh * total * dk * es;
      std::byte* head_v = out_v.raw_data() + bh * total * dv * es;
      rows_.write_keys(b, h, dtype, head_k);
      rows_.write_values(b, h, dtype, head_v);
      cache_rows::store_f32(k_new, static_cast<std::size_t>(s * dk), head_k + stored * dk * es, dtype);
      cache_rows::store_f32(v_new, static_cast<std::size_t>(s * dv), head_v + stored * dv * es, dtype);
      const QuerySource queries = [&](int64_t token, std::vector<float>& out) -> int64_t {
        if (real) return observed_.group_queries(b, h, heads, token, out);
        out.assign(k_new + token * dk, k_new + (token + 1) * dk);  // the key-as-query proxy
        return 1;
      };
      kept[static_cast<std::size_t>(bh)] = select_rows(policy_, c, queries, scale);
      rows_.compact(b, h, kept[static_cast<std::size_t>(bh)], c.positions.data(), c.scores.data(), k_new, v_new);
    }
  });
  for (const std::vector<int32_t>& k : kept) {
    if (k.size() != kept[0].size()) {
      throw std::logic_error(who + ": heads kept different row counts (" + std::to_string(k.size()) + " vs " +
                             std::to_string(kept[0].size()) + ")");
    }
  }
  rows_.commit_rows(static_cast<int64_t>(kept[0].size()));
  offset_ += s;
  observed_.clear();
  return {std::move(out_k), std::move(out_v)};
}

lm::AttentionMask EvictionCache::make_mask(int64_t n_queries, std::optional<int64_t> window) const {
  // Nothing evicted yet: the stored rows are positions 0..offset-1, the host's rules hold.
  if (!rows_.allocated() || rows_.rows() == offset_) return lm::default_attention_mask(n_queries, window);
  if (n_queries == 1 && !window) return lm::AttentionMask::none();  // one query sees every returned row
  std::vector<std::vector<int64_t>> positions(static_cast<std::size_t>(rows_.batch()));
  for (int64_t b = 0; b < rows_.batch(); ++b) {
    const int32_t* p = rows_.positions(b, 0);  // head 0 speaks for every head (eviction_mask.h)
    std::vector<int64_t>& row = positions[static_cast<std::size_t>(b)];
    row.assign(p, p + rows_.rows());
    for (int64_t i = 0; i < n_queries; ++i) row.push_back(offset_ + i);
  }
  return positional_mask(positions, offset_, n_queries, window);
}

std::vector<std::string> EvictionCache::meta_state() const {
  char decay[32];
  std::snprintf(decay, sizeof decay, "%.17g", policy_.decay);
  const StorageSpec& st = rows_.spec();
  return {policy_kind_name(policy_.kind),
          std::to_string(policy_.budget),
          std::to_string(policy_.n_sink),
          std::to_string(policy_.protect_recent),
          decay,
          policy_.accumulate ? "1" : "0",
          std::to_string(policy_.obs_window),
          std::to_string(policy_.pool_kernel),
          scoring_name(scoring_),
          storage_kind_name(st.kind),
          std::to_string(st.bits),
          std::to_string(st.group),
          std::to_string(st.rvq_value_bits),
          std::to_string(st.seed),
          st.rvq_stage2_scale,
          std::string(lm::dtype_name(rows_.dtype())),
          std::to_string(rows_.key_dim()),
          std::to_string(rows_.value_dim()),
          std::to_string(offset_)};
}

void EvictionCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const std::string who = type_name_ + "::from_state";
  if (meta.size() != 19) {
    throw base::FormatError(who + ": expected 19 meta entries, got " + std::to_string(meta.size()));
  }
  const auto num = [&](std::size_t i, const char* what) { return cache_rows::parse_meta_int(meta[i], who.c_str(), what); };
  EvictionPolicy policy;
  policy.kind = parse_policy_kind(meta[0]);
  policy.budget = num(1, "budget");
  policy.n_sink = num(2, "n_sink");
  policy.protect_recent = num(3, "protect_recent");
  try {
    policy.decay = std::stod(meta[4]);
  } catch (const std::exception&) {
    throw base::FormatError(who + ": decay '" + meta[4] + "' is not a number");
  }
  policy.accumulate = num(5, "accumulate") != 0;
  policy.obs_window = num(6, "obs_window");
  policy.pool_kernel = num(7, "pool_kernel");
  Scoring scoring = Scoring::kAuto;
  StorageSpec spec;
  try {
    scoring = parse_scoring(meta[8]);
    spec.kind = parse_storage_kind(meta[9]);
  } catch (const QuantizerConfigError& e) {
    throw base::FormatError(who + ": " + e.what());
  }
  spec.bits = static_cast<int>(num(10, "bits"));
  spec.group = static_cast<int>(num(11, "group"));
  spec.rvq_value_bits = static_cast<int>(num(12, "rvq_value_bits"));
  spec.seed = num(13, "seed");
  spec.rvq_stage2_scale = meta[14];
  lm::DType dtype = lm::DType::F16;
  try {
    dtype = lm::parse_float_dtype(meta[15]);
  } catch (const base::InvalidArgument& e) {
    throw base::FormatError(who + ": " + e.what());
  }
  const int64_t key_dim = num(16, "key_dim"), value_dim = num(17, "value_dim"), offset = num(18, "offset");
  EvictionRows rows(policy.budget, policy.uses_scores(), spec);
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(who + ": no tensors for offset " + meta[18]);
  } else {
    rows.restore(state, key_dim, value_dim, dtype, who.c_str());
    if (rows.rows() > offset) {
      throw base::FormatError(who + ": " + std::to_string(rows.rows()) + " rows stored but offset " + meta[18]);
    }
  }
  policy_ = policy;
  scoring_ = scoring;
  rows_ = std::move(rows);
  offset_ = offset;
  observed_.clear();
}

}  // namespace veloxquant::eviction
