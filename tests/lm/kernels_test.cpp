// Activation kernels, RoPE, attention and the thread pool, against values that follow from
// their definitions (hand-computed) and against the straightforward reference attention.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "lm/kernels/attention.h"
#include "lm/kernels/elementwise.h"
#include "lm/kernels/rope.h"
#include "lm/tensor.h"

namespace {

using lm::kernels::RopeStyle;

TEST(Elementwise, RmsNorm) {
  const std::vector<float> x{1, 2, 3, 4}, w{1, 1, 2, 0.5f};
  std::vector<float> out(4);
  lm::kernels::rmsnorm(x.data(), w.data(), out.data(), 4, 0.0f);
  const float rms = std::sqrt(30.0f / 4.0f);  // mean of 1+4+9+16
  EXPECT_FLOAT_EQ(out[0], 1 / rms);
  EXPECT_FLOAT_EQ(out[2], 2 * 3 / rms);
  EXPECT_FLOAT_EQ(out[3], 0.5f * 4 / rms);
  // eps matters for tiny inputs: all-zero input stays finite.
  const std::vector<float> zeros(4, 0.0f);
  lm::kernels::rmsnorm(zeros.data(), w.data(), out.data(), 4, 1e-5f);
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(Elementwise, SoftmaxAndSilu) {
  std::vector<float> x{1, 2, 3};
  lm::kernels::softmax(x.data(), 3);
  EXPECT_NEAR(x[0], 0.09003057, 1e-7);
  EXPECT_NEAR(x[1], 0.24472847, 1e-7);
  EXPECT_NEAR(x[2], 0.66524096, 1e-7);
  std::vector<float> big{1000, 1000};  // max-subtraction keeps this finite
  lm::kernels::softmax(big.data(), 2);
  EXPECT_FLOAT_EQ(big[0], 0.5f);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> masked{-inf, 0.0f, -inf};
  lm::kernels::softmax(masked.data(), 3);
  EXPECT_EQ(masked, (std::vector<float>{0, 1, 0}));
  std::vector<float> none{-inf, -inf};
  lm::kernels::softmax(none.data(), 2);
  EXPECT_EQ(none, (std::vector<float>{0, 0}));

  EXPECT_FLOAT_EQ(lm::kernels::silu(0.0f), 0.0f);
  EXPECT_NEAR(lm::kernels::silu(1.0f), 0.7310585786, 1e-7);
  EXPECT_NEAR(lm::kernels::silu(-2.0f), -0.2384058440, 1e-7);
  std::vector<float> gate{1.0f, -2.0f}, up{2.0f, 3.0f};
  lm::kernels::swiglu(gate.data(), up.data(), 2);
  EXPECT_NEAR(gate[0], 2 * 0.7310585786, 1e-6);
  EXPECT_NEAR(gate[1], 3 * -0.2384058440, 1e-6);
}

// The SIMD GeGLU (vector tanh) against the scalar reference (libm tanhf): every width up to
// a few vectors (the padded tail included), values across GELU's whole shape — deep negative
// (output -> 0), around 0, large positive (tanh saturates). The bound is a few ulp of tanh
// (absolute, at magnitude 1) carried through 0.5 x u: for negative x, 1 + tanh cancels, so
// the output's own relative error is no measure (the scalar reference cancels the same way).
TEST(Geglu, SimdMatchesScalarReference) {
  EXPECT_NEAR(lm::kernels::gelu_tanh(1.0f), 0.8411919906, 1e-6);  // 0.5 (1 + tanh(0.7978846 * 1.044715))
  EXPECT_NEAR(lm::kernels::gelu_tanh(-3.0f), -0.0036373920, 1e-7);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> wide(-12.0f, 12.0f), narrow(-1.0f, 1.0f);
  for (int64_t n : {1, 3, 7, 8, 15, 16, 17, 33, 100, 2048}) {
    std::vector<float> gate(static_cast<std::size_t>(n)), up(gate.size());
    for (std::size_t i = 0; i < gate.size(); ++i) {
      gate[i] = i % 3 == 0 ? wide(rng) : narrow(rng);
      up[i] = narrow(rng) * 4.0f;
    }
    std::vector<float> simd = gate, ref = gate;
    lm::kernels::geglu(simd.data(), up.data(), n);
    lm::kernels::geglu_reference(ref.data(), up.data(), n);
    for (std::size_t i = 0; i < gate.size(); ++i) {
      const float bound = 4e-7f * (std::fabs(ref[i]) + 0.5f * std::fabs(gate[i] * up[i])) + 1e-30f;
      EXPECT_NEAR(simd[i], ref[i], bound) << "n " << n << " i " << i << " x " << gate[i];
    }
  }
  std::vector<float> empty;
  lm::kernels::geglu(empty.data(), empty.data(), 0);  // no elements: no access
}

TEST(Rope, NormalPairsAdjacentElements) {
  // head_dim 4, theta 10000: pair 0 turns by pos * 1, pair 1 by pos * 10000^-0.5 = pos/100.
  std::vector<float> x{1, 0, 1, 0};
  lm::kernels::rope(x.data(), 1, 1, 4, 1, 10000.0f, RopeStyle::kNormal);
  EXPECT_NEAR(x[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(x[1], std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[2], std::cos(0.01), 1e-6);
  EXPECT_NEAR(x[3], std::sin(0.01), 1e-6);
}

TEST(Rope, NeoxPairsHalves) {
  std::vector<float> x{1, 0, 0, 1};
  lm::kernels::rope(x.data(), 1, 1, 4, 2, 10000.0f, RopeStyle::kNeox);
  // Pair (0, 2) turns by 2 rad, pair (1, 3) by 0.02 rad.
  EXPECT_NEAR(x[0], std::cos(2.0), 1e-6);
  EXPECT_NEAR(x[2], std::sin(2.0), 1e-6);
  EXPECT_NEAR(x[1], -std::sin(0.02), 1e-6);
  EXPECT_NEAR(x[3], std::cos(0.02), 1e-6);
}

TEST(Rope, PositionsHeadsPartialAndNorm) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const int heads = 3, d = 8, tokens = 4;
  std::vector<float> x(static_cast<std::size_t>(tokens * heads * d));
  for (auto& v : x) v = normal(rng);
  const std::vector<float> original = x;
  lm::kernels::rope(x.data(), tokens, heads, d, 0, 10000.0f, RopeStyle::kNormal, 4);
  // Token 0 has position 0: unchanged. Dims past rope_dim = 4 never change.
  for (int i = 0; i < heads * d; ++i) EXPECT_EQ(x[i], original[i]);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* a = &x[(t * heads + h) * d];
      const float* b = &original[(t * heads + h) * d];
      for (int e = 4; e < 8; ++e) EXPECT_EQ(a[e], b[e]);
      // A rotation keeps each pair's length.
      for (int64_t p = 0; p < 2; ++p) {
        EXPECT_NEAR(std::hypot(a[2 * p], a[2 * p + 1]), std::hypot(b[2 * p], b[2 * p + 1]), 1e-5);
      }
    }
  }
  // Token t of a batch starting at pos0 = 5 equals a single token at position 5 + t.
  std::vector<float> batch = original,
                     single(original.begin() + int64_t{2} * heads * d, original.begin() + int64_t{3} * heads * d);
  lm::kernels::rope(batch.data(), tokens, heads, d, 5, 10000.0f, RopeStyle::kNeox);
  lm::kernels::rope(single.data(), 1, heads, d, 7, 10000.0f, RopeStyle::kNeox);
  for (int i = 0; i < heads * d; ++i) EXPECT_EQ(batch[2 * heads * d + i], single[i]);
}

TEST(Attention, HandComputedTwoKeys) {
  // q = (1, 0); keys (1, 0), (0, 1); values (1, 0), (0, 1); scale 1:
  // weights softmax(1, 0) = (e/(e+1), 1/(e+1)) -> output (0.7310586, 0.2689414).
  lm::Tensor q = lm::Tensor::from_f32(std::vector<float>{1, 0}, {1, 1, 1, 2}, lm::DType::F32);
  lm::Tensor k = lm::Tensor::from_f32(std::vector<float>{1, 0, 0, 1}, {1, 1, 2, 2}, lm::DType::F16);
  lm::Tensor v = lm::Tensor::from_f32(std::vector<float>{1, 0, 0, 1}, {1, 1, 2, 2}, lm::DType::F16);
  lm::Tensor out;
  lm::kernels::attention(q, k, v, lm::AttentionMask::none(), std::nullopt, 1.0f, out, nullptr);
  EXPECT_NEAR(out.get({0, 0, 0, 0}), 0.7310586, 1e-6);
  EXPECT_NEAR(out.get({0, 0, 0, 1}), 0.2689414, 1e-6);
  // Causal with one query at the last position sees both keys: same answer.
  lm::kernels::attention(q, k, v, lm::AttentionMask::causal(), std::nullopt, 1.0f, out, nullptr);
  EXPECT_NEAR(out.get({0, 0, 0, 0}), 0.7310586, 1e-6);
  // A window of 1 leaves only the last key: output = v1.
  lm::kernels::attention(q, k, v, lm::AttentionMask::causal(), 1, 1.0f, out, nullptr);
  EXPECT_NEAR(out.get({0, 0, 0, 0}), 0.0, 1e-7);
  EXPECT_NEAR(out.get({0, 0, 0, 1}), 1.0, 1e-7);
}

lm::Tensor random_tensor(lm::Shape shape, lm::DType dtype, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = normal(rng);
  return lm::Tensor::from_f32(v, std::move(shape), dtype);
}

double max_diff(const lm::Tensor& a, const lm::Tensor& b) {
  const auto x = a.to_f32(), y = b.to_f32();
  double m = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(double(x[i]) - y[i]));
  return m;
}

