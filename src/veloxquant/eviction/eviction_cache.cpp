#include "veloxquant/eviction/eviction_cache.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "base/logging.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_rows.h"
#include "veloxquant/rows/cache_rows.h"
#include "veloxquant/errors.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/fused_call.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/eviction/eviction_mask.h"
#include "veloxquant/eviction/first_minimum.h"
#include "veloxquant/eviction/eviction_row_source.h"
#include "veloxquant/quant/turboquant_rvq.h"

namespace veloxquant::eviction {

Scoring parse_scoring(const std::string& name) {
  if (name == "auto") return Scoring::kAuto;
  if (name == "proxy") return Scoring::kProxy;
  throw QuantizerConfigError(
      "eviction_scoring must be 'auto' (real queries when the host offers them) or 'proxy' "
      "(the key-as-query proxy), got '" +
      name + "'");
}

const char* scoring_name(Scoring scoring) { return scoring == Scoring::kAuto ? "auto" : "proxy"; }

EvictionCache::EvictionCache(std::string type_name, EvictionPolicy policy, StorageSpec storage, Scoring scoring)
    : type_name_(std::move(type_name)),
      fused_who_(type_name_ + "::fused_attention"),
      policy_(policy),
      scoring_(scoring),
      rows_(policy.budget, policy.uses_scores(), std::move(storage)) {}

void EvictionCache::observe_queries(const lm::Tensor& queries) {
  if (wants_queries()) observed_.observe(queries);
}

void EvictionCache::prepare_rows(const lm::Tensor& keys, const lm::Tensor& values, const std::string& who) {
  lm::check_new_tokens(keys, values, who.c_str());
  if (!rows_.allocated()) {
    rows_.allocate(keys.dim(0), keys.dim(1), keys.dim(3), values.dim(3), keys.dtype());
  } else {
    cache_rows::check_row_layout(keys, values, {rows_.batch(), rows_.heads(), rows_.key_dim(), rows_.value_dim()}, who);
  }
  if (offset_ + keys.dim(2) > INT32_MAX) throw base::InvalidArgument(who + ": positions past 2^31 are not supported");
  const int64_t state_floats = policy_.state_floats(rows_.key_dim());
  if (state_floats > 0 && policy_state_.empty()) {
    policy_state_.assign(static_cast<std::size_t>(rows_.batch() * rows_.heads() * state_floats), 0.0f);
  }
}

lm::KeysValues EvictionCache::update_and_fetch(const lm::Tensor& keys, const lm::Tensor& values) {
  const std::string who = type_name_ + "::update_and_fetch";
  lm::check_new_tokens(keys, values, who.c_str());
  before_update(keys);
  prepare_rows(keys, values, who);
  const int64_t batch = keys.dim(0), heads = keys.dim(1), total = rows_.rows() + keys.dim(2);
  lm::Tensor out_k({batch, heads, total, keys.dim(3)}, keys.dtype()),
      out_v({batch, heads, total, values.dim(3)}, keys.dtype());
  select_and_store(keys, values, &out_k, &out_v, who);
  return {std::move(out_k), std::move(out_v)};
}

void EvictionCache::select_and_store(const lm::Tensor& keys, const lm::Tensor& values, lm::Tensor* out_k,
                                     lm::Tensor* out_v, const std::string& who) {
  const int64_t batch = keys.dim(0), heads = keys.dim(1), s = keys.dim(2), dk = keys.dim(3), dv = values.dim(3);
  const int64_t stored = rows_.rows(), total = stored + s;
  // This thread's reused buffers (the tasks below only read them): a decode step through the
  // general selection allocates nothing once the shapes have been seen.
  // (Named through references: the pool's threads must read this thread's buffers, and a
  // thread_local named inside the task would be the worker's own.)
  thread_local std::vector<float> widened_k, widened_v;
  cache_rows::widen_to_f32(keys, widened_k);
  cache_rows::widen_to_f32(values, widened_v);
  const std::vector<float>& new_k = widened_k;
  const std::vector<float>& new_v = widened_v;
  const lm::DType dtype = keys.dtype();
  const bool real = wants_queries() && observed_.matches(batch, heads, s, dk);
  last_used_queries_ = real;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  std::vector<std::vector<int32_t>>& kept = kept_rows_;  // one per head, reused
  kept.resize(static_cast<std::size_t>(batch * heads));
  rows_.reserve(total);  // before the heads run in parallel: it reallocates all of them

  // Heads are independent: each task reads its own rows and writes its own output rows.
  const auto select_heads = [&](int64_t begin, int64_t end) {
    thread_local Candidates c;  // each pool thread's, reused
    for (int64_t bh = begin; bh < end; ++bh) {
      const int64_t b = bh / heads, h = bh % heads;
      const float* k_new = new_k.data() + bh * s * dk;
      const float* v_new = new_v.data() + bh * s * dv;
      c.stored = stored;
      c.dim = dk;
      c.keys.resize(static_cast<std::size_t>(total * dk));
      rows_.decode_keys(b, h, c.keys.data());
      std::copy_n(k_new, s * dk, c.keys.data() + stored * dk);
      // resize, not assign(n, ...): assign reallocates to exactly n, i.e. every step while the
      // store grows.
      c.positions.resize(static_cast<std::size_t>(total));
      std::copy_n(rows_.positions(b, h), stored, c.positions.data());
      for (int64_t t = 0; t < s; ++t)
        c.positions[static_cast<std::size_t>(stored + t)] = static_cast<int32_t>(offset_ + t);
      c.scores.resize(static_cast<std::size_t>(total));
      std::fill(c.scores.begin(), c.scores.end(), 0.0f);
      if (const float* carried = rows_.scores(b, h)) std::copy_n(carried, stored, c.scores.data());
      const int64_t state_floats = policy_.state_floats(dk);
      c.head_state = state_floats > 0 ? policy_state_.data() + bh * state_floats : nullptr;
      if (policy_.needs_values()) {  // cam blends evicted values into survivors, curdkv scores them
        c.value_dim = dv;
        c.values.resize(static_cast<std::size_t>(total * dv));
        rows_.decode_values(b, h, c.values.data());
        std::copy_n(v_new, s * dv, c.values.data() + stored * dv);
        if (policy_.merges()) {
          c.modified.resize(static_cast<std::size_t>(total));
          std::fill(c.modified.begin(), c.modified.end(), 0);
        }
      }
      if (out_k) {
        // The returned rows: every candidate, in the input dtype (stored rows copied as stored,
        // new rows converted back exactly from their f32 widening).
        const int64_t es = static_cast<int64_t>(out_k->element_size());
        std::byte* head_k = out_k->raw_data() + bh * total * dk * es;
        std::byte* head_v = out_v->raw_data() + bh * total * dv * es;
        rows_.write_keys(b, h, dtype, head_k);
        rows_.write_values(b, h, dtype, head_v);
        cache_rows::store_f32(k_new, static_cast<std::size_t>(s * dk), head_k + stored * dk * es, dtype);
        cache_rows::store_f32(v_new, static_cast<std::size_t>(s * dv), head_v + stored * dv * es, dtype);
      }
      // The lambda captures one pointer, so std::function holds it without allocating.
      const struct {
        bool real;
        const ObservedQueries& observed;
        int64_t b, h, heads, dk;
        const float* k_new;
      } from{real, observed_, b, h, heads, dk, k_new};
      const QuerySource queries = [&from](int64_t token, std::vector<float>& out) -> int64_t {
        if (from.real) return from.observed.group_queries(from.b, from.h, from.heads, token, out);
        out.assign(from.k_new + token * from.dk, from.k_new + (token + 1) * from.dk);  // the key-as-query proxy
        return 1;
      };
      std::vector<int32_t>& keep = kept[static_cast<std::size_t>(bh)];
      select_rows(policy_, c, queries, scale, keep);
      if (!policy_.merges()) {
        rows_.compact(b, h, keep, c.positions.data(), c.scores.data(), k_new, v_new);
        continue;
      }
      // New rows are encoded from the (possibly blended) candidates; kept stored rows that a
      // merge changed are re-encoded where compaction put them.
      rows_.compact(b, h, keep, c.positions.data(), c.scores.data(), c.keys.data() + stored * dk,
                    c.values.data() + stored * dv);
      for (std::size_t i = 0; i < keep.size(); ++i) {
        const std::size_t src = static_cast<std::size_t>(keep[i]);
        if (keep[i] >= stored || !c.modified[src]) continue;
        rows_.rewrite_row(b, h, static_cast<int64_t>(i), policy_.merge_keys ? c.keys.data() + src * dk : nullptr,
                          c.values.data() + src * dv);
      }
    }
  };
  // curdkv scores each token with two independent leverage problems, which it runs as two pool
  // tasks (eviction_policy.cpp score_by_leverage; inline when called from a pool task). With
  // fewer threads than heads its heads go one after the other here: 3 kv heads on 2 threads left
  // one thread idle a third of the time, two equal problems per token keep both busy. With at
  // least as many threads as heads, the heads run in parallel as for every other policy.
  base::ThreadPool& pool = base::ThreadPool::global();
  if (policy_.kind == EvictionPolicy::Kind::kLeverage && pool.size() < batch * heads) {
    select_heads(0, batch * heads);
  } else {
    pool.parallel_for(batch * heads, select_heads);
  }
  for (const std::vector<int32_t>& k : kept) {
    if (k.size() != kept[0].size()) {
      throw std::logic_error(who + ": heads kept different row counts (" + std::to_string(k.size()) + " vs " +
                             std::to_string(kept[0].size()) + ")");
    }
  }
  rows_.commit_rows(static_cast<int64_t>(kept[0].size()));
  offset_ += s;
  observed_.clear();
  check_retention();
}

void EvictionCache::check_retention() {
  if (policy_.min_retention <= 0.0 || retention_reported_ || offset_ == 0) return;
  const double retention = double(policy_.budget) / double(offset_);
  if (retention >= policy_.min_retention) return;
  retention_reported_ = true;
  const std::string message = type_name_ + ": the budget keeps " + std::to_string(policy_.budget) + " of " +
                              std::to_string(offset_) + " tokens (retention " + std::to_string(retention) +
                              "), below the minimum retention " + std::to_string(policy_.min_retention);
  if (policy_.on_low_retention == EvictionPolicy::LowRetention::kRaise) throw QuantizerConfigError(message);
  if (policy_.on_low_retention == EvictionPolicy::LowRetention::kWarn) {
    // Once per process, as Python's warnings module shows a warning once per location.
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) base::log_warning(message);
  }
}

