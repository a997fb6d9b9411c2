// The mixture-of-experts FFN (lm/arch/moe_ffn.h) and its GGUF loader (lm/arch/moe_gguf.h):
// routing against a plain reference written from transformers' Qwen3MoeTopKRouter (softmax in
// double, sort, top-k, renormalise), and the whole FFN on expert stacks of F32, F16, Q8_0 and
// Q4_K against a reference that dequantizes each expert from its own bytes — the bytes the test
// generated for that expert before concatenating them into the 3-D tensor — so a wrong expert
// stride (rows * row_bytes of the block type) shows up as a wrong expert.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/error.h"
#include "base/half.h"
#include "base/thread_pool.h"
#include "gguf_test_writer.h"
#include "lm/arch/moe_ffn.h"
#include "lm/arch/moe_gguf.h"
#include "lm/gguf/gguf_file.h"
#include "lm/load.h"
#include "lm/weights/dequantize.h"
#include "support/allocation_counter.h"

namespace {

namespace fs = std::filesystem;
using lm::GgmlType;

// transformers' routing, in double: probabilities by softmax, the k largest (ties to the lower
// index), divided by their sum when normalising.
void reference_route(const float* logits, int n_experts, int k, bool normalize, std::vector<int32_t>& experts,
                     std::vector<double>& weights) {
  const double mx = *std::max_element(logits, logits + n_experts);
  std::vector<double> p(static_cast<std::size_t>(n_experts));
  double z = 0.0;
  for (int e = 0; e < n_experts; ++e) z += p[e] = std::exp(static_cast<double>(logits[e]) - mx);
  for (double& v : p) v /= z;
  std::vector<int32_t> idx(static_cast<std::size_t>(n_experts));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  experts.assign(idx.begin(), idx.begin() + k);
  double s = 0.0;
  for (int j = 0; j < k; ++j) s += p[experts[j]];
  weights.resize(static_cast<std::size_t>(k));
  for (int j = 0; j < k; ++j) weights[j] = normalize ? p[experts[j]] / s : p[experts[j]];
}

TEST(MoeRouting, HandComputedProbabilities) {
  // logits log(1..4): probabilities 0.1, 0.2, 0.3, 0.4; the top 2 are experts 3 and 2.
  const float logits[] = {std::log(1.0f), std::log(2.0f), std::log(3.0f), std::log(4.0f)};
  int32_t experts[2];
  float weights[2];
  lm::route_tokens(logits, 1, 4, 2, /*normalize=*/false, experts, weights);
  EXPECT_EQ(experts[0], 3);
  EXPECT_EQ(experts[1], 2);
  EXPECT_NEAR(weights[0], 0.4f, 1e-6f);
  EXPECT_NEAR(weights[1], 0.3f, 1e-6f);
  lm::route_tokens(logits, 1, 4, 2, /*normalize=*/true, experts, weights);
  EXPECT_NEAR(weights[0], 4.0f / 7.0f, 1e-6f);
  EXPECT_NEAR(weights[1], 3.0f / 7.0f, 1e-6f);
  // k = n_experts, normalised: the full softmax.
  int32_t all[4];
  float all_w[4];
  lm::route_tokens(logits, 1, 4, 4, true, all, all_w);
  EXPECT_EQ(std::vector<int32_t>(all, all + 4), (std::vector<int32_t>{3, 2, 1, 0}));
  EXPECT_NEAR(all_w[3], 0.1f, 1e-6f);
}

// n tokens' logits over n_experts routed to k experts each: every token's experts and weights
// are the reference's.
void check_routing(const std::vector<float>& logits, int64_t n, int n_experts, int k, bool normalize) {
  std::vector<int32_t> experts(static_cast<std::size_t>(n * k));
  std::vector<float> weights(static_cast<std::size_t>(n * k));
  lm::route_tokens(logits.data(), n, n_experts, k, normalize, experts.data(), weights.data());
  std::vector<int32_t> want_e;
  std::vector<double> want_w;
  for (int64_t t = 0; t < n; ++t) {
    reference_route(logits.data() + t * n_experts, n_experts, k, normalize, want_e, want_w);
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(experts[t * k + j], want_e[j]) << "E " << n_experts << " k " << k << " token " << t;
      EXPECT_NEAR(weights[t * k + j], want_w[j], 2e-6 * std::max(1.0, want_w[j]));
    }
  }
}

