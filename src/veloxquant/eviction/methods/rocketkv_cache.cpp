#include "veloxquant/eviction/methods/rocketkv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "base/error.h"
#include "veloxquant/errors.h"
#include "veloxquant/eviction/eviction_config.h"
#include "veloxquant/eviction/eviction_registration.h"
#include "veloxquant/eviction/methods/snapkv_cache.h"
#include "veloxquant/eviction/page_summaries.h"
#include "veloxquant/eviction/row_codec.h"
#include "veloxquant/rows/cache_rows.h"

namespace veloxquant {

namespace {

constexpr const char* kTypeName = "RocketKVCache";
constexpr const char* kMetaTag = "rocketkv";
constexpr std::size_t kOwnMeta = 4;  // tag, ratio, page_size, head_topk1 after the eviction cache's meta

std::string optional_text(const std::optional<int>& v) { return v ? std::to_string(*v) : "None"; }

std::optional<int> parse_optional(const std::string& text, const std::string& who, const char* what) {
  if (text == "None") return std::nullopt;
  return static_cast<int>(cache_rows::parse_meta_int(text, who.c_str(), what));
}

int power_of_two_near(double x) { return 1 << std::clamp(static_cast<int>(std::lround(std::log2(x))), 0, 20); }

}  // namespace

int rocketkv_page_size_for(double ratio) { return std::min(64, power_of_two_near(2.0 * std::sqrt(ratio))); }

int rocketkv_head_topk1_for(double ratio, int64_t head_dim) {
  return static_cast<int>(std::max<int64_t>(1, head_dim / power_of_two_near(std::sqrt(ratio))));
}

void validate_rocketkv_options(const KVCacheConfig& config) {
  const RocketKVOptions& o = config.options<RocketKVOptions>();
  if (!std::isfinite(o.rocketkv_compression_ratio) || o.rocketkv_compression_ratio < 1.0) {
    throw QuantizerConfigError("rocketkv_compression_ratio must be a finite number >= 1, got " +
                               std::to_string(o.rocketkv_compression_ratio));
  }
  if (o.rocketkv_page_size && *o.rocketkv_page_size < 1) {
    throw QuantizerConfigError("rocketkv_page_size must be None or >= 1, got " + std::to_string(*o.rocketkv_page_size));
  }
  if (o.rocketkv_head_topk1 && (*o.rocketkv_head_topk1 < 1 || *o.rocketkv_head_topk1 > config.head_dim)) {
    throw QuantizerConfigError("rocketkv_head_topk1 must be None or lie in [1, head_dim=" +
                               std::to_string(config.head_dim) + "], got " + std::to_string(*o.rocketkv_head_topk1));
  }
  if (o.rocketkv_obs_window < 1) {
    throw QuantizerConfigError("rocketkv_obs_window must be >= 1, got " + std::to_string(o.rocketkv_obs_window));
  }
  eviction::require_evictable("rocketkv_budget", o.rocketkv_budget, "rocketkv_n_sink", o.rocketkv_n_sink);
  eviction::validate_storage_and_scoring(config);
}

// Stage 1 is SnapKV: its policy, built from rocketkv's fields.
eviction::EvictionPolicy rocketkv_policy(const KVCacheConfig& config) {
  const RocketKVOptions& o = config.options<RocketKVOptions>();
  KVCacheConfig snap = config;
  snap.snapkv.snap_budget = o.rocketkv_budget;
  snap.snapkv.snap_n_sink = o.rocketkv_n_sink;
  snap.snapkv.snap_obs_window = o.rocketkv_obs_window;
  return snapkv_policy(snap);
}

RocketKVCache::RocketKVCache(const KVCacheConfig& config)
    : EvictionCache(kTypeName, (validate_rocketkv_options(config), rocketkv_policy(config)),
                    eviction::storage_of(config), eviction::scoring_of(config)),
      ratio_(config.options<RocketKVOptions>().rocketkv_compression_ratio),
      page_option_(config.options<RocketKVOptions>().rocketkv_page_size),
      topk_option_(config.options<RocketKVOptions>().rocketkv_head_topk1) {}

int64_t RocketKVCache::page_size() const { return page_option_ ? *page_option_ : rocketkv_page_size_for(ratio_); }

int64_t RocketKVCache::head_topk1() const {
  const int64_t d = rows().allocated() ? rows().key_dim() : 0;
  const int64_t k = topk_option_ ? *topk_option_ : rocketkv_head_topk1_for(ratio_, d);
  return d > 0 ? std::min(k, d) : k;
}

void RocketKVCache::ensure_summaries() {
  if (!rows().allocated() || summary_pages_ > 0) return;
  summary_pages_ = eviction::page_count(rows().budget(), page_size());
  const std::size_t n = static_cast<std::size_t>(rows().batch() * rows().heads() * summary_pages_ * rows().key_dim());
  page_max_.assign(n, 0);
  page_min_.assign(n, 0);
  page_prints_.assign(static_cast<std::size_t>(rows().batch() * rows().heads() * summary_pages_),
                      eviction::kNoFingerprint);
}

std::size_t RocketKVCache::nbytes() const {
  return EvictionCache::nbytes() + (page_max_.size() + page_min_.size()) * sizeof(uint16_t) +
         page_prints_.size() * sizeof(uint64_t);
}

// Stage 2 for this call: the pages of each kv head the group's queries bound highest, enough of
// them for ceil(offset / c) rows; every stored row when that is all of them.
const attention::RowSource& RocketKVCache::attended_rows(const attention::RowSource& kept,
                                                         const attention::AttentionCall& call) {
  view_active_ = false;
  ensure_summaries();
  const int64_t stored = rows().rows(), page = page_size();
  const int64_t target = static_cast<int64_t>(std::ceil(static_cast<double>(offset()) / ratio_));
  const int64_t pages = eviction::page_count(stored, page);
  // The sinks' page and the newest page are always attended (the attention sinks and the local
  // window every sparse-attention scheme keeps); the rest by their bounds.
  const bool sink_page = policy().n_sink > 0;
  const int64_t keep_pages = std::max<int64_t>(sink_page ? 2 : 1, (target + page - 1) / page);
  if (stored == 0 || keep_pages >= pages) return kept;
  if (pages > summary_pages_) throw std::logic_error("RocketKVCache: more stored rows than the budget's pages");
  const int64_t batch = call.batch, heads = call.kv_heads, dim = rows().key_dim();
  const int64_t group = call.q_heads / heads, n = call.n_queries;
  if (view_) {
    view_->reset(kept, batch, heads);
  } else {
    view_.emplace(kept, batch, heads);
  }
  view_active_ = true;
  thread_local std::vector<int32_t> channels;
  thread_local std::vector<attention::RowRange> ranges;
  thread_local std::vector<float> keys, scores;
  keys.resize(static_cast<std::size_t>(page * dim));
  scores.resize(static_cast<std::size_t>(pages));
  const eviction::RowCodec& codec = rows().key_codec();
  const int64_t row_bytes = rows().key_row_bytes();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      // The summaries of the rows as stored now: rows move when stage 1 evicts, so a page whose
      // rows (their positions' fingerprint) changed since its summary was built is rebuilt —
      // at a decode step the pages from the victim's on, not all of them.
      const int64_t head = b * heads + h;
      uint16_t* hi = page_max_.data() + head * summary_pages_ * dim;
      uint16_t* lo = page_min_.data() + head * summary_pages_ * dim;
      uint64_t* prints = page_prints_.data() + head * summary_pages_;
      const int32_t* positions = rows().positions(b, h);
      for (int64_t p = 0; p < pages; ++p) {
        const int64_t j0 = p * page, n_rows = std::min(stored, j0 + page) - j0;
        const uint64_t print = eviction::page_fingerprint(positions + j0, n_rows);
        if (print == prints[p]) continue;
        for (int64_t r = 0; r < n_rows;) {  // the head's rows lie in a ring (eviction_rows.h)
          const int64_t n = std::min(n_rows - r, rows().contiguous_rows(b, h, j0 + r));
          codec.decode_rows(rows().key_row(b, h, j0 + r), row_bytes, n, static_cast<int>(dim), keys.data() + r * dim);
          r += n;
        }
        eviction::summarize_pages(keys.data(), n_rows, dim, page, hi + p * dim, lo + p * dim);
        prints[p] = print;
      }
      // The group's queries of this call: q heads h * group .. (h + 1) * group - 1, n each.
      const float* q = call.queries + ((b * call.q_heads + h * group) * n) * dim;
      eviction::top_channels(q, group * n, dim, head_topk1(), channels);
      eviction::page_scores(hi, lo, pages, dim, channels, q, group * n, scores.data());
      if (sink_page) scores[0] = std::numeric_limits<float>::infinity();
      scores[static_cast<std::size_t>(pages - 1)] = std::numeric_limits<float>::infinity();
      eviction::top_pages(scores.data(), pages, page, stored, keep_pages, ranges);
      view_->set_ranges(b, h, ranges);
    }
  }
  return *view_;
}

