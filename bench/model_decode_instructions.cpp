// One real model's decode step under callgrind: instructions per token of the whole forward
// pass (every matmul, the head, norms, activations, attention over `ctx` cached rows), a
// figure the machine's load does not move. The caches are filled with `ctx` random rows
// directly (a real prefill would take minutes under valgrind, and attention's cost depends on
// how many rows there are, not on their values); then one step runs outside the count (first
// call dispatch, scratch growth) and `steps` steps inside it, each followed by trim(1) so the
// context stays at ctx:
//
//   valgrind --tool=callgrind --instr-atstart=no build/bench/model_decode_instructions models/gemma-3-270m-q4_k_m.gguf
//   1024 2 callgrind_annotate callgrind.out.<pid>     # per function; divide "Collected" by steps
//
// One thread, i16 activations (the decode default). It also prints the bytes one step must
// read: the weight rows it touches (all layer matrices, the head, one embedding row) and the
// cached K/V rows every layer attends to (a sliding-window layer at most its window).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_START_INSTRUMENTATION
#define CALLGRIND_STOP_INSTRUMENTATION
#endif

#include "base/thread_pool.h"
#include "lm/arch/llama_model.h"
#include "lm/cache/block_kv_cache.h"
#include "lm/cache/cache.h"
#include "lm/load.h"

namespace {

lm::Tensor random_rows(int64_t heads, int64_t n, int64_t d, lm::DType dtype, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(heads * n * d));
  for (float& x : v) x = dist(rng);
  return lm::Tensor::from_f32(v, {1, heads, n, d}, dtype);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf CTX STEPS\n", argv[0]);
    return 2;
  }
  try {
    const int64_t ctx = std::atoll(argv[2]);
    const int steps = std::atoi(argv[3]);
    if (ctx < 1 || steps < 1) {
      std::fprintf(stderr, "CTX and STEPS must be positive, got %s and %s\n", argv[2], argv[3]);
      return 2;
    }
    base::ThreadPool::set_global_threads(1);
    lm::LoadOptions options;
    options.threads = 1;
    const lm::LoadedModel loaded = lm::load(argv[1], options);
    const auto* model = dynamic_cast<const lm::LlamaModel*>(loaded.model.get());
    if (!model) throw std::runtime_error("not a llama-family model");
    const lm::ModelConfig& c = model->config();
    lm::CacheList caches = lm::make_prompt_cache(*model);
    std::mt19937 rng(7);
    double kv_bytes = 0.0;
    for (std::size_t l = 0; l < caches.size(); ++l) {
      lm::KVCache& cache = *caches[l];
      const lm::DType dtype = dynamic_cast<const lm::BlockKVCache*>(&cache) ? lm::DType::F32 : model->kv_dtype();
      for (int64_t done = 0; done < ctx;) {
        const int64_t s = std::min<int64_t>(512, ctx - done);
        cache.update_and_fetch(random_rows(c.n_kv_heads, s, c.head_dim, dtype, rng),
                               random_rows(c.n_kv_heads, s, c.head_dim, dtype, rng));
        done += s;
      }
      const std::optional<int64_t> window = model->layers()[l].sliding_window;
      const int64_t rows = window ? std::min<int64_t>(*window, ctx + 1) : ctx + 1;
      kv_bytes += 2.0 * static_cast<double>(rows * c.n_kv_heads * c.head_dim) * lm::dtype_size(model->kv_dtype());
    }
    const lm::LlamaWeights& w = model->weights();
    double weight_bytes = static_cast<double>(w.output.nbytes()) + static_cast<double>(w.token_embedding.row_bytes);
    for (const lm::LlamaLayerWeights& l : w.layers) {
      for (const lm::WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
        weight_bytes += static_cast<double>(m->nbytes());
      }
    }
    const std::vector<int32_t> next = {1};
    std::vector<float> logits;
    model->forward(next, caches, logits);
    for (auto& cache : caches) cache->trim(1);
    const auto t0 = std::chrono::steady_clock::now();
    CALLGRIND_START_INSTRUMENTATION;
    for (int i = 0; i < steps; ++i) {
      model->forward(next, caches, logits);
      for (auto& cache : caches) cache->trim(1);
    }
    CALLGRIND_STOP_INSTRUMENTATION;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("ctx %lld: %.2f ms per step; bytes per step: weights %.1f MB + kv %.2f MB = %.1f MB\n",
                static_cast<long long>(ctx), seconds / steps * 1e3, weight_bytes / 1e6, kv_bytes / 1e6,
                (weight_bytes + kv_bytes) / 1e6);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