TEST(Attention, MatchesReferenceAcrossDtypesMasksAndGqa) {
  std::mt19937 rng(11);
  base::ThreadPool pool(3);
  const int64_t hq = 6, hkv = 2, n = 3, t = 9, d = 16, capacity = 20;
  for (lm::DType dt : {lm::DType::F32, lm::DType::F16, lm::DType::BF16}) {
    lm::Tensor q = random_tensor({2, hq, n, d}, lm::DType::F32, rng);
    // Keys/values as a cache returns them: views of the first t rows of a larger buffer.
    lm::Tensor kbuf = random_tensor({2, hkv, capacity, d}, dt, rng);
    lm::Tensor vbuf = random_tensor({2, hkv, capacity, d}, dt, rng);
    lm::Tensor k = kbuf.slice(2, 0, t), v = vbuf.slice(2, 0, t);
    ASSERT_FALSE(k.is_contiguous());
    lm::Tensor mask_tensor({2, 1, n, t}, lm::DType::U8);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < t; ++j) mask_tensor.set({b, 0, i, j}, (i + j + b) % 3 != 0 ? 1.0f : 0.0f);
    lm::AttentionMask explicit_mask{lm::AttentionMask::Kind::kExplicit, mask_tensor};
    struct Case {
      lm::AttentionMask mask;
      std::optional<int64_t> window;
    };
    for (const Case& c :
         {Case{lm::AttentionMask::none(), std::nullopt}, Case{lm::AttentionMask::causal(), std::nullopt},
          Case{lm::AttentionMask::causal(), 4}, Case{explicit_mask, std::nullopt}}) {
      lm::Tensor fast, slow;
      lm::kernels::attention(q, k, v, c.mask, c.window, 0.25f, fast, &pool);
      lm::kernels::attention_reference(q, k, v, c.mask, c.window, 0.25f, slow);
      EXPECT_LT(max_diff(fast, slow), 1e-5) << lm::dtype_name(dt) << " mask " << int(c.mask.kind);
    }
  }
}

