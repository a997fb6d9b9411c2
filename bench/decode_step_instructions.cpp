// Decode steps of one cache, for counting instructions with callgrind: a measure of attention's
// cost per kv row that does not move with the machine's load (wall-clock ratios on a shared
// 2-core machine do). SmolLM2's attention geometry (9 query heads, 3 kv heads, head_dim 64),
// one layer, one thread; the cache is filled with `ctx` random rows the way the host's prefill
// does (512-row chunks), then `steps` decode steps run with collection on:
//
//   valgrind --tool=callgrind --instr-atstart=no build/bench/decode_step_instructions kivi 4 1024 8
//   (then optional FIELD=VALUE settings, e.g. rvq_value_bits=4)
//   fill=append (among the settings): the ctx rows are appended by update_and_fetch, without the
//   prefill's attention — the same stored rows for caches whose encode does not depend on the
//   queries (not for eviction caches that score them), and minutes instead of tens of minutes
//   for a 4096-row fill under valgrind on a loaded machine.
//   callgrind_annotate callgrind.out.<pid>      # per function; divide by steps x 3 x ctx
//
// METHOD `none` is the host's native f16 cache. Outside valgrind it prints the wall time per
// step (noisy; compare instruction counts instead).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <vector>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

#include "attention_steps.h"

using namespace bench_attention;

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s METHOD BITS CTX STEPS [FIELD=VALUE...]   (METHOD none: native f16 cache)\n",
                 argv[0]);
    return 2;
  }
  try {
    const std::string method = argv[1];
    const int bits = std::atoi(argv[2]);
    const int64_t ctx = std::atoll(argv[3]);
    const int steps = std::atoi(argv[4]);
    if (ctx < 1 || steps < 1) {
      std::fprintf(stderr, "CTX and STEPS must be positive, got %s and %s\n", argv[3], argv[4]);
      return 2;
    }
    base::ThreadPool::set_global_threads(1);
    std::vector<std::string> settings;
    bool append_fill = false;
    for (int a = 5; a < argc; ++a) {
      const std::string s = argv[a];
      if (s == "fill=append") {
        append_fill = true;
      } else {
        settings.push_back(s);
      }
    }
    const std::shared_ptr<lm::KVCache> cache = make_cache(method, bits, settings);
    std::mt19937 rng(7);
    if (append_fill) {
      fill_by_append(*cache, ctx, rng);
    } else {
      fill(*cache, ctx, rng);
    }
    const lm::Tensor q = random_tensor({1, kQueryHeads, 1, kDim}, lm::DType::F32, rng);
    const lm::Tensor k = random_tensor({1, kKvHeads, 1, kDim}, lm::DType::F16, rng);
    const lm::Tensor v = random_tensor({1, kKvHeads, 1, kDim}, lm::DType::F16, rng);
    lm::Tensor out({1, kQueryHeads, 1, kDim}, lm::DType::F32);
    // One step outside the count: first-call dispatch and scratch growth are not per-step costs.
    step(*cache, q, k, v, out);
    if (cache->is_trimmable()) cache->trim(1);
    const auto t0 = std::chrono::steady_clock::now();
    CALLGRIND_START_INSTRUMENTATION;
    for (int i = 0; i < steps; ++i) {
      step(*cache, q, k, v, out);
      if (cache->is_trimmable()) cache->trim(1);  // the context stays at ctx
    }
    CALLGRIND_STOP_INSTRUMENTATION;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s bits %d ctx %lld: %.1f us per step (%lld kv rows)\n", method.c_str(), bits,
                static_cast<long long>(ctx), seconds / steps * 1e6, static_cast<long long>(ctx) * kKvHeads);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
