// rocketkv against brute force written here in doubles: stage 2 (page summaries, top channels,
// page bounds, the sink and newest pages forced, exact attention over the chosen pages and the
// call's rows) for every fused call, and stage 1 (SnapKV's decode rule fed the sparse weights:
// rows not attended get none) for every decode step; stage 1 alone is snapkv bit for bit; the
// RowRangesSource view against attention over the gathered rows; nbytes, validation, restore.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/error.h"
#include "base/half.h"
#include "lm/kernels/attention.h"
#include "support/kv_test_data.h"
#include "veloxquant/attention/attention_driver.h"
#include "veloxquant/attention/dtype_rows.h"
#include "veloxquant/attention/row_ranges_source.h"
#include "veloxquant/eviction/eviction_test_config.h"
#include "veloxquant/eviction/page_summaries.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {
namespace {

constexpr int64_t kHeads = 2, kQueryHeads = 6, kGroup = 3, kDim = 32, kBudget = 32;

KVCacheConfig rocket_config(double ratio, std::optional<int> page = 4, std::optional<int> topk = 8) {
  KVCacheConfig c;
  c.method = "rocketkv";
  c.head_dim = kDim;
  c.bit_width_inlier = 4;
  RocketKVOptions& o = c.options<RocketKVOptions>();
  o.rocketkv_budget = kBudget;
  o.rocketkv_obs_window = 8;
  o.rocketkv_n_sink = 4;
  o.rocketkv_compression_ratio = ratio;
  o.rocketkv_page_size = page;
  o.rocketkv_head_topk1 = topk;
  return c;
}

std::shared_ptr<RocketKVCache> make_rocket(const KVCacheConfig& c) {
  validate_for_create(c);
  auto cache = std::dynamic_pointer_cast<RocketKVCache>(require_method("rocketkv").make_serving(c));
  if (!cache) throw std::runtime_error("rocketkv is not a RocketKVCache");
  return cache;
}

std::vector<int32_t> kept_positions(const eviction::EvictionCache& cache) {
  std::vector<int32_t> all;
  for (int64_t h = 0; h < cache.rows().heads(); ++h) {
    const int32_t* p = cache.rows().positions(0, h);
    all.insert(all.end(), p, p + cache.rows().rows());
  }
  return all;
}

float f16_round(float x) { return base::f16_to_f32(base::f32_to_f16(x)); }

// The stored rows of one head as the brute force reads them.
struct HeadRows {
  std::vector<float> keys, values, scores;
  std::vector<int32_t> positions;
  int64_t n = 0;
};

HeadRows head_rows(const eviction::EvictionCache& cache, int64_t h) {
  HeadRows r;
  const eviction::EvictionRows& rows = cache.rows();
  if (!rows.allocated()) return r;
  r.n = rows.rows();
  r.keys.resize(static_cast<std::size_t>(r.n * kDim));
  r.values.resize(static_cast<std::size_t>(r.n * kDim));
  rows.decode_keys(0, h, r.keys.data());
  rows.decode_values(0, h, r.values.data());
  r.positions.assign(rows.positions(0, h), rows.positions(0, h) + r.n);
  if (const float* s = rows.scores(0, h)) r.scores.assign(s, s + r.n);
  return r;
}

// Stage 2 by brute force: the stored rows (b = 0, head h) a call with these queries attends.
std::vector<int64_t> ref_selection(const HeadRows& rows, const std::vector<float>& q, int64_t n_queries, int64_t h,
                                   int64_t offset, double ratio, int64_t page, int64_t topk, bool sinks) {
  std::vector<int64_t> all(static_cast<std::size_t>(rows.n));
  for (int64_t j = 0; j < rows.n; ++j) all[static_cast<std::size_t>(j)] = j;
  const int64_t pages = (rows.n + page - 1) / page;
  const int64_t target = static_cast<int64_t>(std::ceil(double(offset) / ratio));
  const int64_t keep = std::max<int64_t>(sinks ? 2 : 1, (target + page - 1) / page);
  if (rows.n == 0 || keep >= pages) return all;
  // The group's queries (heads h*3 .. h*3+2, every token of the call).
  std::vector<const float*> group;
  for (int64_t g = 0; g < kGroup; ++g) {
    for (int64_t i = 0; i < n_queries; ++i) group.push_back(q.data() + ((h * kGroup + g) * n_queries + i) * kDim);
  }
  std::vector<double> magnitude(kDim, 0.0);
  for (const float* v : group) {
    for (int64_t c = 0; c < kDim; ++c) magnitude[static_cast<std::size_t>(c)] += std::fabs(v[c]);
  }
  std::vector<int64_t> channels;
  std::vector<bool> taken(kDim, false);
  for (int64_t t = 0; t < topk; ++t) {
    int64_t best = -1;
    for (int64_t c = 0; c < kDim; ++c) {
      if (!taken[static_cast<std::size_t>(c)] && (best < 0 || magnitude[c] > magnitude[best])) best = c;
    }
    taken[static_cast<std::size_t>(best)] = true;
    channels.push_back(best);
  }
  std::vector<double> score(static_cast<std::size_t>(pages), 0.0);
  for (int64_t p = 0; p < pages; ++p) {
    for (const int64_t c : channels) {
      float hi = -std::numeric_limits<float>::infinity(), lo = std::numeric_limits<float>::infinity();
      for (int64_t j = p * page; j < std::min(rows.n, (p + 1) * page); ++j) {
        hi = std::max(hi, rows.keys[j * kDim + c]);
        lo = std::min(lo, rows.keys[j * kDim + c]);
      }
      for (const float* v : group) score[p] += std::max(double(v[c]) * f16_round(hi), double(v[c]) * f16_round(lo));
    }
  }
  if (sinks) score[0] = std::numeric_limits<double>::infinity();
  score[static_cast<std::size_t>(pages - 1)] = std::numeric_limits<double>::infinity();
  std::vector<bool> chosen(static_cast<std::size_t>(pages), false);
  for (int64_t t = 0; t < keep; ++t) {
    int64_t best = -1;
    for (int64_t p = 0; p < pages; ++p) {
      if (!chosen[p] && (best < 0 || score[p] > score[best])) best = p;
    }
    chosen[static_cast<std::size_t>(best)] = true;
  }
  std::vector<int64_t> rows_out;
  for (int64_t j = 0; j < rows.n; ++j) {
    if (chosen[static_cast<std::size_t>(j / page)]) rows_out.push_back(j);
  }
  return rows_out;
}

// One call's new keys, values and queries (n tokens each, as floats).
struct CallRows {
  const std::vector<float>& k;
  const std::vector<float>& v;
  const std::vector<float>& q;
  int64_t n;
};

// Exact attention of query (head qh, token i) over the chosen stored rows and the call's new
// rows up to its own position; also each chosen row's weight (for stage 1).
std::vector<double> ref_attend(const HeadRows& rows, const std::vector<int64_t>& chosen, const CallRows& call,
                               int64_t qh, int64_t i, int64_t kvh, std::vector<double>* stored_w, double* new_w) {
  const std::vector<float>&k = call.k, &v = call.v;
  const int64_t n = call.n;
  const float* query = call.q.data() + (qh * n + i) * kDim;
  std::vector<double> logits;
  std::vector<const float*> vals;
  const double scale = 1.0 / std::sqrt(double(kDim));
  const auto dot = [&](const float* key) {
    double s = 0.0;
    for (int64_t c = 0; c < kDim; ++c) s += double(query[c]) * key[c];
    return s * scale;
  };
  for (const int64_t j : chosen) {
    logits.push_back(dot(rows.keys.data() + j * kDim));
    vals.push_back(rows.values.data() + j * kDim);
  }
  for (int64_t t = 0; t <= i; ++t) {
    logits.push_back(dot(k.data() + (kvh * n + t) * kDim));
    vals.push_back(v.data() + (kvh * n + t) * kDim);
  }
  const double m = *std::max_element(logits.begin(), logits.end());
  double l = 0.0;
  for (double& x : logits) l += (x = std::exp(x - m));
  std::vector<double> out(kDim, 0.0);
  for (std::size_t j = 0; j < logits.size(); ++j) {
    for (int64_t c = 0; c < kDim; ++c) out[static_cast<std::size_t>(c)] += logits[j] / l * vals[j][c];
  }
  if (stored_w) {
    for (std::size_t j = 0; j < chosen.size(); ++j)
      (*stored_w)[static_cast<std::size_t>(chosen[j])] += logits[j] / l / kGroup;
  }
  if (new_w) *new_w += logits.back() / l / kGroup;
  return out;
}

// The rows the cache attended over for head h in its last call, from its selection's ranges (all
// n_rows when it selected none; a selection counts one sparse call).
std::vector<int64_t> cache_choice(const RocketKVCache& cache, int64_t h, int64_t n_rows, int64_t& sparse_calls) {
  std::vector<int64_t> rows;
  const std::vector<attention::RowRange> sel = cache.last_selection(0, h);
  for (const attention::RowRange& r : sel) {
    for (int64_t j = r.first; j < r.second; ++j) rows.push_back(j);
  }
  if (sel.empty()) {
    for (int64_t j = 0; j < n_rows; ++j) rows.push_back(j);
  } else {
    ++sparse_calls;
  }
  return rows;
}

// Every query of kv head h's group and every token of the call: the output within 2e-4 of exact
// attention over the chosen rows and the call's own; the chosen and new rows' weights summed into
// w and nw.
void check_head_outputs(const HeadRows& before, const std::vector<int64_t>& chosen, const CallRows& call,
                        const std::vector<float>& got, int64_t h, std::vector<double>* w, double* nw) {
  for (int64_t g = 0; g < kGroup; ++g) {
    for (int64_t i = 0; i < call.n; ++i) {
      const int64_t qh = h * kGroup + g;
      const std::vector<double> want = ref_attend(before, chosen, call, qh, i, h, w, nw);
      for (int64_t c = 0; c < kDim; ++c) {
        ASSERT_NEAR(got[(qh * call.n + i) * kDim + c], want[c], 2e-4) << "query head " << qh << " token " << i;
      }
    }
  }
}

// The positions a decode step keeps under SnapKV's rule: each row's score accumulated with its
// sparse weight, the new row appended, and past the budget the first minimum outside the sinks
// (positions below 4) and the newest `protect` rows evicted.
std::vector<int32_t> snapkv_step(const HeadRows& r, const std::vector<double>& weights, double new_weight,
                                 int64_t offset, int64_t protect) {
  std::vector<double> score;
  score.reserve(static_cast<std::size_t>(r.n) + 1);
  std::vector<int32_t> positions = r.positions;
  for (int64_t j = 0; j < r.n; ++j) score.push_back(double(r.scores[j]) + weights[j]);
  score.push_back(new_weight);
  positions.push_back(static_cast<int32_t>(offset));
  if (static_cast<int64_t>(positions.size()) > kBudget) {
    int64_t victim = -1;
    for (int64_t j = 0; j < static_cast<int64_t>(positions.size()) - protect; ++j) {
      if (positions[j] >= 4 && (victim < 0 || score[j] < score[victim] - 1e-6)) victim = j;
    }
    positions.erase(positions.begin() + victim);
  }
  return positions;
}

// Both stages against the brute force: prefill chunks past the budget, then decode steps.
void check_against_brute_force(const std::string& storage) {
  SCOPED_TRACE(storage);
  KVCacheConfig config = rocket_config(4.0);
  config.eviction.eviction_storage = storage;
  auto cache = make_rocket(config);
  const int64_t page = 4, topk = 8;
  uint64_t seed = 900;
  std::vector<int64_t> calls = {24, 24, 16};
  for (int i = 0; i < 80; ++i) calls.push_back(1);
  int64_t sparse_calls = 0;
  for (const int64_t n : calls) {
    const lm::Tensor k = test_support::random_kv(1, kHeads, n, kDim, seed++, lm::DType::F32);
    const lm::Tensor v = test_support::random_kv(1, kHeads, n, kDim, seed++, lm::DType::F32);
    const lm::Tensor q = test_support::random_kv(1, kQueryHeads, n, kDim, seed++, lm::DType::F32);
    const std::vector<float> kf = k.to_f32(), vf = v.to_f32(), qf = q.to_f32();
    const int64_t offset = cache->offset();
    std::vector<HeadRows> before;
    for (int64_t h = 0; h < kHeads; ++h) before.push_back(head_rows(*cache, h));
    // The kept rows decode their own way under coded storage: compare the new rows' outcome.
    cache->observe_queries(q);
    lm::Tensor out({1, kQueryHeads, n, kDim}, lm::DType::F32);
    cache->fused_attention({&q, &k, &v, 1.0f / std::sqrt(float(kDim)), std::nullopt}, out);
    const std::vector<float> got = out.to_f32();
    std::vector<std::vector<double>> weights;
    std::vector<double> new_weights;
    const CallRows call{kf, vf, qf, n};
    for (int64_t h = 0; h < kHeads; ++h) {
      const std::vector<int64_t> chosen = ref_selection(before[h], qf, n, h, offset, 4.0, page, topk, true);
      ASSERT_EQ(cache_choice(*cache, h, before[h].n, sparse_calls), chosen) << "head " << h << " at offset " << offset;
      std::vector<double> w(static_cast<std::size_t>(before[h].n), 0.0);
      double nw = 0.0;
      check_head_outputs(before[h], chosen, call, got, h, &w, &nw);
      if (::testing::Test::HasFatalFailure()) return;
      weights.push_back(w);
      new_weights.push_back(nw);
    }
    if (n != 1 || storage != "dtype") continue;
    // Stage 1 at a decode step: SnapKV's rule fed the sparse weights.
    for (int64_t h = 0; h < kHeads; ++h) {
      const std::vector<int32_t> positions =
          snapkv_step(before[h], weights[h], new_weights[h], offset, cache->policy().effective_protect());
      const int32_t* kept = cache->rows().positions(0, h);
      ASSERT_EQ(std::vector<int32_t>(kept, kept + cache->rows().rows()), positions) << "head " << h << " at " << offset;
    }
  }
  EXPECT_GT(sparse_calls, 40);  // stage 2 really removed rows
  EXPECT_EQ(cache->rows().rows(), kBudget);
}

TEST(RocketKV, BothStagesMatchTheBruteForce) { check_against_brute_force("dtype"); }

// Coded rows compose: summaries and scores read the decoded keys, the output the codes.
TEST(RocketKV, ComposesWithCodedStorage) {
  check_against_brute_force("turboquant_rvq");
  check_against_brute_force("kivi");
}

// With nothing for stage 2 to remove (c = 1), rocketkv is snapkv bit for bit, on both paths;
// with c = 8, calls of several tokens still keep snapkv's rows (their votes come from the
// observed queries over every row), and only the attention output differs.
TEST(RocketKV, StageOneIsSnapKV) {
  for (const double ratio : {1.0, 8.0}) {
    SCOPED_TRACE(ratio);
    auto rocket = make_rocket(rocket_config(ratio));
    KVCacheConfig snap_config = eviction_test::small_budget("snapkv", kBudget, kDim);
    auto snap = eviction_test::make_eviction_cache(snap_config);
    ASSERT_EQ(snap->policy().obs_window, rocket->policy().obs_window);
    uint64_t seed = 70;
    std::vector<int64_t> calls = {20, 16, 16, 16, 16};
    if (ratio == 1.0) calls.insert(calls.end(), 50, 1);
    for (const int64_t n : calls) {
      const lm::Tensor k = test_support::random_kv(1, kHeads, n, kDim, seed++, lm::DType::F16);
      const lm::Tensor v = test_support::random_kv(1, kHeads, n, kDim, seed++, lm::DType::F16);
      const lm::Tensor q = test_support::random_kv(1, kQueryHeads, n, kDim, seed++, lm::DType::F32);
      lm::Tensor a({1, kQueryHeads, n, kDim}, lm::DType::F32), b({1, kQueryHeads, n, kDim}, lm::DType::F32);
      rocket->observe_queries(q);
      snap->observe_queries(q);
      rocket->fused_attention({&q, &k, &v, 0.2f, std::nullopt}, a);
      snap->fused_attention({&q, &k, &v, 0.2f, std::nullopt}, b);
      ASSERT_EQ(kept_positions(*rocket), kept_positions(*snap)) << "at " << rocket->offset();
      if (ratio == 1.0) {
        ASSERT_EQ(a.to_f32(), b.to_f32());
      }
    }
  }
}

// nbytes: the kept rows (what snapkv holds) plus 2 f16 key vectors and a u64 fingerprint per
// page of the budget and head.
TEST(RocketKV, NbytesCountTheSummaries) {
  for (const std::string storage : {"dtype", "kivi"}) {
    KVCacheConfig config = rocket_config(8.0, std::nullopt, std::nullopt);  // page 8 derived
    config.eviction.eviction_storage = storage;
    auto rocket = make_rocket(config);
    KVCacheConfig snap_config = eviction_test::small_budget("snapkv", kBudget, kDim);
    snap_config.eviction.eviction_storage = storage;
    auto snap = eviction_test::make_eviction_cache(snap_config);
    EXPECT_EQ(rocket->page_size(), 8);
    const lm::Tensor k = test_support::random_kv(1, kHeads, 40, kDim, 1, lm::DType::F16);
    const lm::Tensor v = test_support::random_kv(1, kHeads, 40, kDim, 2, lm::DType::F16);
    const lm::Tensor q = test_support::random_kv(1, kQueryHeads, 40, kDim, 3, lm::DType::F32);
    lm::Tensor out({1, kQueryHeads, 40, kDim}, lm::DType::F32);
    rocket->fused_attention({&q, &k, &v, 0.2f, std::nullopt}, out);
    snap->fused_attention({&q, &k, &v, 0.2f, std::nullopt}, out);
    EXPECT_EQ(rocket->head_topk1(), kDim / 4);  // c = 8: 32 / 2^round(log2(2.83)) = 32 / 4
    EXPECT_EQ(rocket->nbytes(), snap->nbytes() + std::size_t(kHeads * (kBudget / 8) * (2 * kDim * 2 + 8))) << storage;
  }
}

TEST(RocketKV, DerivedPageSizeAndChannels) {
  EXPECT_EQ(rocketkv_page_size_for(8.0), 8);  // 2 sqrt 8 = 5.66 -> 2^3
  EXPECT_EQ(rocketkv_page_size_for(1.0), 2);
  EXPECT_EQ(rocketkv_page_size_for(64.0), 16);      // 2 * 8 = 16
  EXPECT_EQ(rocketkv_head_topk1_for(8.0, 64), 16);  // sqrt 8 = 2.83 -> 4
  EXPECT_EQ(rocketkv_head_topk1_for(1.0, 64), 64);
  EXPECT_EQ(rocketkv_head_topk1_for(1e6, 64), 1);
}

TEST(RocketKV, ValidationNamesFieldAndValue) {
  using eviction_test::expect_config_error;
  KVCacheConfig c = rocket_config(0.5);
  expect_config_error(c, {"rocketkv_compression_ratio", "0.5"});
  c = rocket_config(8.0, 0);
  expect_config_error(c, {"rocketkv_page_size", "0"});
  c = rocket_config(8.0, 4, 33);
  expect_config_error(c, {"rocketkv_head_topk1", "33"});
  c = rocket_config(8.0);
  c.options<RocketKVOptions>().rocketkv_n_sink = kBudget;
  expect_config_error(c, {"rocketkv_n_sink"});
  c = rocket_config(8.0);
  c.options<RocketKVOptions>().rocketkv_obs_window = 0;
  expect_config_error(c, {"rocketkv_obs_window", "0"});
  c = rocket_config(8.0);
  c.eviction.eviction_storage = "zip";
  expect_config_error(c, {"eviction_storage"});
  c = rocket_config(std::nan(""));
  expect_config_error(c, {"rocketkv_compression_ratio"});
}

TEST(RocketKV, SaveRestoreContinuesAlike) {
  auto a = make_rocket(rocket_config(4.0, std::nullopt, 8));
  uint64_t seed = 300;
  const auto feed = [&](lm::KVCache& cache, int64_t n, uint64_t s) {
    const lm::Tensor k = test_support::random_kv(1, kHeads, n, kDim, s, lm::DType::F16);
    const lm::Tensor v = test_support::random_kv(1, kHeads, n, kDim, s + 1, lm::DType::F16);
    const lm::Tensor q = test_support::random_kv(1, kQueryHeads, n, kDim, s + 2, lm::DType::F32);
    lm::Tensor out({1, kQueryHeads, n, kDim}, lm::DType::F32);
    if (cache.wants_queries()) cache.observe_queries(q);
    cache.fused_attention({&q, &k, &v, 0.2f, std::nullopt}, out);
    return out.to_f32();
  };
  feed(*a, 40, seed);
  for (int i = 0; i < 5; ++i) feed(*a, 1, seed += 3);
  auto b = require_method("rocketkv").make_restorable();
  b->from_state(a->state(), a->meta_state());
  EXPECT_EQ(b->type_name(), "RocketKVCache");
  EXPECT_EQ(b->offset(), a->offset());
  EXPECT_EQ(b->nbytes(), a->nbytes());
  EXPECT_EQ(b->meta_state(), a->meta_state());
  for (int i = 0; i < 10; ++i) {
    seed += 3;
    ASSERT_EQ(feed(*a, 1, seed), feed(*b, 1, seed)) << "step " << i;
  }
  // Someone else's meta is refused with a FormatError, not a crash.
  std::vector<std::string> meta = a->meta_state();
  meta.resize(meta.size() - 4);
  EXPECT_THROW(b->from_state(a->state(), meta), base::FormatError);
  const auto clone = a->clone();
  EXPECT_EQ(clone->type_name(), "RocketKVCache");
  EXPECT_EQ(clone->nbytes(), a->nbytes());
}

TEST(RocketKV, RegisteredAsHybridWithTheOriginalsFields) {
  const MethodDescriptor& m = require_method("rocketkv");
  EXPECT_EQ(m.family, "hybrid");
  EXPECT_TRUE(m.is_servable);
  EXPECT_TRUE(m.capabilities.fused_attention);
  std::vector<std::string> names;
  for (const FieldSpec& f : m.fields) names.push_back(f.name);
  for (const char* f : {"rocketkv_compression_ratio", "rocketkv_page_size", "rocketkv_head_topk1",
                        "rocketkv_obs_window", "rocketkv_n_sink"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), f), names.end()) << f;
  }
  const RocketKVOptions defaults;
  EXPECT_EQ(defaults.rocketkv_compression_ratio, 8.0);
  EXPECT_FALSE(defaults.rocketkv_page_size);
  EXPECT_FALSE(defaults.rocketkv_head_topk1);
  EXPECT_EQ(defaults.rocketkv_obs_window, 32);
  EXPECT_EQ(defaults.rocketkv_n_sink, 4);
}