// The tiled prefill path (8+ queries): key tiles of 64, query blocks of 16, online softmax.
// Shapes chosen so tiles and blocks end unevenly, with both head sizes the models use.
TEST(Attention, TiledPathMatchesReference) {
  std::mt19937 rng(23);
  base::ThreadPool pool(3);
  for (int64_t d : {8, 64}) {
    const int64_t hq = 6, hkv = 2, n = 37, t = 150, capacity = 200;
    for (lm::DType dt : {lm::DType::F32, lm::DType::F16, lm::DType::BF16}) {
      lm::Tensor q = random_tensor({2, hq, n, d}, lm::DType::F32, rng);
      lm::Tensor kbuf = random_tensor({2, hkv, capacity, d}, dt, rng);
      lm::Tensor vbuf = random_tensor({2, hkv, capacity, d}, dt, rng);
      lm::Tensor k = kbuf.slice(2, 0, t), v = vbuf.slice(2, 0, t);
      lm::Tensor mask_tensor({1, 1, n, t}, lm::DType::U8);  // broadcast over the batch
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < t; ++j) mask_tensor.set({0, 0, i, j}, (i * 7 + j) % 5 != 0 ? 1.0f : 0.0f);
      // Query 3 sees nothing: its output must be zero on both paths.
      for (int64_t j = 0; j < t; ++j) mask_tensor.set({0, 0, 3, j}, 0.0f);
      lm::AttentionMask explicit_mask{lm::AttentionMask::Kind::kExplicit, mask_tensor};
      struct Case {
        lm::AttentionMask mask;
        std::optional<int64_t> window;
      };
      for (const Case& c : {Case{lm::AttentionMask::none(), std::nullopt},
                            Case{lm::AttentionMask::causal(), std::nullopt}, Case{lm::AttentionMask::causal(), 70},
                            Case{lm::AttentionMask::causal(), 5}, Case{explicit_mask, std::nullopt}}) {
        lm::Tensor fast, slow;
        lm::kernels::attention(q, k, v, c.mask, c.window, 0.2f, fast, &pool);
        lm::kernels::attention_reference(q, k, v, c.mask, c.window, 0.2f, slow);
        EXPECT_LT(max_diff(fast, slow), 2e-5) << "d " << d << " " << lm::dtype_name(dt) << " mask " << int(c.mask.kind)
                                              << " window " << c.window.value_or(0);
      }
      lm::Tensor out;
      lm::kernels::attention(q, k, v, explicit_mask, std::nullopt, 0.2f, out, nullptr);
      for (int64_t e = 0; e < d; ++e) EXPECT_EQ(out.get({1, 4, 3, e}), 0.0f);
    }
  }
}

