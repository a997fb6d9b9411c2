// One decode matvec (or one row dequantization pass) of a weight format, for counting
// instructions with callgrind: the formats' cost per weight without the machine's load in it
// (wall-clock ratios on a shared 2-core machine move with the load). SmolLM2's FFN shape
// (576 rows x 1536 columns), one thread, random blocks with sane f16 scales:
//
//   valgrind --tool=callgrind --instr-atstart=no build/bench/matvec_instructions Q5_K i16
//   (MODE: i16 = the decode default, f32 = f32 activations, deq = dequantize every row as the
//   prefill matmul does); "Collected" / (576 x 1536) = instructions per weight.
//
// Outside valgrind it prints the wall time of one call (noisy; compare instruction counts).
#include <valgrind/callgrind.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "lm/kernels/matmul.h"
#include "lm/kernels/simd_dequantize.h"
#include "lm/weights/ggml_type.h"
#include "lm/weights/weight_matrix.h"

namespace {

using lm::GgmlType;

constexpr int64_t kRows = 576, kCols = 1536;

// Byte offsets of each format's f16 scale fields (lm/weights/block_formats.h): random bytes
// there could be inf / NaN.
std::vector<std::size_t> f16_fields(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0:
    case GgmlType::Q8_0:
    case GgmlType::Q5_0:
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS:
      return {0};
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
      return {0, 2};
    case GgmlType::Q2_K:
      return {80, 82};
    case GgmlType::Q3_K:
      return {108};
    case GgmlType::Q6_K:
      return {208};
    default:
      return {};
  }
}

GgmlType type_named(const std::string& name) {
  for (uint32_t t = 0; t < 64; ++t) {
    const auto info = lm::ggml_type_info(t);
    if (info.name == name && info.supported && info.block_size > 1) return static_cast<GgmlType>(t);
  }
  throw std::runtime_error("not a supported quantized type: " + name);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s TYPE i16|f32|deq   (e.g. Q5_K i16)\n", argv[0]);
    return 2;
  }
  try {
    const GgmlType type = type_named(argv[1]);
    const std::string mode = argv[2];
    if (mode != "i16" && mode != "f32" && mode != "deq") throw std::runtime_error("MODE must be i16, f32 or deq");
    const auto info = lm::ggml_type_info(type);
    std::vector<uint8_t> bytes(lm::ggml_row_bytes(type, kCols) * kRows);
    std::mt19937 rng(1);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    const uint16_t scale = base::f32_to_f16(0.01f);
    for (int64_t k = 0; k < kRows * kCols / info.block_size; ++k) {
      for (std::size_t off : f16_fields(type)) std::memcpy(bytes.data() + k * info.type_size + off, &scale, 2);
    }
    const auto w = lm::WeightMatrix::view(type, kRows, kCols, bytes.data(), nullptr, "bench");
    std::vector<float> x(kCols), y(kRows), row(kCols);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto& v : x) v = normal(rng);
    const auto act = mode == "i16" ? lm::kernels::Activations::kI16 : lm::kernels::Activations::kF32;
    const auto run = [&] {
      if (mode == "deq") {
        for (int64_t r = 0; r < kRows; ++r) lm::kernels::dequantize_row_fast(type, w.row(r), row.data(), kCols);
      } else {
        lm::kernels::matvec(w, x.data(), y.data(), nullptr, act);
      }
    };
    run();  // outside the count: first-call dispatch and scratch growth
    const auto t0 = std::chrono::steady_clock::now();
    CALLGRIND_START_INSTRUMENTATION;
    run();
    CALLGRIND_STOP_INSTRUMENTATION;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s %s: %.1f us (%lld weights)\n", argv[1], argv[2], seconds * 1e6,
                static_cast<long long>(kRows) * kCols);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 0;
}