void EvictionCache::change_budget(int64_t budget) {
  if (budget == policy_.budget) return;
  const std::string who = type_name_ + "::change_budget";
  EvictionPolicy policy = policy_;
  policy.budget = budget;
  EvictionRows rows(budget, policy.uses_scores(), rows_.spec());
  if (rows_.allocated() && rows_.capacity() > 0) {  // capacity 0: nothing stored yet to carry over
    if (rows_.rows() > budget) {
      const int64_t stored = rows_.rows();
      std::vector<int32_t> keep;
      for (int64_t b = 0; b < rows_.batch(); ++b) {
        for (int64_t h = 0; h < rows_.heads(); ++h) {
          Candidates c;
          c.stored = stored;
          c.dim = rows_.key_dim();
          c.positions.assign(rows_.positions(b, h), rows_.positions(b, h) + stored);
          c.scores.assign(static_cast<std::size_t>(stored), 0.0f);
          if (const float* carried = rows_.scores(b, h)) std::copy_n(carried, stored, c.scores.data());
          keep = shrink_rows(policy, c);
          rows_.compact(b, h, keep, c.positions.data(), c.scores.data(), nullptr, nullptr);
        }
      }
      rows_.commit_rows(static_cast<int64_t>(keep.size()));
    }
    rows.restore(rows_.state(), rows_.key_dim(), rows_.value_dim(), rows_.dtype(), who.c_str());
  }
  rows_ = std::move(rows);
  policy_ = policy;
}