TEST(MoeRouting, MatchesTheReferenceOnRandomLogits) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (const int n_experts : {4, 8, 60}) {
    for (const int k : {1, 2, 4}) {
      for (const bool normalize : {false, true}) {
        const int64_t n = 40;
        std::vector<float> logits(static_cast<std::size_t>(n * n_experts));
        for (float& v : logits) v = normal(rng);
        check_routing(logits, n, n_experts, k, normalize);
      }
    }
  }
}

// ---- expert stacks in a GGUF ------------------------------------------------------------

// One expert matrix [rows, cols] of `type` as raw bytes, from random but well-scaled content.
std::string random_matrix_bytes(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  std::uniform_int_distribution<int> byte(0, 255);
  std::string out;
  const auto put16 = [&](uint16_t v) { out += gguf_test::Writer::pod(v); };
  const int64_t n = rows * cols;
  switch (type) {
    case GgmlType::F32:
      for (int64_t i = 0; i < n; ++i) out += gguf_test::Writer::pod(normal(rng));
      break;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) put16(base::f32_to_f16(normal(rng)));
      break;
    case GgmlType::Q8_0:  // f16 scale, 32 int8
      for (int64_t b = 0; b < n / 32; ++b) {
        put16(base::f32_to_f16(0.5f / (127.0f * std::sqrt(static_cast<float>(cols))) * (1.0f + (b % 5))));
        for (int i = 0; i < 32; ++i) out += static_cast<char>(byte(rng) - 128);
      }
      break;
    case GgmlType::Q4_K:  // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
      for (int64_t b = 0; b < n / 256; ++b) {
        put16(base::f32_to_f16(0.02f / std::sqrt(static_cast<float>(cols)) * (1.0f + (b % 3))));
        put16(base::f32_to_f16(0.01f / std::sqrt(static_cast<float>(cols))));
        for (int i = 0; i < 12 + 128; ++i) out += static_cast<char>(byte(rng));
      }
      break;
    default:
      ADD_FAILURE() << "no generator for " << lm::ggml_type_name(type);
  }
  return out;
}

std::vector<float> dequantized(GgmlType type, const std::string& bytes, int64_t rows, int64_t cols) {
  std::vector<float> out(static_cast<std::size_t>(rows * cols));
  const std::size_t row_bytes = bytes.size() / static_cast<std::size_t>(rows);
  for (int64_t r = 0; r < rows; ++r)
    lm::dequantize_row(type, bytes.data() + r * row_bytes, out.data() + r * cols, cols);
  return out;
}

struct ExpertStackCase {
  GgmlType type;
  int64_t dim, ffn;
};

class MoeFfnOnStacks : public ::testing::TestWithParam<ExpertStackCase> {
 protected:
  static constexpr int kExperts = 6, kUsed = 2;

