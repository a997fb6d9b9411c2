// Throughput of the host's kernels, each beside its scalar reference in the same run:
//   matvec/<format>/<path>  one decode matvec (576 x 1536, SmolLM2's FFN width) with f32
//                           activations, i16 activations, or the scalar reference
//                           (dequantize the row, f32 dot in double); weight GB/s and GFLOP/s
//                           (2 flops per weight), and x_reference = reference time / this time.
//   matvec_streamed/<format>/i16
//                           the same product over 160 times the rows (~90 MB for Q4_1, a whole
//                           SmolLM2 decode step's weights), so the weights stream from memory
//                           as in a decode step; x_in_cache = its weight GB/s over the 576-row
//                           product's (measured first, same run): how much of the kernel's
//                           in-cache rate the streamed product keeps.
//   attention/<ctx>         one decode step of grouped-query attention (9 query heads, 3 kv
//                           heads, d = 64, f16 cache) over ctx keys, single-threaded; GB/s of
//                           the keys and values read, against attention_reference.
// The weights (~0.5 MB for Q4) stay in L2, so these numbers measure the kernels, not DRAM.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "lm/kernels/attention.h"
#include "lm/kernels/i16_activations.h"
#include "lm/kernels/matmul.h"
#include "lm/kernels/vec_dot.h"
#include "lm/tensor.h"
#include "lm/weights/ggml_type.h"
#include "lm/weights/weight_matrix.h"

namespace {

using lm::GgmlType;

constexpr int64_t kRows = 576, kCols = 1536;

// Random blocks with sane f16 scales (random bytes would give inf / NaN scales).
std::vector<uint8_t> random_weights(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const auto info = lm::ggml_type_info(type);
  const std::size_t row_bytes = lm::ggml_row_bytes(type, cols);
  std::vector<uint8_t> bytes(row_bytes * static_cast<std::size_t>(rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : bytes) b = static_cast<uint8_t>(byte(rng));
  const auto put = [&](std::size_t offset, float v) {
    const uint16_t h = base::f32_to_f16(v);
    std::memcpy(bytes.data() + offset, &h, 2);
  };
  const int64_t blocks = rows * cols / info.block_size;
  for (int64_t k = 0; k < blocks; ++k) {
    const std::size_t at = static_cast<std::size_t>(k) * info.type_size;
    switch (type) {
      case GgmlType::F16:
        put(at, 0.01f * static_cast<float>(byte(rng) - 128));
        break;
      case GgmlType::Q4_0:
      case GgmlType::Q8_0:
      case GgmlType::Q5_0:
      case GgmlType::IQ4_NL:
      case GgmlType::IQ4_XS:
        put(at, 0.01f);
        break;
      case GgmlType::Q4_1:
        put(at, 0.01f);
        put(at + 2, -0.08f);
        break;
      case GgmlType::Q5_1:
        put(at, 0.01f);
        put(at + 2, -0.16f);
        break;
      case GgmlType::Q4_K:
      case GgmlType::Q5_K:
        put(at, 0.01f);
        put(at + 2, 0.01f);
        break;
      case GgmlType::Q2_K:
        put(at + 80, 0.01f);
        put(at + 82, 0.01f);
        break;
      case GgmlType::Q3_K:
        put(at + 108, 0.01f);
        break;
      case GgmlType::Q6_K:
        put(at + 208, 0.01f);
        break;
      default:
        break;
    }
  }
  return bytes;
}

enum class Path { kF32, kI16, kReference };

// A rows x kCols matrix of random blocks (seed 1), a normal input vector from the same generator
// and an output vector: what every matvec row here multiplies.
struct MatvecInputs {
  MatvecInputs(GgmlType type, int64_t rows)
      : rng(1),
        bytes(random_weights(type, rows, kCols, rng)),
        w(lm::WeightMatrix::view(type, rows, kCols, bytes.data(), nullptr, "bench")),
        x(kCols),
        y(rows) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& v : x) v = normal(rng);
  }
  std::mt19937 rng;
  std::vector<uint8_t> bytes;
  lm::WeightMatrix w;
  std::vector<float> x, y;
};

