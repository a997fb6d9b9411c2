// A prefill of one cache, for counting instructions with callgrind: what the host's prefill
// spends in one layer's cache — storing and compressing the rows, and attention of every prompt
// query over the rows before it — without the model's matmuls, and without the machine's load
// (decode_step_instructions.cpp counts decode steps the same way). SmolLM2's attention geometry
// (9 query heads, 3 kv heads, head_dim 64), one layer, one thread; `ctx` random rows fed in
// chunks of 512 as the host's prefill does, all counted:
//
//   valgrind --tool=callgrind --instr-atstart=no build/bench/prefill_instructions kivi 4 4096
//   (then optional FIELD=VALUE settings, e.g. gear_rank=2)
//
// METHOD `none` is the host's native f16 cache: compare totals against it (the attention part
// grows as ctx^2 / 2 query-row pairs). Outside valgrind it prints the wall time (noisy).
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
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s METHOD BITS CTX [FIELD=VALUE...]   (METHOD none: native f16 cache)\n", argv[0]);
    return 2;
  }
  try {
    const std::string method = argv[1];
    const int bits = std::atoi(argv[2]);
    const int64_t ctx = std::atoll(argv[3]);
    if (ctx < 1) {
      std::fprintf(stderr, "CTX must be positive, got %s\n", argv[3]);
      return 2;
    }
    base::ThreadPool::set_global_threads(1);
    const std::vector<std::string> set(argv + 4, argv + argc);
    {
      // One short prefill outside the count: first-call dispatch and scratch growth.
      const std::shared_ptr<lm::KVCache> warm = make_cache(method, bits, set);
      std::mt19937 rng(3);
      fill(*warm, 64, rng);
    }
    const std::shared_ptr<lm::KVCache> cache = make_cache(method, bits, set);
    // The chunks drawn before the count (fill() would draw them inside it).
    struct Chunk {
      lm::Tensor q, k, v, out;
    };
    std::vector<Chunk> chunks;
    std::mt19937 rng(7);
    for (int64_t done = 0; done < ctx;) {
      const int64_t s = std::min<int64_t>(512, ctx - done);
      chunks.push_back({random_tensor({1, kQueryHeads, s, kDim}, lm::DType::F32, rng),
                        random_tensor({1, kKvHeads, s, kDim}, lm::DType::F16, rng),
                        random_tensor({1, kKvHeads, s, kDim}, lm::DType::F16, rng),
                        lm::Tensor({1, kQueryHeads, s, kDim}, lm::DType::F32)});
      done += s;
    }
    const auto t0 = std::chrono::steady_clock::now();
    CALLGRIND_START_INSTRUMENTATION;
    for (Chunk& c : chunks) step(*cache, c.q, c.k, c.v, c.out);
    CALLGRIND_STOP_INSTRUMENTATION;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s bits %d ctx %lld: %.1f ms prefill\n", method.c_str(), bits, static_cast<long long>(ctx),
                seconds * 1e3);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
