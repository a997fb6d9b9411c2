// End-to-end host speed on a real GGUF model: one decode step at a fixed context length
// (128, 1k, 4k) and a 512-token prefill, at 1 and 2 threads. The decode benchmark fills the
// caches once, then times forward(1 token) followed by trim(1), so every iteration sees the
// same context. The time column is ms per token (decode) / per prompt (prefill); decode also
// reports the weight bytes streamed per second (the figure a memory-bound decode is judged
// by), prefill tokens/s. Compare the CPU column too: on a shared machine wall time mostly
// measures the neighbours.
//
// Model: $VQ_BENCH_MODEL, default models/SmolLM2-135M-Instruct.Q4_1.gguf (skipped when absent).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "lm/arch/llama_model.h"
#include "lm/cache/cache.h"
#include "lm/load.h"

namespace {

std::string model_path() {
  const char* env = std::getenv("VQ_BENCH_MODEL");
  return env ? env : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

// Deterministic, varied token ids (speed does not depend on which tokens they are).
std::vector<int32_t> tokens(int64_t n, int32_t vocab, int32_t salt) {
  std::vector<int32_t> out(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>((i * 7919 + int64_t{salt} * 104729 + 17) % vocab);
  return out;
}

// Bytes of weights one token's forward pass reads (every matrix once, the head included).
double weight_bytes(const lm::Model& model) {
  const auto* llama = dynamic_cast<const lm::LlamaModel*>(&model);
  if (!llama) return 0.0;
  const lm::LlamaWeights& w = llama->weights();
  double total = static_cast<double>(w.output.nbytes());
  for (const lm::LlamaLayerWeights& l : w.layers) {
    for (const lm::WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) total += m->nbytes();
  }
  return total;
}

lm::LoadedModel load(int threads, bool i16 = true) {
  lm::LoadOptions options;
  options.threads = threads;
  options.i16_activations = i16;
  return lm::load(model_path(), options);
}

void decode(benchmark::State& state) {
  if (!std::filesystem::exists(model_path())) {
    state.SkipWithError(("model not found: " + model_path()).c_str());
    return;
  }
  const int64_t ctx = state.range(0);
  const auto loaded = load(static_cast<int>(state.range(1)), state.range(2) != 0);
  lm::Model& model = *loaded.model;
  lm::CacheList caches = lm::make_prompt_cache(model);
  std::vector<float> logits;
  const auto prompt = tokens(ctx, model.config().vocab_size, 1);
  for (int64_t i = 0; i < ctx; i += 512) {
    const std::vector<int32_t> chunk(prompt.begin() + i, prompt.begin() + std::min<int64_t>(ctx, i + 512));
    model.forward(chunk, caches, logits);
  }
  const std::vector<int32_t> next = {prompt[0]};
  for (auto _ : state) {
    model.forward(next, caches, logits);
    for (auto& cache : caches) cache->trim(1);
    benchmark::DoNotOptimize(logits.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(weight_bytes(model) * static_cast<double>(state.iterations())));
}

void prefill(benchmark::State& state) {
  if (!std::filesystem::exists(model_path())) {
    state.SkipWithError(("model not found: " + model_path()).c_str());
    return;
  }
  const int64_t n = state.range(0);
  const auto loaded = load(static_cast<int>(state.range(1)));
  lm::Model& model = *loaded.model;
  const auto prompt = tokens(n, model.config().vocab_size, 2);
  std::vector<float> logits;
  for (auto _ : state) {
    lm::CacheList caches = lm::make_prompt_cache(model);
    model.forward(prompt, caches, logits);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["tokens_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations() * n), benchmark::Counter::kIsRate);
}

// i16: integer activations (the default) or f32 activations (the reference, and the
// kernels before i16 existed) — side by side in the same run.
BENCHMARK(decode)
    ->ArgNames({"ctx", "threads", "i16"})
    ->ArgsProduct({{128, 1024, 4096}, {1, 2}, {1, 0}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(prefill)
    ->ArgNames({"tokens", "threads"})
    ->ArgsProduct({{512}, {1, 2}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
