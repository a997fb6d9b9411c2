// One of curdkv's leverage problems on its own (eviction/leverage_scores.h), the unit its decode
// and prefill cost is made of (two per token, layer and kv head; 90 pairs a token on SmolLM2):
//   leverage/scores/<rows>        value_leverage_scores over <rows> stored rows (the stored rows'
//                                 increments: weighted block, Gram, top-16 eigenpairs, every row
//                                 projected)
//   leverage/self/<rows>          value_self_leverage over <rows> rows (the new row's score: the
//                                 same eigenproblem, one row projected)
//   leverage/top_eigen/64         top_symmetric_eigenvectors of one 64 x 64 value Gram (k = 16):
//                                 the eigenproblem alone
// Head dimension 64, rank cap 16 (curdkv's defaults at SmolLM2's geometry). The values have a
// decaying spectrum (column scales exp(-i / 12)) and the weights are a softmax of N(0, 2^2) logits,
// so the 16th eigenvalue sits inside a continuum as on the model's value Grams; run one thread.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "veloxquant/eviction/leverage_scores.h"

namespace {

constexpr int64_t kDim = 64;
constexpr int64_t kRankCap = 16;

struct Block {
  std::vector<float> values, weights;
};

Block make_block(int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Block b;
  b.values.resize(static_cast<std::size_t>(rows * kDim));
  for (int64_t j = 0; j < rows; ++j) {
    for (int64_t i = 0; i < kDim; ++i)
      b.values[static_cast<std::size_t>(j * kDim + i)] = normal(rng) * std::exp(-static_cast<float>(i) / 12.0f);
  }
  b.weights.resize(static_cast<std::size_t>(rows));
  double sum = 0.0;
  for (float& w : b.weights) {
    w = std::exp(2.0f * normal(rng));
    sum += w;
  }
  for (float& w : b.weights) w = static_cast<float>(w / sum);
  return b;
}

void BM_Scores(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const Block b = make_block(rows, 11);
  std::vector<float> out(static_cast<std::size_t>(rows));
  for (auto _ : state) {
    veloxquant::eviction::value_leverage_scores(b.values.data(), nullptr, rows, kDim, b.weights.data(), kRankCap,
                                                out.data());
    benchmark::DoNotOptimize(out.data());
  }
}

void BM_Self(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const Block b = make_block(rows, 12);
  for (auto _ : state) {
    float s =
        veloxquant::eviction::value_self_leverage(b.values.data(), nullptr, rows, kDim, b.weights.data(), kRankCap);
    benchmark::DoNotOptimize(s);
  }
}

void BM_TopEigen(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Block b = make_block(512, 13);
  std::vector<double> gram(static_cast<std::size_t>(n * n), 0.0);
  for (int64_t j = 0; j < 512; ++j) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        const double w = b.weights[static_cast<std::size_t>(j)];
        gram[static_cast<std::size_t>(r * n + c)] +=
            w * b.values[static_cast<std::size_t>(j * kDim + r)] * w * b.values[static_cast<std::size_t>(j * kDim + c)];
      }
    }
  }
  std::vector<double> values, vectors;
  for (auto _ : state) {
    veloxquant::eviction::top_symmetric_eigenvectors(gram, static_cast<int>(n), static_cast<int>(kRankCap), values,
                                                     vectors);
    benchmark::DoNotOptimize(vectors.data());
  }
}

BENCHMARK(BM_Scores)->Name("leverage/scores")->Arg(512)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Self)->Name("leverage/self")->Arg(513)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopEigen)->Name("leverage/top_eigen")->Arg(64)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