  void SetUp() override {
    const ExpertStackCase c = GetParam();
    std::mt19937 rng(11 + static_cast<int>(c.type));
    gguf_test::Writer w;
    w.kv_str("general.architecture", "qwen3moe");
    w.kv_u32("qwen3moe.expert_count", kExperts);
    w.kv_u32("qwen3moe.expert_used_count", kUsed);
    w.kv_u32("qwen3moe.expert_feed_forward_length", static_cast<uint32_t>(c.ffn));
    w.kv_bool("qwen3moe.expert_weights_norm", true);
    std::normal_distribution<float> normal(0.0f, 2.0f / std::sqrt(static_cast<float>(c.dim)));
    router_.resize(static_cast<std::size_t>(kExperts * c.dim));
    for (float& v : router_) v = normal(rng);
    w.tensor_f32("blk.0.ffn_gate_inp.weight", {static_cast<uint64_t>(c.dim), kExperts}, router_);
    const auto stack = [&](const std::string& name, int64_t rows, int64_t cols, std::vector<std::vector<float>>& ref) {
      std::string all;
      for (int e = 0; e < kExperts; ++e) {
        const std::string bytes = random_matrix_bytes(c.type, rows, cols, rng);
        ref.push_back(dequantized(c.type, bytes, rows, cols));
        all += bytes;
      }
      w.tensor(name, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), kExperts},
               static_cast<uint32_t>(c.type), all);
    };
    stack("blk.0.ffn_gate_exps.weight", c.ffn, c.dim, gate_);
    stack("blk.0.ffn_up_exps.weight", c.ffn, c.dim, up_);
    stack("blk.0.ffn_down_exps.weight", c.dim, c.ffn, down_);
    path_ = fs::temp_directory_path() /
            ("vq_moe_ffn_" + std::string(lm::ggml_type_name(c.type)) + "_" + std::to_string(::getpid()) + ".gguf");
    w.write(path_.string());
    file_ = lm::gguf::GgufFile::open(path_.string());
    layer_ = lm::load_moe_layer(*file_, "qwen3moe", "blk.0.");
  }
  void TearDown() override {
    layer_.reset();
    file_.reset();
    std::error_code ec;
    fs::remove(path_, ec);
  }

  // The FFN in double from the per-expert matrices the test generated.
  std::vector<double> reference(const std::vector<float>& x, int64_t n) const {
    const int64_t dim = GetParam().dim, ffn = GetParam().ffn;
    std::vector<double> out(static_cast<std::size_t>(n * dim), 0.0);
    std::vector<float> logits(kExperts);
    std::vector<int32_t> experts;
    std::vector<double> weights, hidden(static_cast<std::size_t>(ffn));
    for (int64_t t = 0; t < n; ++t) {
      const float* xt = x.data() + t * dim;
      for (int e = 0; e < kExperts; ++e) {
        double acc = 0.0;
        for (int64_t i = 0; i < dim; ++i) acc += static_cast<double>(router_[e * dim + i]) * xt[i];
        logits[e] = static_cast<float>(acc);
      }
      reference_route(logits.data(), kExperts, kUsed, true, experts, weights);
      for (int j = 0; j < kUsed; ++j) {
        const int e = experts[j];
        for (int64_t r = 0; r < ffn; ++r) {
          double g = 0.0, u = 0.0;
          for (int64_t i = 0; i < dim; ++i) {
            g += static_cast<double>(gate_[e][r * dim + i]) * xt[i];
            u += static_cast<double>(up_[e][r * dim + i]) * xt[i];
          }
          hidden[r] = g / (1.0 + std::exp(-g)) * u;
        }
        for (int64_t r = 0; r < dim; ++r) {
          double d = 0.0;
          for (int64_t i = 0; i < ffn; ++i) d += static_cast<double>(down_[e][r * ffn + i]) * hidden[i];
          out[t * dim + r] += weights[j] * d;
        }
      }
    }
    return out;
  }

  std::vector<float> router_;
  std::vector<std::vector<float>> gate_, up_, down_;
  fs::path path_;
  std::shared_ptr<const lm::gguf::GgufFile> file_;
  std::shared_ptr<const lm::MoeLayerWeights> layer_;
};

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}
double max_abs(const std::vector<double>& a) {
  double m = 0.0;
  for (double v : a) m = std::max(m, std::abs(v));
  return m;
}

TEST_P(MoeFfnOnStacks, PrefillAndDecodeMatchThePerExpertReference) {
  const int64_t dim = GetParam().dim, n = 23;
  ASSERT_EQ(layer_->experts.size(), static_cast<std::size_t>(kExperts));
  EXPECT_EQ(layer_->n_used, kUsed);
  EXPECT_TRUE(layer_->normalize);
  lm::validate_moe_layer(*layer_, dim, "blk.0.");
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n * dim));
  for (float& v : x) v = normal(rng);
  const std::vector<double> want = reference(x, n);
  const double scale = max_abs(want);
  ASSERT_GT(scale, 0.1);

  // Every expert is chosen by some token (otherwise a wrong stride could hide).
  std::vector<float> logits(static_cast<std::size_t>(n * kExperts));
  std::vector<int32_t> chosen(static_cast<std::size_t>(n * kUsed));
  std::vector<float> w(static_cast<std::size_t>(n * kUsed));
  for (int64_t t = 0; t < n; ++t) {
    for (int e = 0; e < kExperts; ++e) {
      double acc = 0.0;
      for (int64_t i = 0; i < dim; ++i) acc += static_cast<double>(router_[e * dim + i]) * x[t * dim + i];
      logits[t * kExperts + e] = static_cast<float>(acc);
    }
  }
  lm::route_tokens(logits.data(), n, kExperts, kUsed, true, chosen.data(), w.data());
  for (int e = 0; e < kExperts; ++e) EXPECT_NE(std::find(chosen.begin(), chosen.end(), e), chosen.end()) << e;

  base::ThreadPool pool(2);
  std::vector<float> prefill(static_cast<std::size_t>(n * dim));
  lm::moe_ffn(*layer_, x.data(), n, prefill.data(), &pool, lm::kernels::Activations::kF32);
  EXPECT_LE(max_abs_diff(prefill, want), 2e-5 * scale);

  std::vector<float> decode(static_cast<std::size_t>(n * dim)), decode_i16(decode.size());
  for (int64_t t = 0; t < n; ++t) {
    lm::moe_ffn(*layer_, x.data() + t * dim, 1, decode.data() + t * dim, &pool, lm::kernels::Activations::kF32);
    lm::moe_ffn(*layer_, x.data() + t * dim, 1, decode_i16.data() + t * dim, &pool, lm::kernels::Activations::kI16);
  }
  EXPECT_LE(max_abs_diff(decode, want), 2e-5 * scale);
  // 16-bit activations: rounding of x to ~1e-4 relative per block, no more.
  EXPECT_LE(max_abs_diff(decode_i16, want), 2e-3 * scale);

  std::vector<float> ref_lib(static_cast<std::size_t>(n * dim));
  lm::moe_ffn_reference(*layer_, x.data(), n, ref_lib.data());
  EXPECT_LE(max_abs_diff(ref_lib, want), 2e-5 * scale);
}