// Decode-sized query counts over long caches take the split-K path (key ranges of 256 merged
// at the end); a window or mask can leave whole ranges empty.
TEST(Attention, SplitKeysPathMatchesReference) {
  std::mt19937 rng(31);
  base::ThreadPool pool(2);
  for (int64_t n : {1, 3}) {
    const int64_t hq = 9, hkv = 3, t = 1000, d = 64;
    lm::Tensor q = random_tensor({1, hq, n, d}, lm::DType::F32, rng);
    lm::Tensor k = random_tensor({1, hkv, t, d}, lm::DType::F16, rng);
    lm::Tensor v = random_tensor({1, hkv, t, d}, lm::DType::F16, rng);
    lm::Tensor mask_tensor({1, 1, n, t}, lm::DType::U8);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < t; ++j) mask_tensor.set({0, 0, i, j}, j % 300 < 40 ? 1.0f : 0.0f);
    lm::AttentionMask explicit_mask{lm::AttentionMask::Kind::kExplicit, mask_tensor};
    struct Case {
      lm::AttentionMask mask;
      std::optional<int64_t> window;
    };
    for (const Case& c :
         {Case{lm::AttentionMask::none(), std::nullopt}, Case{lm::AttentionMask::causal(), std::nullopt},
          Case{lm::AttentionMask::causal(), 100}, Case{explicit_mask, std::nullopt}}) {
      lm::Tensor fast, slow;
      lm::kernels::attention(q, k, v, c.mask, c.window, 0.125f, fast, &pool);
      lm::kernels::attention_reference(q, k, v, c.mask, c.window, 0.125f, slow);
      EXPECT_LT(max_diff(fast, slow), 2e-5)
          << "n " << n << " mask " << int(c.mask.kind) << " window " << c.window.value_or(0);
    }
  }
}