void RocketKVCache::expand_row_weights(float* weights, int64_t stride) const {
  if (!view_active_) return;
  thread_local std::vector<float> attended;
  for (int64_t b = 0; b < rows().batch(); ++b) {
    for (int64_t h = 0; h < rows().heads(); ++h) {
      float* w = weights + (b * rows().heads() + h) * stride;
      const int64_t m = view_->rows(b, h);
      attended.resize(static_cast<std::size_t>(m));  // not assign(first, last): exact size, every step
      std::copy_n(w, m, attended.data());
      std::fill_n(w, stride, 0.0f);
      int64_t j = 0;
      for (const attention::RowRange& r : view_->ranges(b, h)) {
        for (int64_t row = r.first; row < r.second; ++row) w[row] = attended[static_cast<std::size_t>(j++)];
      }
    }
  }
}

std::vector<attention::RowRange> RocketKVCache::last_selection(int64_t b, int64_t h) const {
  if (!view_active_) return {};
  return view_->ranges(b, h);
}

std::vector<std::string> RocketKVCache::meta_state() const {
  std::vector<std::string> meta = EvictionCache::meta_state();
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.17g", ratio_);
  meta.insert(meta.end(), {kMetaTag, ratio, optional_text(page_option_), optional_text(topk_option_)});
  return meta;
}