// The view: attention over chosen ranges through the driver equals attention over the rows
// gathered by hand, for several queries, a prefill-sized block and ranges crossing tiles.
TEST(RowRangesSource, AttendsExactlyTheChosenRows) {
  const int64_t rows = 200, n = 3;
  const lm::Tensor k = test_support::random_kv(1, kHeads, rows, kDim, 11, lm::DType::F16);
  const lm::Tensor v = test_support::random_kv(1, kHeads, rows, kDim, 12, lm::DType::F16);
  const lm::Tensor q = test_support::random_kv(1, kQueryHeads, n, kDim, 13, lm::DType::F32);
  const std::vector<float> kf = k.to_f32(), vf = v.to_f32(), qf = q.to_f32();
  const attention::DtypeRowSource base(k, v, rows, 0);
  attention::RowRangesSource view(base, 1, kHeads);
  const std::vector<std::vector<attention::RowRange>> chosen = {{{0, 4}, {60, 131}, {190, 200}},
                                                                {{5, 6}, {63, 64}, {64, 70}}};
  for (int64_t h = 0; h < kHeads; ++h) view.set_ranges(0, h, chosen[h]);
  EXPECT_EQ(view.rows(0, 0), 4 + 71 + 10);
  EXPECT_EQ(view.base_row(0, 0, 5), 61);
  EXPECT_EQ(view.positions(0, 1)[2], 64);
  attention::AttentionCall call;
  call.queries = qf.data();
  call.batch = 1;
  call.q_heads = kQueryHeads;
  call.kv_heads = kHeads;
  call.n_queries = n;
  call.first_position = rows;  // every row visible
  call.scale = 0.15f;
  std::vector<float> out(static_cast<std::size_t>(kQueryHeads * n * kDim));
  call.out = out.data();
  attention::attend(call, view, nullptr);
  for (int64_t qh = 0; qh < kQueryHeads; ++qh) {
    const int64_t h = qh / kGroup;
    for (int64_t i = 0; i < n; ++i) {
      const float* query = qf.data() + (qh * n + i) * kDim;
      std::vector<double> logit;
      std::vector<int64_t> idx;
      for (const attention::RowRange& r : chosen[h]) {
        for (int64_t j = r.first; j < r.second; ++j) {
          double s = 0.0;
          for (int64_t c = 0; c < kDim; ++c) s += double(query[c]) * kf[(h * rows + j) * kDim + c];
          logit.push_back(s * 0.15);
          idx.push_back(j);
        }
      }
      const double m = *std::max_element(logit.begin(), logit.end());
      double l = 0.0;
      for (double& x : logit) l += (x = std::exp(x - m));
      for (int64_t c = 0; c < kDim; ++c) {
        double want = 0.0;
        for (std::size_t t = 0; t < idx.size(); ++t) want += logit[t] / l * vf[(h * rows + idx[t]) * kDim + c];
        ASSERT_NEAR(out[(qh * n + i) * kDim + c], want, 2e-4) << qh << " " << i << " " << c;
      }
    }
  }
  EXPECT_THROW(view.set_ranges(0, 0, {{10, 20}, {15, 30}}), base::InvalidArgument);
  EXPECT_THROW(view.set_ranges(0, 0, {{10, 10}}), base::InvalidArgument);
  EXPECT_THROW(view.set_ranges(0, 0, {{190, 201}}), base::InvalidArgument);
}

