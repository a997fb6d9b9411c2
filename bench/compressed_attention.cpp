// One decode step of attention over a compressed or evicting cache, beside the host's native
// f16 attention over the same context in the same iteration (SmolLM2's geometry: 9 query heads,
// 3 kv heads, head_dim 64; both on the global pool: all cores, or VQ_BENCH_THREADS):
//   attention/<method>/<ctx>   time of the method's fused attention for one new token (the
//                              token is trimmed back afterwards where the cache allows, so the
//                              context stays at ctx); counters:
//     x_native     native time / method time (>1: the compressed cache is faster),
//     kv_GBps      the cache's resident bytes read per second,
//     native_GBps  the same for the native cache's f16 rows.
//   rows/<cache>/<N>           CPU time (the process's, every pool thread included) of one
//                              decode step over N stored rows: the native f16 cache holding N
//                              rows beside eviction caches whose budget is N (filled past it, so
//                              every step evicts a row, as a long decode does) — the per-row cost
//                              of the eviction path against the native kernel's (issue 11).
// Rows are random (keys N(0,1), values N(0,1)), which is what the speed depends on.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attention_steps.h"
#include "base/thread_pool.h"
#include "lm/cache/cache.h"
#include "lm/tensor.h"

namespace {

using namespace bench_attention;

struct Setup {
  std::string method;
  int bits;
  std::vector<std::string> set;
  std::string preset = {};  // non-empty: the preset's configuration (method, bits and set unused)
};

void BM_Attention(benchmark::State& state, const Setup& setup) {
  const int64_t ctx = state.range(0);
  std::mt19937 rng(7);
  lm::FullKVCache native(lm::DType::F16);
  fill(native, ctx, rng);
  std::shared_ptr<lm::KVCache> cache =
      setup.preset.empty() ? make_cache(setup.method, setup.bits, setup.set) : make_preset_cache(setup.preset);
  fill(*cache, ctx, rng);
  // A cache that cannot trim grows by a row per step; it restarts from a copy of the filled cache
  // (untimed) every kRestart steps so it is measured at ctx to ctx + kRestart rows, not at the
  // thousands more a long run would reach. kRestart = 32 keeps block flushes (gear, kivi: one per
  // 32 rows) at the rate decode pays them.
  constexpr int64_t kRestart = 32;
  const std::shared_ptr<lm::KVCache> filled = cache->is_trimmable() ? nullptr : cache->clone();
  const lm::Tensor q = random_tensor({1, kQueryHeads, 1, kDim}, lm::DType::F32, rng);
  const lm::Tensor k = random_tensor({1, kKvHeads, 1, kDim}, lm::DType::F16, rng);
  const lm::Tensor v = random_tensor({1, kKvHeads, 1, kDim}, lm::DType::F16, rng);
  lm::Tensor out({1, kQueryHeads, 1, kDim}, lm::DType::F32), native_out = out;
  double native_seconds = 0.0, method_seconds = 0.0;
  using clock = std::chrono::steady_clock;
  for (auto _ : state) {
    if (filled && cache->offset() >= ctx + kRestart) {
      state.PauseTiming();
      cache = filled->clone();
      state.ResumeTiming();
    }
    const auto t0 = clock::now();
    step(native, q, k, v, native_out);
    native.trim(1);
    const auto t1 = clock::now();
    step(*cache, q, k, v, out);
    if (cache->is_trimmable()) cache->trim(1);
    const auto t2 = clock::now();
    native_seconds += std::chrono::duration<double>(t1 - t0).count();
    const double m = std::chrono::duration<double>(t2 - t1).count();
    method_seconds += m;
    state.SetIterationTime(m);
    benchmark::DoNotOptimize(out.data<float>());
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["x_native"] = native_seconds / method_seconds;
  state.counters["kv_GBps"] = static_cast<double>(cache->nbytes()) * n / method_seconds / 1e9;
  state.counters["native_GBps"] = static_cast<double>(ctx * kKvHeads * kDim * 2 * 2) * n / native_seconds / 1e9;
  state.counters["kv_MiB"] = static_cast<double>(cache->nbytes()) / (1 << 20);
}

// One decode step over `rows` stored rows, CPU time: the native cache (method "none") holds rows
// rows and is trimmed back after each step; an eviction cache has budget `rows`, is filled with
// max(4096, rows + 512) tokens (so it is full and evicts a row per step) and restarts from a copy
// every kRestart steps (untimed), like BM_Attention's caches that cannot trim.
void BM_Rows(benchmark::State& state, const Setup& setup) {
  const int64_t rows = state.range(0);
  std::mt19937 rng(7);
  std::vector<std::string> set = setup.set;
  const bool native = setup.method == "none";
  if (setup.method == "streaming_llm") {  // its budget: the window plus its 4 sinks
    set.push_back("stream_window_size=" + std::to_string(rows - 4));
  } else if (!native) {
    set.push_back(setup.method + "_budget=" + std::to_string(rows));
  }
  // Filled once per (cache, rows) and reused by Google Benchmark's repeated runs of this
  // function: an eviction cache's prefill (H2O scores every prompt token) would otherwise take
  // more CPU than the steps measured, and swamp a profile of them.
  static std::map<std::string, std::shared_ptr<lm::KVCache>> filled_caches;
  std::string key = setup.method + "/" + std::to_string(rows);
  for (const std::string& a : set) key += "/" + a;
  std::shared_ptr<lm::KVCache>& filled_once = filled_caches[key];
  if (!filled_once) {
    filled_once = make_cache(setup.method, setup.bits, set);
    fill(*filled_once, native ? rows : std::max<int64_t>(4096, rows + 512), rng);
  }
  std::shared_ptr<lm::KVCache> cache = filled_once->clone();
  constexpr int64_t kRestart = 32;
  const std::shared_ptr<lm::KVCache> filled = cache->is_trimmable() ? nullptr : filled_once;
  std::mt19937 step_rng(8);  // the step's rows, the same whether or not this run filled the cache
  const lm::Tensor q = random_tensor({1, kQueryHeads, 1, kDim}, lm::DType::F32, step_rng);
  const lm::Tensor k = random_tensor({1, kKvHeads, 1, kDim}, lm::DType::F16, step_rng);
  const lm::Tensor v = random_tensor({1, kKvHeads, 1, kDim}, lm::DType::F16, step_rng);
  lm::Tensor out({1, kQueryHeads, 1, kDim}, lm::DType::F32);
  int64_t steps = 0;
  for (auto _ : state) {
    if (filled && ++steps % kRestart == 0) {
      state.PauseTiming();
      cache = filled->clone();
      state.ResumeTiming();
    }
    step(*cache, q, k, v, out);
    if (cache->is_trimmable()) cache->trim(1);
    benchmark::DoNotOptimize(out.data<float>());
  }
}

const Setup kRowSetups[] = {
    {"none", 0, {}, ""},
    {"h2o", 2, {}, ""},  // f16 rows ("dtype" storage)
    {"h2o", 4, {"eviction_storage=turboquant_rvq", "rvq_value_bits=4"}, ""},
    {"streaming_llm", 2, {}, ""},  // no scores: the eviction path without row weights
};

const Setup kSetups[] = {
    {"kivi", 4, {}},
    {"kivi", 2, {}},
    {"turboquant_rvq", 2, {"rvq_value_bits=4"}},
    {"turboquant_rvq", 4, {"rvq_value_bits=4"}},
    {"turboquant_rvq", 2, {}},
    {"h2o", 2, {"h2o_budget=512"}},
    // Issue 11: eviction over quantized storage at least as fast as over dtype storage.
    {"h2o", 4, {"h2o_budget=512", "eviction_storage=kivi"}},
    {"h2o", 4, {"h2o_budget=512", "eviction_storage=turboquant_rvq", "rvq_value_bits=4"}},
    {"streaming_llm", 2, {"stream_window_size=508"}},
    {"curdkv", 2, {}},    // the defaults: budget 512, rank cap 16 (two leverage problems per step)
    {"nestedkv", 2, {}},  // the defaults: budget 512 per head
    {"", 0, {}, "q8"},
    {"", 0, {}, "q5"},
    {"", 0, {}, "q4"},
    {"", 0, {}, "q3"},
    {"gear", 2, {"gear_bits=4", "gear_rank=2"}},
    {"gear", 2, {}},                     // the defaults: 2 bits, energy-rule rank (high on random rows), 1% outliers
    {"gear", 2, {"gear_recode=false"}},  // the defaults' blocks all kept as factors (the original's)
    {"kvquant", 2, {}},
    {"nsnquant", 2, {}},
    {"adakv", 2, {}},
    {"a2ats", 2, {}},
    {"cachegen", 2, {}},
    {"kvtc", 2, {}},
    {"kvtc", 2, {"kvtc_integer_keys=true"}},
    {"kitty", 2, {}},
    {"amc", 2, {}},
    {"svdq", 2, {}},
    {"anchorkv", 2, {}},
    {"comm_vq", 2, {}},
    {"skvq", 2, {}},
    {"vecinfer", 2, {}},
    {"xquant", 2, {}},
};

int register_all() {
  // VQ_BENCH_THREADS=N sizes the global pool (default: all cores); 1 measures the kernels alone,
  // free of scheduling noise on a shared machine.
  if (const char* t = std::getenv("VQ_BENCH_THREADS")) base::ThreadPool::set_global_threads(std::atoi(t));
  for (const Setup& s : kSetups) {
    std::string name =
        s.preset.empty() ? "attention/" + s.method + "_b" + std::to_string(s.bits) : "attention/preset_" + s.preset;
    for (const std::string& a : s.set) name += "_" + a;
    benchmark::RegisterBenchmark(name.c_str(), BM_Attention, s)
        ->Arg(1024)
        ->Arg(4096)
        ->Arg(8192)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (const Setup& s : kRowSetups) {
    std::string name = "rows/" + s.method + "_b" + std::to_string(s.bits);
    for (const std::string& a : s.set) name += "_" + a;
    benchmark::RegisterBenchmark(name.c_str(), BM_Rows, s)
        ->Arg(512)
        ->Arg(1290)
        ->Arg(2580)
        ->Arg(4096)
        ->MeasureProcessCPUTime()
        ->Unit(benchmark::kMicrosecond);
  }
  return 0;
}
const int registered = register_all();

}  // namespace

BENCHMARK_MAIN();