// Experts no token chose are never read: with their matrices pointing nowhere (null data: any
// read crashes the test), prefill and decode give the same outputs as with the real layer.
TEST_P(MoeFfnOnStacks, OnlyTheRoutedExpertsAreRead) {
  const int64_t dim = GetParam().dim;
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const int64_t n : {1, 3}) {
    std::vector<float> x(static_cast<std::size_t>(n * dim));
    for (float& v : x) v = normal(rng);
    std::vector<float> full(x.size()), pruned_out(x.size());
    lm::moe_ffn(*layer_, x.data(), n, full.data(), nullptr, lm::kernels::Activations::kF32);
    std::vector<float> logits(static_cast<std::size_t>(n * kExperts));
    lm::kernels::matmul(layer_->router, x.data(), n, logits.data(), nullptr);
    std::vector<int32_t> chosen(static_cast<std::size_t>(n * kUsed));
    std::vector<float> w(chosen.size());
    lm::route_tokens(logits.data(), n, kExperts, kUsed, true, chosen.data(), w.data());
    lm::MoeLayerWeights pruned = *layer_;
    int absent = 0;
    for (int e = 0; e < kExperts; ++e) {
      if (std::find(chosen.begin(), chosen.end(), e) != chosen.end()) continue;
      pruned.experts[e].gate.data = pruned.experts[e].up.data = pruned.experts[e].down.data = nullptr;
      ++absent;
    }
    EXPECT_GE(absent, kExperts - static_cast<int>(n) * kUsed);
    lm::moe_ffn(pruned, x.data(), n, pruned_out.data(), nullptr, lm::kernels::Activations::kF32);
    EXPECT_EQ(pruned_out, full) << n << " tokens";
  }
}