std::vector<lm::Tensor> EvictionCache::state() const {
  std::vector<lm::Tensor> out = rows_.state();
  if (!out.empty() && !policy_state_.empty()) {
    const int64_t per_head = policy_.state_floats(rows_.key_dim());
    out.push_back(lm::Tensor::from_f32(policy_state_, {rows_.batch(), rows_.heads(), per_head}, lm::DType::F32));
  }
  return out;
}

// Attention over the kept rows and this call's new rows as one sequence, through the shared
// driver (the rows' true positions give the causal limits and the window), then the policy
// stores what it keeps. A decode step of a policy that scores by attention reads the weights
// the driver computed for the output — the real queries' weights, with no second pass over the
// keys — and evicts at most one row; multi-token calls and the proxy scoring take the general
// selection (select_and_store).
void EvictionCache::fused_attention(const lm::FusedAttentionRequest& request, lm::Tensor& out) {
  const std::string& who = fused_who_;
  if (!request.queries || !request.keys || !request.values) {
    throw base::InvalidArgument(who + ": queries, keys and values are required");
  }
  const lm::Tensor& q = *request.queries;
  const lm::Tensor& keys = *request.keys;
  const lm::Tensor& values = *request.values;
  lm::check_new_tokens(keys, values, who.c_str());
  before_update(keys);
  prepare_rows(keys, values, who);
  const int64_t batch = keys.dim(0), heads = keys.dim(1), s = keys.dim(2);
  attention::check_fused_shapes(who, q, keys, batch, heads, keys.dim(3), values.dim(3), out);
  const bool scored_step = s == 1 && policy_.uses_scores() && scoring_ == Scoring::kAuto;
  const bool fast = s == 1 && (!policy_.uses_scores() || scored_step);
  // turboquant_rvq key rows with byte-aligned codes are scored in the rotated basis.
  const quant::TurboQuantRvq* rvq = rows_.key_codec().rvq_quantizer();
  if (rvq && !rvq_order_ && attention::CodeOrder::is_planar(rvq->bits(), rvq->dim())) {
    rvq_order_ = std::make_shared<const attention::CodeOrder>(rvq->bits(), rvq->dim());
  }
  const EvictionRowSource kept_rows(rows_, rvq ? rvq_order_.get() : nullptr);
  const attention::DtypeRowSource new_rows(keys, values, s, offset_);
  lm::Tensor contiguous_queries;
  attention::AttentionCall call = attention::call_from_request(request, heads, offset_, out, contiguous_queries);
  const attention::RowSource* segments[] = {&attended_rows(kept_rows, call), &new_rows};
  thread_local std::vector<float> stored_weights, new_weights;
  if (scored_step) {
    stored_weights.resize(static_cast<std::size_t>(batch * heads * std::max<int64_t>(rows_.rows(), 1)));
    new_weights.resize(static_cast<std::size_t>(batch * heads));
    call.row_weights[0] = stored_weights.data();
    call.row_weight_stride[0] = rows_.rows();
    call.row_weights[1] = new_weights.data();
    call.row_weight_stride[1] = 1;
  }
  attention::attend(call, segments, 2, attention::request_pool(request));
  if (scored_step && segments[0] != &kept_rows) expand_row_weights(stored_weights.data(), rows_.rows());
  if (fast) {
    store_decode_step(keys, values, scored_step ? stored_weights.data() : nullptr,
                      scored_step ? new_weights.data() : nullptr);
  } else {
    select_and_store(keys, values, nullptr, nullptr, who);
  }
}