void RocketKVCache::from_state(const std::vector<lm::Tensor>& state, const std::vector<std::string>& meta) {
  const std::string who = std::string(kTypeName) + "::from_state";
  if (meta.size() < kOwnMeta || meta[meta.size() - kOwnMeta] != kMetaTag) {
    throw base::FormatError(who + ": the meta does not end with rocketkv's " + std::to_string(kOwnMeta) + " entries");
  }
  const std::size_t own = meta.size() - kOwnMeta;
  double ratio = 0.0;
  try {
    std::size_t used = 0;
    ratio = std::stod(meta[own + 1], &used);
    if (used != meta[own + 1].size()) throw std::invalid_argument("trailing text");
  } catch (const std::exception&) {
    throw base::FormatError(who + ": compression ratio '" + meta[own + 1] + "' is not a number");
  }
  if (!std::isfinite(ratio) || ratio < 1.0)
    throw base::FormatError(who + ": compression ratio " + meta[own + 1] + " < 1");
  const std::optional<int> page = parse_optional(meta[own + 2], who, "page_size");
  const std::optional<int> topk = parse_optional(meta[own + 3], who, "head_topk1");
  if ((page && *page < 1) || (topk && *topk < 1))
    throw base::FormatError(who + ": page_size and head_topk1 must be >= 1");
  EvictionCache::from_state(state,
                            std::vector<std::string>(meta.begin(), meta.begin() + static_cast<std::ptrdiff_t>(own)));
  ratio_ = ratio;
  page_option_ = page;
  topk_option_ = topk;
  page_max_.clear();
  page_min_.clear();
  page_prints_.clear();
  summary_pages_ = 0;
  view_active_ = false;
  ensure_summaries();
}