double seconds_per_call(Path path, const lm::WeightMatrix& w, const std::vector<float>& x, std::vector<float>& y) {
  const auto run = [&] {
    if (path == Path::kReference) {
      lm::kernels::matmul_reference(w, x.data(), 1, y.data());
    } else {
      lm::kernels::matvec(w, x.data(), y.data(), nullptr,
                          path == Path::kI16 ? lm::kernels::Activations::kI16 : lm::kernels::Activations::kF32);
    }
    benchmark::DoNotOptimize(y.data());
  };
  run();
  double best = 1e9;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

void register_matvec(GgmlType type, Path path, const std::string& path_name) {
  const std::string name = "matvec/" + lm::ggml_type_name(type) + "/" + path_name;
  benchmark::RegisterBenchmark(name.c_str(), [type, path](benchmark::State& state) {
    MatvecInputs in(type, kRows);
    const lm::WeightMatrix& w = in.w;
    std::vector<float>&x = in.x, &y = in.y;
    const double reference = seconds_per_call(Path::kReference, w, x, y);
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
      if (path == Path::kReference) {
        lm::kernels::matmul_reference(w, x.data(), 1, y.data());
      } else {
        lm::kernels::matvec(w, x.data(), y.data(), nullptr,
                            path == Path::kI16 ? lm::kernels::Activations::kI16 : lm::kernels::Activations::kF32);
      }
      benchmark::DoNotOptimize(y.data());
    }
    const double per_call = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                            static_cast<double>(state.iterations());
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(w.nbytes()));
    state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kRows * kCols * static_cast<double>(state.iterations()),
                                                   benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
    state.counters["x_reference"] = reference / per_call;
  })->Unit(benchmark::kMicrosecond);
}

// Weight GB/s of the i16 decode matvec over `rows` rows (best of five calls, one thread).
double i16_matvec_bytes_per_s(GgmlType type, int64_t rows) {
  MatvecInputs in(type, rows);
  return static_cast<double>(in.w.nbytes()) / seconds_per_call(Path::kI16, in.w, in.x, in.y);
}

void register_streamed_matvec(GgmlType type) {
  constexpr int64_t kStreamedRows = 160 * kRows;
  const std::string name = "matvec_streamed/" + lm::ggml_type_name(type) + "/i16";
  benchmark::RegisterBenchmark(name.c_str(), [type](benchmark::State& state) {
    const double in_cache = i16_matvec_bytes_per_s(type, kRows);
    MatvecInputs in(type, kStreamedRows);
    const lm::WeightMatrix& w = in.w;
    std::vector<float>&x = in.x, &y = in.y;
    const auto t0 = std::chrono::steady_clock::now();
    for (auto _ : state) {
      lm::kernels::matvec(w, x.data(), y.data(), nullptr, lm::kernels::Activations::kI16);
      benchmark::DoNotOptimize(y.data());
    }
    const double per_call = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                            static_cast<double>(state.iterations());
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(w.nbytes()));
    state.counters["x_in_cache"] = static_cast<double>(w.nbytes()) / per_call / in_cache;
  })->Unit(benchmark::kMillisecond);
}

void register_attention(int64_t ctx, bool reference) {
  const std::string name = std::string("attention/") + (reference ? "reference/" : "fast/") + std::to_string(ctx);
  benchmark::RegisterBenchmark(name.c_str(), [ctx, reference](benchmark::State& state) {
    constexpr int64_t kHeads = 9, kKvHeads = 3, kDim = 64;
    std::mt19937 rng(2);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> q(kHeads * kDim), k(kKvHeads * ctx * kDim), v(k.size());
    for (auto& e : q) e = normal(rng);
    for (auto& e : k) e = normal(rng);
    for (auto& e : v) e = normal(rng);
    const lm::Tensor queries = lm::Tensor::from_f32(q, {1, kHeads, 1, kDim}, lm::DType::F32);
    const lm::Tensor keys = lm::Tensor::from_f32(k, {1, kKvHeads, ctx, kDim}, lm::DType::F16);
    const lm::Tensor values = lm::Tensor::from_f32(v, {1, kKvHeads, ctx, kDim}, lm::DType::F16);
    lm::AttentionMask mask;
    mask.kind = lm::AttentionMask::Kind::kCausal;
    lm::Tensor out;
    const float scale = 0.125f;
    for (auto _ : state) {
      if (reference) {
        lm::kernels::attention_reference(queries, keys, values, mask, std::nullopt, scale, out);
      } else {
        lm::kernels::attention(queries, keys, values, mask, std::nullopt, scale, out, nullptr);
      }
      benchmark::DoNotOptimize(out.raw_data());
    }
    state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * 2 * kKvHeads * ctx * kDim * 2);
  })->Unit(benchmark::kMicrosecond);
}

void register_all() {
  for (GgmlType type :
       {GgmlType::F16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_0,
        GgmlType::Q5_1, GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS}) {
    register_matvec(type, Path::kF32, "f32");
    if (lm::kernels::has_i16_dot(type)) register_matvec(type, Path::kI16, "i16");
    register_matvec(type, Path::kReference, "reference");
  }
  for (GgmlType type : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K}) register_streamed_matvec(type);
  for (int64_t ctx : {1024, 4096}) {
    register_attention(ctx, false);
    register_attention(ctx, true);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