namespace {

// The row a decode step evicts when one new row overflows the budget, or -1 when every row
// is a sink or protected. The candidates are the stored rows 0..stored-1 (their positions and
// scores) and then the new row (index `stored`), ranked by the policy's rule for a single token
// (eviction_policy.h).
int64_t single_victim(const EvictionPolicy& policy, const int32_t* positions, const float* scores, int64_t stored,
                      int32_t new_position, float new_score, int64_t protect, int64_t step) {
  const int64_t total = stored + 1;
  const auto position = [&](int64_t j) { return j < stored ? positions[j] : new_position; };
  const auto score = [&](int64_t j) { return j < stored ? scores[j] : new_score; };
  int64_t victim = -1;
  if (!policy.uses_scores()) {
    // streaming_llm: the oldest row that is not a sink.
    for (int64_t j = 0; j < total && victim < 0; ++j) {
      if (position(j) >= policy.n_sink) victim = j;
    }
    return victim;
  }
  // The first minimum (of the rank: score plus keyformer's noise) outside the sinks and the
  // newest `protect` rows.
  float victim_rank = 0.0f;
  if (!policy.has_noise()) {
    // Without noise the rank is the score: the first minimum outside the sinks, which are a
    // prefix (positions ascend), over the stored rows in SIMD (first_minimum.h), then the new row.
    const int64_t first = std::lower_bound(positions, positions + stored, policy.n_sink) - positions;
    const int64_t end = std::min(total - protect, stored);
    if (first < end) victim = first + first_minimum(scores + first, end - first);
    if (stored < total - protect && new_position >= policy.n_sink && (victim < 0 || new_score < scores[victim])) {
      victim = stored;
    }
    return victim;
  }
  for (int64_t j = 0; j < total - protect; ++j) {
    if (position(j) < policy.n_sink) continue;
    const float r = policy.rank(score(j), position(j), step);
    if (victim < 0 || r < victim_rank) {
      victim = j;
      victim_rank = r;
    }
  }
  return victim;
}

}  // namespace

