// The host's own decode attention (lm::kernels::attention over f16 rows in place) against the
// machine's streaming-read bandwidth, both measured in the same process: how close one decode
// token's attention runs to memory speed (issue 11: the native cache at >= 70% of the probe).
//
//   native_decode/<layers>/<ctx>  one decode token's attention over `layers` layers of SmolLM2's
//                                 geometry (9 query heads, 3 kv heads, d = 64, f16 keys and
//                                 values, ctx rows each), one new query per layer, on the
//                                 global pool (all cores, or VQ_BENCH_THREADS). Counters:
//     kv_GBps        key and value bytes read per second (3 x ctx x 2 x 128 B per layer),
//     probe_GBps     the streaming-read probe of the same run (base::measure_read_bandwidth,
//                    512 MiB, best of 3 passes, the same pool),
//     pct_of_probe   kv_GBps over probe_GBps, in percent,
//     ns_per_row     wall time per (layer, kv head, row).
//   30 layers x 8192 rows is 180 MiB, far above the last-level cache: that row is DRAM-bound
//   the way a real decode step is. 1 layer (6 MiB) stays in L3 after the first iteration: its
//   rate is the kernel's compute ceiling, so the gap between the two says how much of the
//   DRAM row's time is waiting for memory rather than computing.
// Rows are random N(0, 1), which is what the speed depends on.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "base/read_bandwidth.h"
#include "base/thread_pool.h"
#include "lm/cache/cache.h"
#include "lm/kernels/attention.h"
#include "lm/tensor.h"

namespace {

constexpr int64_t kKvHeads = 3, kQueryHeads = 9, kDim = 64;
constexpr float kScale = 0.125f;

// The probe, once per process (first use), on the pool the benchmarks run on.
double probe_bytes_per_s() {
  static const double rate =
      base::measure_read_bandwidth(base::ThreadPool::global(), std::size_t{512} << 20, 3).best_bytes_per_s;
  return rate;
}

// `layers` f16 [1, H_kv, ctx, D] tensors: one random layer, copied into the others (distinct
// memory is what matters for the cache hierarchy, not distinct values).
std::vector<lm::Tensor> random_layers(int64_t layers, int64_t ctx, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(kKvHeads * ctx * kDim));
  for (float& x : v) x = normal(rng);
  const lm::Tensor first = lm::Tensor::from_f32(v, {1, kKvHeads, ctx, kDim}, lm::DType::F16);
  std::vector<lm::Tensor> out;
  for (int64_t l = 0; l < layers; ++l) out.push_back(first.clone());
  return out;
}

void BM_NativeDecode(benchmark::State& state) {
  const int64_t layers = state.range(0), ctx = state.range(1);
  const double probe = probe_bytes_per_s();
  std::mt19937 rng(11);
  const std::vector<lm::Tensor> keys = random_layers(layers, ctx, rng), values = random_layers(layers, ctx, rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> qv(static_cast<std::size_t>(kQueryHeads * kDim));
  for (float& x : qv) x = normal(rng);
  const lm::Tensor q = lm::Tensor::from_f32(qv, {1, kQueryHeads, 1, kDim}, lm::DType::F32);
  lm::AttentionMask mask;
  mask.kind = lm::AttentionMask::Kind::kCausal;
  lm::Tensor out({1, kQueryHeads, 1, kDim}, lm::DType::F32);
  base::ThreadPool* pool = &base::ThreadPool::global();
  double seconds = 0.0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t l = 0; l < layers; ++l) {
      lm::kernels::attention(q, keys[l], values[l], mask, std::nullopt, kScale, out, pool);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    seconds += s;
    state.SetIterationTime(s);
    benchmark::DoNotOptimize(out.raw_data());
  }
  const double n = static_cast<double>(state.iterations());
  const double rows = static_cast<double>(layers * kKvHeads * ctx);
  const double bytes = rows * 2 * kDim * 2;
  state.counters["kv_GBps"] = bytes * n / seconds / 1e9;
  state.counters["probe_GBps"] = probe / 1e9;
  state.counters["pct_of_probe"] = 100.0 * bytes * n / seconds / probe;
  state.counters["ns_per_row"] = seconds / n / rows * 1e9;
}

int register_all() {
  // VQ_BENCH_THREADS=N sizes the global pool (default: all cores, as bench-host's --threads).
  if (const char* t = std::getenv("VQ_BENCH_THREADS")) base::ThreadPool::set_global_threads(std::atoi(t));
  benchmark::RegisterBenchmark("native_decode", BM_NativeDecode)
      ->Args({30, 1024})
      ->Args({30, 4096})
      ->Args({30, 8192})
      ->Args({1, 8192})
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond);
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