// f16 keys and values read in place (decode scores them straight from the buffer, widened in
// registers) give exactly what the same rows widened to f32 first give: the same products summed
// in the same order, on the split-K decode path and the small-query path, GQA groups of 1, 3
// and 8, ragged row counts, windows and masks.
TEST(Attention, F16RowsInPlaceEqualTheirF32WideningBitForBit) {
  std::mt19937 rng(41);
  base::ThreadPool pool(2);
  struct Geometry {
    int64_t hq, hkv, d;
  };
  for (const Geometry& g : {Geometry{9, 3, 64}, Geometry{4, 4, 24}, Geometry{8, 1, 64}, Geometry{6, 2, 100}}) {
    for (int64_t n : {1, 2, 5}) {
      for (int64_t t : {37, 700}) {
        const int64_t capacity = t + 11;
        lm::Tensor q = random_tensor({1, g.hq, n, g.d}, lm::DType::F32, rng);
        lm::Tensor kbuf = random_tensor({1, g.hkv, capacity, g.d}, lm::DType::F16, rng);
        lm::Tensor vbuf = random_tensor({1, g.hkv, capacity, g.d}, lm::DType::F16, rng);
        lm::Tensor k = kbuf.slice(2, 0, t), v = vbuf.slice(2, 0, t);
        lm::Tensor k32 = k.astype(lm::DType::F32), v32 = v.astype(lm::DType::F32);
        lm::Tensor mask_tensor({1, 1, n, t}, lm::DType::U8);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < t; ++j) mask_tensor.set({0, 0, i, j}, (j + 2 * i) % 7 != 0 ? 1.0f : 0.0f);
        lm::AttentionMask explicit_mask{lm::AttentionMask::Kind::kExplicit, mask_tensor};
        struct Case {
          lm::AttentionMask mask;
          std::optional<int64_t> window;
        };
        for (const Case& c :
             {Case{lm::AttentionMask::none(), std::nullopt}, Case{lm::AttentionMask::causal(), std::nullopt},
              Case{lm::AttentionMask::causal(), 50}, Case{explicit_mask, std::nullopt}}) {
          lm::Tensor from_f16, from_f32, slow;
          lm::kernels::attention(q, k, v, c.mask, c.window, 0.125f, from_f16, &pool);
          lm::kernels::attention(q, k32, v32, c.mask, c.window, 0.125f, from_f32, &pool);
          EXPECT_EQ(from_f16.to_f32(), from_f32.to_f32()) << "hq " << g.hq << " hkv " << g.hkv << " d " << g.d << " n "
                                                          << n << " t " << t << " mask " << int(c.mask.kind);
          lm::kernels::attention_reference(q, k, v, c.mask, c.window, 0.125f, slow);
          EXPECT_LT(max_diff(from_f16, slow), 2e-5) << "hq " << g.hq << " n " << n << " t " << t;
        }
      }
    }
  }
}