// One new row per head: the policy's rule for a single token (eviction_policy.h) applied
// directly — scores updated in place from the driver's weights, at most one victim, only the
// rows after it moved (EvictionRows::replace_row) — with nothing decoded, no per-step
// allocation and no pass over a kept list.
void EvictionCache::store_decode_step(const lm::Tensor& keys, const lm::Tensor& values, const float* stored_weights,
                                      const float* new_weights) {
  if (policy_.needs_general_selection()) {
    // cam needs every survivor's key for the similarity and rewrites a survivor's value;
    // morphkv re-scores every row from its voters' keys: the general selection decodes the rows.
    select_and_store(keys, values, nullptr, nullptr, fused_who_);
    return;
  }
  const int64_t batch = keys.dim(0), heads = keys.dim(1), stored = rows_.rows(), total = stored + 1;
  thread_local std::vector<float> new_k, new_v;
  cache_rows::widen_to_f32(keys, new_k);
  cache_rows::widen_to_f32(values, new_v);
  const int64_t dk = keys.dim(3), dv = values.dim(3);
  const bool over = total > policy_.budget;
  rows_.reserve(total);
  const int64_t protect = policy_.effective_protect();
  const auto position = static_cast<int32_t>(offset_);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t bh = b * heads + h;
      // The stored rows' scores are updated where they lie; the new row's score travels beside.
      float* scores = rows_.mutable_scores(b, h);
      float new_score = 0.0f;
      if (scores != nullptr) {
        if (policy_.uses_attention() && stored_weights) {
          policy_.update_scores(scores, stored_weights + bh * stored, stored, scores);
          new_score = new_weights[bh];
        } else if (policy_.uses_scores()) {
          // Scores fixed on arrival (knorm): carried as they are; the driver's weights are not read.
          new_score = policy_.arrival_score(new_k.data() + bh * dk, dk, 0.0f);
        } else {
          std::fill(scores, scores + stored, 0.0f);
        }
      }
      const int64_t victim =
          over ? single_victim(policy_, rows_.positions(b, h), scores, stored, position, new_score, protect, offset_)
               : -1;
      if (over && victim < 0) {
        throw std::logic_error(type_name_ + ": no evictable row (sinks and protected rows fill the budget)");
      }
      // The new row itself evicted (nothing protects it): the stored rows stay as they are.
      if (victim == stored) continue;
      rows_.replace_row(b, h, victim, position, new_score, new_k.data() + bh * dk, new_v.data() + bh * dv);
    }
  }
  rows_.commit_rows(over ? stored : total);
  last_used_queries_ = stored_weights != nullptr && policy_.uses_attention();
  offset_ += 1;
  observed_.clear();
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