std::shared_ptr<lm::KVCache> make_rocketkv_cache(const KVCacheConfig& config) {
  return std::make_shared<RocketKVCache>(config);
}

MethodDescriptor rocketkv_method() {
  MethodDescriptor m = eviction::eviction_method("rocketkv", kTypeName);
  m.capabilities.sparse_attention = true;  // stage 2: the fused path attends the chosen pages only
  m.family = "hybrid";  // the original's label (spec §6 #42): eviction plus per-step sparse attention
  m.make_restorable = [] { return std::make_shared<RocketKVCache>(KVCacheConfig{}); };
  m.blurb =
      "Two stages: SnapKV eviction to rocketkv_budget rows, then per call the pages of rows whose max/min "
      "key summaries bound q.k highest on the top-k query channels; exact attention over those pages only";
  m.paper =
      "RocketKV: Accelerating Long-Context LLM Inference via Two-Stage KV Cache Compression (Behnam et al., "
      "ICML 2025, arXiv 2502.14051)";
  m.deviations =
      std::string(
          "Stage 1 is this port's SnapKV policy (pooling kernel 5, decode steps evicting past the budget), "
          "not the paper's SnapKV++ (adaptive pooling); its budget is the new field rocketkv_budget, rows "
          "per kv head, so memory is bounded like every eviction cache here. The ratio c splits "
          "adaptively: stage 2 attends ceil(offset / c) stored rows (whole pages, at least one), nothing "
          "removed once stage 1 alone reaches c. None page_size / head_topk1 are derived from c "
          "(page 2^round(log2(2 sqrt c)), topk1 head_dim / 2^round(log2(sqrt c))). A call of several "
          "tokens selects once per kv head from the summed bounds of all its queries (the paper selects "
          "per decode step; GQA groups sum, as the paper's GQA variant). Stage 2 needs the fused path: "
          "update_and_fetch returns every kept row. Page summaries are f16 with a 64-bit fingerprint of "
          "their rows' positions (a page is rebuilt when its rows moved); the paper's second top-k over tokens is not "
          "applied: the selected pages are attended whole.") +
      eviction::kCompositionNote;
  m.fields = {
      option_field("rocketkv_compression_ratio", &RocketKVOptions::rocketkv_compression_ratio,
                   "Total ratio c: tokens seen / rows attended per step (stage 2 makes up what stage 1 leaves)"),
      option_field("rocketkv_page_size", &RocketKVOptions::rocketkv_page_size,
                   "Rows per page summary (None: 2^round(log2(2 sqrt c)))"),
      option_field("rocketkv_head_topk1", &RocketKVOptions::rocketkv_head_topk1,
                   "Query channels read by the page bound (None: head_dim / 2^round(log2(sqrt c)))"),
      option_field("rocketkv_obs_window", &RocketKVOptions::rocketkv_obs_window,
                   "Stage 1 (SnapKV): newest tokens of a prefill chunk that vote (and are kept)", 1),
      option_field("rocketkv_n_sink", &RocketKVOptions::rocketkv_n_sink, "First positions never evicted", 0),
      option_field("rocketkv_budget", &RocketKVOptions::rocketkv_budget,
                   "New: stage 1's rows kept per kv head, sinks included", 1),
  };
  m.validate = validate_rocketkv_options;
  m.make_serving = make_rocketkv_cache;
  return m;
}

}  // namespace veloxquant