TEST(PageSummaries, BoundsAndSelection) {
  const int64_t rows = 10, page = 4;
  std::vector<float> keys(rows * 3);
  for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = std::sin(float(i) * 1.7f) * 3.0f;
  std::vector<uint16_t> hi(std::size_t{3} * 3), lo(std::size_t{3} * 3);
  eviction::summarize_pages(keys.data(), rows, 3, page, hi.data(), lo.data());
  for (int64_t p = 0; p < 3; ++p) {
    for (int64_t c = 0; c < 3; ++c) {
      float mx = -1e9f, mn = 1e9f;
      for (int64_t j = p * page; j < std::min(rows, (p + 1) * page); ++j) {
        mx = std::max(mx, keys[j * 3 + c]);
        mn = std::min(mn, keys[j * 3 + c]);
      }
      EXPECT_EQ(base::f16_to_f32(hi[p * 3 + c]), f16_round(mx));
      EXPECT_EQ(base::f16_to_f32(lo[p * 3 + c]), f16_round(mn));
    }
  }
  const std::vector<float> q = {0.1f, -2.0f, 1.0f, 0.0f, 1.0f, -1.5f};
  EXPECT_EQ(eviction::top_channels(q.data(), 2, 3, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(eviction::top_channels(q.data(), 1, 3, 1), (std::vector<int32_t>{1}));
  const std::vector<float> scores = {1.0f, 5.0f, 5.0f, 0.0f, 2.0f};
  EXPECT_EQ(eviction::top_pages(scores.data(), 5, 4, 18, 3), (std::vector<attention::RowRange>{{4, 12}, {16, 18}}));
  EXPECT_EQ(eviction::top_pages(scores.data(), 5, 4, 18, 2), (std::vector<attention::RowRange>{{4, 12}}));
}

}  // namespace
}  // namespace veloxquant
