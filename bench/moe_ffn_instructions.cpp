// One mixture-of-experts FFN layer (lm/arch/moe_ffn.h) beside the dense SwiGLU FFN of the same
// active size, for counting instructions with callgrind: what routing costs over the k experts'
// own matmuls. Qwen3-30B-A3B's expert shape (dim 2048, expert FFN 768, top-8), 32 experts
// instead of 128 (memory; unrouted experts are never read, so E only changes the router), one
// thread, random Q4_K/Q8_0 blocks with sane f16 scales:
//
//   valgrind --tool=callgrind --instr-atstart=no build/bench/moe_ffn_instructions moe 1 Q4_K
//   valgrind --tool=callgrind --instr-atstart=no build/bench/moe_ffn_instructions dense 1 Q4_K
//   (KIND moe | dense, TOKENS 1 = a decode step, e.g. 64 = a prefill chunk; "Collected" / TOKENS
//   = instructions per token). dense = gate/up [k*768, 2048] and down [2048, k*768], the FFN a
//   token of the MoE layer costs if routing were free.
//
// Measured (Q4_K, 2026-12-04): decode, 1 token: moe 27.1M instructions, dense 26.3M (routing,
// the router's 32x2048 f32 matvec and the k separate down products: +3%). Prefill, 64 tokens:
// moe 907.8M, dense 637.8M (+42%): with 512 token-expert pairs over 32 experts each expert
// sees ~16 tokens, so all 32 experts' rows are dequantized once each (4x the dense layer's
// weights: DequantizeQ4_K 296M vs 74M) for the same number of dot products — inherent to
// prefill over a sparse layer; gathering and scattering the rows costs 2M.
//
// Outside valgrind it prints the wall time of one call (noisy; compare instruction counts).
#include <valgrind/callgrind.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/half.h"
#include "lm/arch/moe_ffn.h"
#include "lm/kernels/elementwise.h"
#include "lm/kernels/matmul.h"
#include "lm/weights/ggml_type.h"

namespace {

using lm::GgmlType;

constexpr int64_t kDim = 2048, kExpertFfn = 768;
constexpr int kExperts = 32, kUsed = 8;

struct Blocks {
  std::vector<uint8_t> bytes;
  // n_matrices [rows, cols] matrices of `type`, random codes, f16 scale fields set to 0.01.
  Blocks(GgmlType type, int64_t n_matrices, int64_t rows, int64_t cols, std::mt19937& rng) {
    const auto info = lm::ggml_type_info(type);
    bytes.resize(lm::ggml_row_bytes(type, cols) * rows * n_matrices);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    const uint16_t scale = base::f32_to_f16(0.01f);
    const std::vector<std::size_t> fields =
        type == GgmlType::Q4_K ? std::vector<std::size_t>{0, 2} : std::vector<std::size_t>{0};
    for (std::size_t k = 0; k < bytes.size() / info.type_size; ++k) {
      for (std::size_t off : fields) std::memcpy(bytes.data() + k * info.type_size + off, &scale, 2);
    }
  }
  lm::WeightMatrix matrix(GgmlType type, int64_t index, int64_t rows, int64_t cols) const {
    auto w = lm::WeightMatrix::view(type, rows, cols, nullptr, nullptr, "bench");
    w.data = reinterpret_cast<const std::byte*>(bytes.data()) + index * w.nbytes();
    return w;
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s moe|dense TOKENS Q4_K|Q8_0\n", argv[0]);
    return 2;
  }
  try {
    const std::string kind = argv[1];
    const int64_t n = std::stoll(argv[2]);
    const std::string type_name = argv[3];
    if ((kind != "moe" && kind != "dense") || n <= 0 || (type_name != "Q4_K" && type_name != "Q8_0")) {
      throw std::runtime_error("KIND must be moe or dense, TOKENS positive, TYPE Q4_K or Q8_0");
    }
    const GgmlType type = type_name == "Q4_K" ? GgmlType::Q4_K : GgmlType::Q8_0;
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(static_cast<std::size_t>(n * kDim)), out(x.size());
    for (auto& v : x) v = normal(rng);

    lm::MoeLayerWeights moe;
    std::vector<float> router(static_cast<std::size_t>(kExperts * kDim));
    for (auto& v : router) v = normal(rng) / 45.0f;
    Blocks gate_up(type, kind == "moe" ? 2 * kExperts : 2, kind == "moe" ? kExpertFfn : kUsed * kExpertFfn, kDim, rng);
    Blocks down(type, kind == "moe" ? kExperts : 1, kDim, kind == "moe" ? kExpertFfn : kUsed * kExpertFfn, rng);
    std::vector<float> gate, up;
    std::function<void()> run;
    if (kind == "moe") {
      moe.router = lm::WeightMatrix::view(GgmlType::F32, kExperts, kDim, router.data(), nullptr, "router");
      moe.n_used = kUsed;
      for (int e = 0; e < kExperts; ++e) {
        moe.experts.push_back({gate_up.matrix(type, int64_t{2} * e, kExpertFfn, kDim),
                               gate_up.matrix(type, int64_t{2} * e + 1, kExpertFfn, kDim),
                               down.matrix(type, e, kDim, kExpertFfn)});
      }
      lm::validate_moe_layer(moe, kDim, "bench.");
      run = [&] { lm::moe_ffn(moe, x.data(), n, out.data(), nullptr, lm::kernels::Activations::kI16); };
    } else {
      const int64_t hidden = kUsed * kExpertFfn;
      gate.resize(static_cast<std::size_t>(n * hidden));
      up.resize(gate.size());
      const auto wg = gate_up.matrix(type, 0, hidden, kDim), wu = gate_up.matrix(type, 1, hidden, kDim);
      const auto wd = down.matrix(type, 0, kDim, hidden);
      run = [&, wg, wu, wd, hidden] {
        const lm::kernels::MatmulJob jobs[] = {{&wg, gate.data()}, {&wu, up.data()}};
        lm::kernels::matmul_many(jobs, x.data(), n, nullptr, lm::kernels::Activations::kI16);
        lm::kernels::swiglu(gate.data(), up.data(), n * hidden);
        lm::kernels::matmul(wd, gate.data(), n, out.data(), nullptr, lm::kernels::Activations::kI16);
      };
    }
    run();  // warm-up: scratch buffers sized outside the measurement
    const auto t0 = std::chrono::steady_clock::now();
    CALLGRIND_START_INSTRUMENTATION;
    run();
    CALLGRIND_STOP_INSTRUMENTATION;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s %s tokens %lld: %.3f ms (%.3f ms/token)\n", kind.c_str(), type_name.c_str(),
                static_cast<long long>(n), s * 1e3, s * 1e3 / static_cast<double>(n));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
