// Encode, decode and score throughput of every quantizer in the family, at d = 128, on 4096
// random unit vectors. Each benchmark reports vectors/s (items) and bytes/s (the fp32 input
// for encode, the codes for decode and score) plus `x_memcpy`: its time per batch divided by
// the time of a memcpy of the same bytes measured in the same run (the baseline). The
// memcpy/* rows are that baseline on their own.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "veloxquant/quant/quant_eval.h"
#include "veloxquant/quant/quantizer.h"

namespace {

constexpr int kDim = 128;
constexpr std::size_t kVectors = 4096;

// Best-of-20 time of copying `bytes` bytes: the bandwidth floor for touching that data once.
double memcpy_seconds(std::size_t bytes) {
  std::vector<uint8_t> src(bytes, 1), dst(bytes);
  double best = 1e9;
  for (int r = 0; r < 20; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

struct Fixture {
  std::unique_ptr<veloxquant::quant::Quantizer> q;
  veloxquant::quant::UnitPairs pairs;
  std::vector<uint8_t> codes;
  std::vector<float> decoded;
  Fixture(const std::string& method, int bits)
      : q(veloxquant::quant::make_quantizer(method, kDim, bits, 42)),
        pairs(veloxquant::quant::draw_unit_pairs(kDim, kVectors, 7)),
        codes(kVectors * q->code_bytes()),
        decoded(kVectors * kDim) {
    q->encode(pairs.x.data(), kVectors, codes.data());
  }
};

template <class Body>
void timed(benchmark::State& state, std::size_t bytes, Body body) {
  const double baseline = memcpy_seconds(bytes);
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) body();
  const double per_batch = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                           static_cast<double>(state.iterations());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kVectors));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["bytes_per_vector"] = static_cast<double>(bytes) / kVectors;
  state.counters["x_memcpy"] = per_batch / baseline;
}

void register_all() {
  const std::vector<std::pair<std::string, int>> configs = {
      {"turboquant_mse", 2}, {"turboquant_mse", 4}, {"turboquant_prod", 3}, {"qjl", 1},  {"turboquant_rvq", 2},
      {"turboquant_rvq", 4}, {"polar", 2},          {"rabitq", 1},          {"kivi", 2}, {"kivi", 4}};
  for (const auto& config : configs) {
    // Named copies, not a structured binding: clang before 16 cannot capture bindings.
    const std::string& method = config.first;
    const int bits = config.second;
    const std::string tag = method + "/b" + std::to_string(bits);
    benchmark::RegisterBenchmark(("encode/" + tag).c_str(), [method, bits](benchmark::State& state) {
      Fixture f(method, bits);
      timed(state, kVectors * kDim * sizeof(float), [&] {
        f.q->encode(f.pairs.x.data(), kVectors, f.codes.data());
        benchmark::DoNotOptimize(f.codes.data());
      });
    });
    benchmark::RegisterBenchmark(("decode/" + tag).c_str(), [method, bits](benchmark::State& state) {
      Fixture f(method, bits);
      timed(state, f.codes.size(), [&] {
        f.q->decode(f.codes.data(), kVectors, f.decoded.data());
        benchmark::DoNotOptimize(f.decoded.data());
      });
    });
    benchmark::RegisterBenchmark(("score/" + tag).c_str(), [method, bits](benchmark::State& state) {
      Fixture f(method, bits);
      const auto prepared = f.q->prepare_query(f.pairs.y.data());
      std::vector<float> scores(kVectors);
      timed(state, f.codes.size(), [&] {
        f.q->score(prepared, f.codes.data(), kVectors, scores.data());
        benchmark::DoNotOptimize(scores.data());
      });
    });
  }
  // The baselines themselves: the fp32 batch, and the 2-bit RVQ codes of the same batch.
  for (std::size_t bytes : {kVectors * kDim * sizeof(float), kVectors * std::size_t{66}}) {
    benchmark::RegisterBenchmark(("memcpy/" + std::to_string(bytes)).c_str(), [bytes](benchmark::State& state) {
      std::vector<uint8_t> src(bytes, 1), dst(bytes);
      for (auto _ : state) {
        std::memcpy(dst.data(), src.data(), bytes);
        benchmark::DoNotOptimize(dst.data());
        benchmark::ClobberMemory();
      }
      state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kVectors));
      state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