// Gemma 2's attention logit soft-capping: each scaled score s becomes cap * tanh(s / cap)
// before the softmax, on every path (decode split-K, small-n, tiled prefill; causal, window,
// explicit mask), against the scalar reference. Scores here have std ~8 and the cap is 3, so
// capping changes the output a lot (checked too: the test can fail).
TEST(Attention, SoftCappedScoresMatchReferenceOnEveryPath) {
  // By hand: q = (1, 0), keys (4, 0) and (0, 1), values (1, 0) and (0, 1), scale 1, cap 2:
  // capped scores 2 tanh(2) = 1.9280552 and 0 -> weights (0.8730, 0.1270).
  lm::Tensor q1 = lm::Tensor::from_f32(std::vector<float>{1, 0}, {1, 1, 1, 2}, lm::DType::F32);
  lm::Tensor k1 = lm::Tensor::from_f32(std::vector<float>{4, 0, 0, 1}, {1, 1, 2, 2}, lm::DType::F32);
  lm::Tensor v1 = lm::Tensor::from_f32(std::vector<float>{1, 0, 0, 1}, {1, 1, 2, 2}, lm::DType::F32);
  lm::Tensor o1;
  lm::kernels::attention(q1, k1, v1, lm::AttentionMask::none(), std::nullopt, 1.0f, o1, nullptr, 2.0f);
  const double w0 = std::exp(2.0 * std::tanh(2.0)) / (std::exp(2.0 * std::tanh(2.0)) + 1.0);
  EXPECT_NEAR(o1.get({0, 0, 0, 0}), w0, 1e-6);
  EXPECT_NEAR(o1.get({0, 0, 0, 1}), 1.0 - w0, 1e-6);

  std::mt19937 rng(41);
  base::ThreadPool pool(2);
  struct Shape {
    int64_t n, t;
  };
  for (const Shape& sh : {Shape{1, 1000}, Shape{3, 40}, Shape{37, 150}}) {
    const int64_t hq = 4, hkv = 2, d = 64;
    lm::Tensor q = random_tensor({1, hq, sh.n, d}, lm::DType::F32, rng);
    lm::Tensor k = random_tensor({1, hkv, sh.t, d}, lm::DType::F16, rng);
    lm::Tensor v = random_tensor({1, hkv, sh.t, d}, lm::DType::F16, rng);
    lm::Tensor mask_tensor({1, 1, sh.n, sh.t}, lm::DType::U8);
    for (int64_t i = 0; i < sh.n; ++i)
      for (int64_t j = 0; j < sh.t; ++j) mask_tensor.set({0, 0, i, j}, (i * 3 + j) % 4 != 0 ? 1.0f : 0.0f);
    lm::AttentionMask explicit_mask{lm::AttentionMask::Kind::kExplicit, mask_tensor};
    struct Case {
      lm::AttentionMask mask;
      std::optional<int64_t> window;
    };
    for (const Case& c :
         {Case{lm::AttentionMask::none(), std::nullopt}, Case{lm::AttentionMask::causal(), std::nullopt},
          Case{lm::AttentionMask::causal(), 16}, Case{explicit_mask, std::nullopt}}) {
      lm::Tensor fast, slow, uncapped;
      lm::kernels::attention(q, k, v, c.mask, c.window, 1.0f, fast, &pool, 3.0f);
      lm::kernels::attention_reference(q, k, v, c.mask, c.window, 1.0f, slow, 3.0f);
      lm::kernels::attention_reference(q, k, v, c.mask, c.window, 1.0f, uncapped);
      EXPECT_LT(max_diff(fast, slow), 2e-5) << "n " << sh.n << " mask " << int(c.mask.kind);
      EXPECT_GT(max_diff(uncapped, slow), 0.1) << "the cap changed nothing: n " << sh.n;
    }
  }
  lm::Tensor out;
  for (float bad : {-1.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    EXPECT_THROW(lm::kernels::attention(q1, k1, v1, lm::AttentionMask::none(), std::nullopt, 1.0f, out, nullptr, bad),
                 base::InvalidArgument);
  }
}

TEST(Attention, GqaReadsTheMappedKvHead) {
  // Two kv heads with distinct constant values; 4 query heads: heads 0,1 must read kv head 0
  // (output 1.0) and heads 2,3 kv head 1 (output 2.0), whatever the scores.
  std::mt19937 rng(5);
  lm::Tensor q = random_tensor({1, 4, 1, 8}, lm::DType::F32, rng);
  lm::Tensor k = random_tensor({1, 2, 5, 8}, lm::DType::F16, rng);
  std::vector<float> vv(std::size_t{2} * 5 * 8);
  for (std::size_t i = 0; i < vv.size(); ++i) vv[i] = i < 40 ? 1.0f : 2.0f;
  lm::Tensor v = lm::Tensor::from_f32(vv, {1, 2, 5, 8}, lm::DType::F16);
  lm::Tensor out;
  lm::kernels::attention(q, k, v, lm::AttentionMask::none(), std::nullopt, 0.3f, out, nullptr);
  for (int h = 0; h < 4; ++h) EXPECT_NEAR(out.get({0, h, 0, 3}), h < 2 ? 1.0 : 2.0, 1e-6) << h;
}

TEST(Attention, RejectsInconsistentShapes) {
  std::mt19937 rng(1);
  lm::Tensor q = random_tensor({1, 3, 1, 8}, lm::DType::F32, rng);
  lm::Tensor k = random_tensor({1, 2, 4, 8}, lm::DType::F16, rng);
  lm::Tensor out;
  EXPECT_THROW(lm::kernels::attention(q, k, k, lm::AttentionMask::none(), std::nullopt, 1.0f, out, nullptr),
               base::InvalidArgument);  // 3 query heads over 2 kv heads
  lm::Tensor q2 = random_tensor({1, 4, 1, 4}, lm::DType::F32, rng);
  EXPECT_THROW(lm::kernels::attention(q2, k, k, lm::AttentionMask::none(), std::nullopt, 1.0f, out, nullptr),
               base::InvalidArgument);  // head_dim 4 vs 8
  lm::Tensor ki = random_tensor({1, 2, 4, 8}, lm::DType::F32, rng).astype(lm::DType::I32);
  lm::Tensor q4 = random_tensor({1, 4, 1, 8}, lm::DType::F32, rng);
  EXPECT_THROW(lm::kernels::attention(q4, ki, ki, lm::AttentionMask::none(), std::nullopt, 1.0f, out, nullptr),
               base::InvalidArgument);
}

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 5}) {
    base::ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 3, 17, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(n));
      for (int rep = 0; rep < 50; ++rep) {
        pool.parallel_for(n, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 50) << threads << " " << n << " " << i;
    }
  }
}

TEST(ThreadPool, UsesSeveralThreadsAndRespectsMinChunk) {
  base::ThreadPool pool(4);
  std::atomic<int> chunks{0};
  pool.parallel_for(100, [&](int64_t, int64_t) { chunks++; });
  EXPECT_EQ(chunks.load(), 4);
  chunks = 0;
  // min_chunk 60: ceil(100 / 60) = 2 participants, not 4.
  pool.parallel_for(
      100, [&](int64_t, int64_t) { chunks++; }, 60);
  EXPECT_EQ(chunks.load(), 2);
}

TEST(ThreadPool, PropagatesExceptionsAndNests) {
  base::ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(30,
                                 [&](int64_t b, int64_t) {
                                   if (b > 0) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  // The pool is still usable, and a nested call runs inline instead of deadlocking.
  std::atomic<int64_t> sum{0};
  pool.parallel_for(6, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      pool.parallel_for(10, [&](int64_t b2, int64_t e2) { sum += (e2 - b2) * i; });
    }
  });
  EXPECT_EQ(sum.load(), 10 * (0 + 1 + 2 + 3 + 4 + 5));
  EXPECT_THROW(base::ThreadPool(-1), base::InvalidArgument);
}

}  // namespace
