// The per-token rule of the attention-scored eviction policies (h2o, tova, pyramidkv, kvzip,
// keyformer; eviction_policy.h kAttentionScored) on its own: the part of their prefill that
// grows with the budget (h2o at 2,580 rows prefilled at 0.6x the native cache, docs/benchmarks.md).
//   row_logits/reference/<rows>/<queries>  a GQA group's logits over <rows> indexed rows the way
//                                 the scorer computed them before (a dispatched dot_f32 per row
//                                 and query, a running maximum): the baseline
//   row_logits/simd/<rows>/<queries>  scaled_row_logits (row_logits.h): the same floats
//   softmax/<rows>                mean_softmax_weights over <rows> indexed rows for a GQA group of
//                                 3 queries (SmolLM2: 9 query heads over 3 kv heads)
//   h2o_chunk/<budget>            select_rows for h2o (decay 1, 4 sinks) with <budget> rows stored
//                                 and a 64-token chunk of new rows, 3 real queries per token: per
//                                 token the scoring, the score update, the victim search, the erase
// Head dimension 64; keys N(0, 1), queries N(0, 1) scaled so that the softmax is peaked (as the
// model's are); run one thread.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "veloxquant/eviction/attention_scores.h"
#include "veloxquant/eviction/eviction_policy.h"
#include "veloxquant/eviction/row_logits.h"

namespace {

using veloxquant::eviction::Candidates;
using veloxquant::eviction::EvictionPolicy;

constexpr int64_t kDim = 64;
constexpr int64_t kGroup = 3;
constexpr int64_t kChunk = 64;

std::vector<float> normal_values(std::size_t n, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> out(n);
  for (float& v : out) v = normal(rng);
  return out;
}

// Every row but each seventh (the live rows of a cache that evicted some), increasing.
std::vector<int32_t> live_rows(int64_t count) {
  std::vector<int32_t> rows;
  for (int32_t r = 0; static_cast<int64_t>(rows.size()) < count; ++r) {
    if (r % 7 != 6) rows.push_back(r);
  }
  return rows;
}

template <bool kReference>
void BM_RowLogits(benchmark::State& state) {
  const int64_t count = state.range(0), group = state.range(1);
  const std::vector<int32_t> rows = live_rows(count);
  const std::vector<float> keys = normal_values(static_cast<std::size_t>((rows.back() + 1) * kDim), 1.0f, 1);
  const std::vector<float> queries = normal_values(static_cast<std::size_t>(group * kDim), 2.0f, 2);
  std::vector<float> out(static_cast<std::size_t>(group * count)), mx(static_cast<std::size_t>(group));
  for (auto _ : state) {
    if (kReference) {
      veloxquant::eviction::scalar::scaled_row_logits(keys.data(), rows.data(), count, kDim, queries.data(), group,
                                                      0.125f, out.data(), count, mx.data());
    } else {
      veloxquant::eviction::scaled_row_logits(keys.data(), rows.data(), count, kDim, queries.data(), group, 0.125f,
                                              out.data(), count, mx.data());
    }
    benchmark::DoNotOptimize(mx.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * count * group);
}

void BM_Softmax(benchmark::State& state) {
  const int64_t count = state.range(0);
  const std::vector<int32_t> rows = live_rows(count);
  const std::vector<float> keys = normal_values(static_cast<std::size_t>((rows.back() + 1) * kDim), 1.0f, 1);
  const std::vector<float> queries = normal_values(kGroup * kDim, 2.0f, 2);
  std::vector<float> out(static_cast<std::size_t>(count));
  for (auto _ : state) {
    veloxquant::eviction::mean_softmax_weights(keys.data(), rows.data(), count, kDim, queries.data(), kGroup, 0.125f,
                                               out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * count * kGroup);
}

void BM_H2OChunk(benchmark::State& state) {
  const int64_t budget = state.range(0);
  EvictionPolicy p;
  p.kind = EvictionPolicy::Kind::kAttentionScored;
  p.budget = budget;
  p.n_sink = 4;
  Candidates c;
  c.stored = budget;
  c.dim = kDim;
  const int64_t n = budget + kChunk;
  c.keys = normal_values(static_cast<std::size_t>(n * kDim), 1.0f, 3);
  const std::vector<float> queries = normal_values(static_cast<std::size_t>(kChunk * kGroup * kDim), 2.0f, 4);
  c.positions.resize(static_cast<std::size_t>(n));
  std::iota(c.positions.begin(), c.positions.end(), 0);
  const std::vector<float> carried = normal_values(static_cast<std::size_t>(n), 0.01f, 5);
  const veloxquant::eviction::QuerySource source = [&](int64_t token, std::vector<float>& out) -> int64_t {
    out.assign(queries.begin() + token * kGroup * kDim, queries.begin() + (token + 1) * kGroup * kDim);
    return kGroup;
  };
  std::vector<int32_t> kept;
  for (auto _ : state) {
    c.scores.assign(carried.begin(), carried.end());
    for (int64_t t = budget; t < n; ++t) c.scores[static_cast<std::size_t>(t)] = 0.0f;
    veloxquant::eviction::select_rows(p, c, source, 0.125f, kept);
    benchmark::DoNotOptimize(kept.data());
  }
  state.SetItemsProcessed(state.iterations() * kChunk);
}

BENCHMARK(BM_RowLogits<true>)->Name("row_logits/reference")->Args({512, 3})->Args({2580, 3});
BENCHMARK(BM_RowLogits<false>)
    ->Name("row_logits/simd")
    ->Args({512, 3})
    ->Args({2580, 1})
    ->Args({2580, 3})
    ->Args({2580, 4});
BENCHMARK(BM_Softmax)->Name("softmax")->Arg(512)->Arg(2580);
BENCHMARK(BM_H2OChunk)->Name("h2o_chunk")->Arg(512)->Arg(2580)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