namespace {

std::string real_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

double parse_real(const std::string& text, const std::string& who, const char* what) {
  try {
    std::size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw base::FormatError(who + ": " + what + " '" + text + "' is not a number");
}

constexpr std::size_t kMetaEntriesBefore13 = 19, kMetaEntriesIssue13First = 34, kMetaEntries = 39;

}  // namespace

std::shared_ptr<lm::KVCache> EvictionCache::clone() const {
  auto copy = std::make_shared<EvictionCache>(*this);
  copy->rows_ = rows_.clone();
  return copy;
}

std::vector<std::string> EvictionCache::meta_state() const {
  const std::string decay = real_text(policy_.decay);
  const StorageSpec& st = rows_.spec();
  return {policy_kind_name(policy_.kind), std::to_string(policy_.budget), std::to_string(policy_.n_sink),
          std::to_string(policy_.protect_recent), decay, policy_.accumulate ? "1" : "0",
          std::to_string(policy_.obs_window), std::to_string(policy_.pool_kernel), scoring_name(scoring_),
          storage_kind_name(st.kind), std::to_string(st.bits), std::to_string(st.group),
          std::to_string(st.rvq_value_bits), std::to_string(st.seed), st.rvq_stage2_scale,
          std::string(lm::dtype_name(rows_.dtype())), std::to_string(rows_.key_dim()),
          std::to_string(rows_.value_dim()), std::to_string(offset_),
          // Appended for the policies added with issue 13 (files of 19 entries read as before).
          policy_.max_combine ? "1" : "0", std::to_string(policy_.key_norm_sign), real_text(policy_.noise_tau_init),
          real_text(policy_.noise_tau_end), std::to_string(policy_.noise_anneal_steps),
          std::to_string(policy_.noise_seed), merge_name(policy_.merge), policy_.merge_keys ? "1" : "0",
          policy_.merge_gate ? "1" : "0", std::to_string(policy_.merge_seed), std::to_string(policy_.chunk_size),
          std::to_string(policy_.calib_tokens), std::to_string(policy_.direction_sign),
          real_text(policy_.min_retention), std::to_string(static_cast<int>(policy_.on_low_retention)),
          // Appended for curdkv and nestedkv (files of 34 entries read as before).
          std::to_string(policy_.rank_cap), std::to_string(policy_.anchor_window), real_text(policy_.anchor_beta),
          real_text(policy_.anchor_tau), real_text(policy_.anchor_kappa)};
}

void EvictionCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const std::string who = type_name_ + "::from_state";
  if (meta.size() != kMetaEntries && meta.size() != kMetaEntriesIssue13First && meta.size() != kMetaEntriesBefore13) {
    throw base::FormatError(who + ": expected " + std::to_string(kMetaEntries) + " (or " +
                            std::to_string(kMetaEntriesIssue13First) + " or " + std::to_string(kMetaEntriesBefore13) +
                            ") meta entries, got " + std::to_string(meta.size()));
  }
  const auto num = [&](std::size_t i, const char* what) {
    return cache_rows::parse_meta_int(meta[i], who.c_str(), what);
  };
  EvictionPolicy policy;
  policy.kind = parse_policy_kind(meta[0]);
  policy.budget = num(1, "budget");
  policy.n_sink = num(2, "n_sink");
  policy.protect_recent = num(3, "protect_recent");
  policy.decay = parse_real(meta[4], who, "decay");
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
  if (meta.size() >= kMetaEntriesIssue13First) {
    policy.max_combine = num(19, "max_combine") != 0;
    policy.key_norm_sign = num(20, "key_norm_sign") < 0 ? -1 : 1;
    policy.noise_tau_init = parse_real(meta[21], who, "noise_tau_init");
    policy.noise_tau_end = parse_real(meta[22], who, "noise_tau_end");
    policy.noise_anneal_steps = num(23, "noise_anneal_steps");
    policy.noise_seed = static_cast<uint64_t>(num(24, "noise_seed"));
    try {
      policy.merge = parse_merge(meta[25]);
    } catch (const base::FormatError& e) {
      throw base::FormatError(who + ": " + e.what());
    }
    policy.merge_keys = num(26, "merge_keys") != 0;
    policy.merge_gate = num(27, "merge_gate") != 0;
    policy.merge_seed = static_cast<uint64_t>(num(28, "merge_seed"));
    policy.chunk_size = std::max<int64_t>(1, num(29, "chunk_size"));
    policy.calib_tokens = num(30, "calib_tokens");
    policy.direction_sign = num(31, "direction_sign") < 0 ? -1 : 1;
    policy.min_retention = parse_real(meta[32], who, "min_retention");
    const int64_t action = num(33, "on_low_retention");
    if (action < 0 || action > 2) throw base::FormatError(who + ": on_low_retention " + meta[33] + " is unknown");
    policy.on_low_retention = static_cast<EvictionPolicy::LowRetention>(action);
  }
  if (meta.size() >= kMetaEntries) {
    policy.rank_cap = num(34, "rank_cap");
    policy.anchor_window = num(35, "anchor_window");
    policy.anchor_beta = parse_real(meta[36], who, "anchor_beta");
    policy.anchor_tau = parse_real(meta[37], who, "anchor_tau");
    policy.anchor_kappa = parse_real(meta[38], who, "anchor_kappa");
  }
  EvictionRows rows(policy.budget, policy.uses_scores(), spec);
  std::vector<float> policy_state;
  if (state.empty()) {
    if (offset != 0) throw base::FormatError(who + ": no tensors for offset " + meta[18]);
  } else {
    std::vector<lm::Tensor> row_tensors = state;
    if (const int64_t per_head = policy.state_floats(key_dim); per_head > 0) {
      const lm::Tensor& extra = row_tensors.back();
      if (row_tensors.size() < 2 || extra.ndim() != 3 || extra.dim(2) != per_head || extra.dtype() != lm::DType::F32) {
        throw base::FormatError(who + ": the last tensor is not the policy state f32 [B, H, " +
                                std::to_string(per_head) + "]");
      }
      policy_state = extra.to_f32();
      row_tensors.pop_back();
    }
    rows.restore(row_tensors, key_dim, value_dim, dtype, who.c_str());
    if (!policy_state.empty() &&
        static_cast<int64_t>(policy_state.size()) != rows.batch() * rows.heads() * policy.state_floats(key_dim)) {
      throw base::FormatError(who + ": policy state does not match " + std::to_string(rows.batch()) + " x " +
                              std::to_string(rows.heads()) + " heads");
    }
    if (rows.rows() > offset) {
      throw base::FormatError(who + ": " + std::to_string(rows.rows()) + " rows stored but offset " + meta[18]);
    }
  }
  policy_ = policy;
  scoring_ = scoring;
  rows_ = std::move(rows);
  policy_state_ = std::move(policy_state);
  // A cache saved past its retention floor already reported it.
  retention_reported_ =
      policy.min_retention > 0 && offset > 0 && double(policy.budget) / double(offset) < policy.min_retention;
  offset_ = offset;
  observed_.clear();
}

}  // namespace veloxquant::eviction