// A decode step allocates nothing once the first step has sized the scratch buffers, whichever
// experts the next tokens pick (the host's decode loop relies on it: decode_allocations_test).
TEST_P(MoeFfnOnStacks, DecodeStepsDoNotAllocateAfterWarmUp) {
  const int64_t dim = GetParam().dim;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(12 * dim)), out(static_cast<std::size_t>(dim));
  for (float& v : x) v = normal(rng);
  for (const auto act : {lm::kernels::Activations::kF32, lm::kernels::Activations::kI16}) {
    lm::moe_ffn(*layer_, x.data(), 1, out.data(), nullptr, act);
    const auto before = test_support::allocation_snapshot();
    for (int64_t t = 1; t < 12; ++t) lm::moe_ffn(*layer_, x.data() + t * dim, 1, out.data(), nullptr, act);
    EXPECT_EQ(test_support::allocation_snapshot().allocations - before.allocations, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MoeFfnOnStacks,
                         ::testing::Values(ExpertStackCase{GgmlType::F32, 64, 32},
                                           ExpertStackCase{GgmlType::F16, 64, 48},
                                           ExpertStackCase{GgmlType::Q8_0, 64, 96},
                                           ExpertStackCase{GgmlType::Q4_K, 256, 256}),
                         [](const auto& info) { return std::string(lm::ggml_type_name(info.param.type)); });

// ---- the loader refuses what it cannot compute ------------------------------------------

class MoeLoaderErrors : public ::testing::Test {
 protected:
  void write_and_expect(const gguf_test::Writer& w, const std::string& needle, bool unsupported) {
    const fs::path path = fs::temp_directory_path() / ("vq_moe_bad_" + std::to_string(::getpid()) + ".gguf");
    w.write(path.string());
    const auto file = lm::gguf::GgufFile::open(path.string());
    try {
      lm::load_moe_layer(*file, "qwen3moe", "blk.0.");
      ADD_FAILURE() << "expected an error naming " << needle;
    } catch (const base::Unsupported& e) {
      EXPECT_TRUE(unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    } catch (const base::FormatError& e) {
      EXPECT_FALSE(unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    fs::remove(path);
  }
  static gguf_test::Writer valid(uint32_t used = 2, int64_t down_rows = 8) {
    gguf_test::Writer w;
    w.kv_str("general.architecture", "qwen3moe");
    w.kv_u32("qwen3moe.expert_count", 4);
    w.kv_u32("qwen3moe.expert_used_count", used);
    w.kv_u32("qwen3moe.expert_feed_forward_length", 4);
    w.tensor_f32("blk.0.ffn_gate_inp.weight", {8, 4}, std::vector<float>(32, 0.1f));
    w.tensor_f32("blk.0.ffn_gate_exps.weight", {8, 4, 4}, std::vector<float>(128, 0.1f));
    w.tensor_f32("blk.0.ffn_up_exps.weight", {8, 4, 4}, std::vector<float>(128, 0.1f));
    w.tensor_f32("blk.0.ffn_down_exps.weight", {4, static_cast<uint64_t>(down_rows), 4},
                 std::vector<float>(static_cast<std::size_t>(16 * down_rows), 0.1f));
    return w;
  }
};

TEST_F(MoeLoaderErrors, ExpertTensorOfTheWrongShape) {
  write_and_expect(valid(2, 6), "ffn_down_exps.weight' has shape [4, 6, 4], expected [4, 8, 4]", false);
}

TEST_F(MoeLoaderErrors, MoreExpertsUsedThanThereAre) {
  write_and_expect(valid(5), "expert_used_count 5 exceeds", false);
}

TEST_F(MoeLoaderErrors, NonSoftmaxGating) {
  gguf_test::Writer w = valid();
  w.kv_u32("qwen3moe.expert_gating_func", 2);  // sigmoid
  write_and_expect(w, "gating function 2", true);
}

TEST_F(MoeLoaderErrors, DefaultsToRenormalisedWeightsAsLlamaCpp) {
  const fs::path path = fs::temp_directory_path() / ("vq_moe_ok_" + std::to_string(::getpid()) + ".gguf");
  valid().write(path.string());
  const auto layer = lm::load_moe_layer(*lm::gguf::GgufFile::open(path.string()), "qwen3moe", "blk.0.");
  EXPECT_TRUE(layer->normalize);
  EXPECT_EQ(layer->experts.size(), 4u);
  EXPECT_EQ(layer->experts[3].down.data - layer->experts[0].down.data, 3 * 8 * 4 * 4);
  fs::remove(path);
}

TEST_F(MoeLoaderErrors, OneTensorPerExpertIsRefusedByName) {
  gguf_test::Writer w;
  w.kv_str("general.architecture", "qwen3moe");
  w.kv_u32("qwen3moe.expert_count", 2);
  w.kv_u32("qwen3moe.expert_used_count", 1);
  w.tensor_f32("blk.0.ffn_gate_inp.weight", {8, 2}, std::vector<float>(16, 0.1f));
  w.tensor_f32("blk.0.ffn_gate.0.weight", {8, 4}, std::vector<float>(32, 0.1f));
  write_and_expect(w, "pre-2024 Mixtral layout", true);
}

// A MoE file of an architecture whose experts the host does not compute stays refused.
TEST(MoeLoad, OtherMoeArchitecturesAreRefused) {
  gguf_test::Writer w;
  w.kv_str("general.architecture", "qwen3");  // a dense architecture with a router in it
  w.kv_u32("qwen3.block_count", 1);
  w.kv_u32("qwen3.embedding_length", 8);
  w.kv_u32("qwen3.feed_forward_length", 8);
  w.kv_u32("qwen3.attention.head_count", 2);
  w.tensor_f32("blk.0.ffn_gate_inp.weight", {8, 4}, std::vector<float>(32, 0.1f));
  const fs::path path = fs::temp_directory_path() / ("vq_moe_qwen3_" + std::to_string(::getpid()) + ".gguf");
  w.write(path.string());
  try {
    lm::load(path.string());
    ADD_FAILURE() << "a qwen3 file with experts loaded";
  } catch (const base::Unsupported& e) {
    EXPECT_NE(std::string(e.what()).find("mixture-of-experts qwen3 models are not supported"), std::string::npos)
        << e.what();
  }
  fs::remove(path);
}

}  // namespace
