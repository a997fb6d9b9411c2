// Properties every quantizer in the family must have: exact code sizes, determinism in the
// seed, batch = one-by-one, and typed errors naming the bad value.
#include <gtest/gtest.h>

#include <map>
#include <thread>

#include "veloxquant/errors.h"
#include "veloxquant/quant/quant_eval.h"
#include "veloxquant/quant/quantizer.h"

namespace vq = veloxquant::quant;

TEST(QuantizerFamily, ExactCodeBytesAtD128) {
  // Derived by hand from each method's layout (see the headers and docs/methods/quant_*.md).
  const std::map<std::pair<std::string, int>, std::size_t> expected = {{{"turboquant_mse", 2}, 32 + 2},
                                                                       {{"turboquant_mse", 3}, 48 + 2},
                                                                       {{"turboquant_prod", 3}, 32 + 16 + 4},
                                                                       {{"qjl", 1}, 16 + 2},
                                                                       {{"turboquant_rvq", 2}, 64 + 2},
                                                                       {{"turboquant_rvq", 3}, 96 + 2},
                                                                       {{"polar", 2}, 46 + 16},
                                                                       {{"rabitq", 1}, 16 + 8},
                                                                       {{"kivi", 2}, 32 + 16}};
  for (const auto& [key, bytes] : expected)
    EXPECT_EQ(vq::make_quantizer(key.first, 128, key.second, 1)->code_bytes(), bytes) << key.first;
}

TEST(QuantizerFamily, DeterministicBatchEqualsSingles) {
  const auto pairs = vq::draw_unit_pairs(64, 6, 2);
  for (const auto& method : vq::quantizer_methods()) {
    const int bits = method == "rabitq" ? 1 : 2;
    auto a = vq::make_quantizer(method, 64, bits, 11);
    auto b = vq::make_quantizer(method, 64, bits, 11);
    auto c = vq::make_quantizer(method, 64, bits, 12);
    const std::size_t cb = a->code_bytes();
    std::vector<uint8_t> ca(6 * cb), cb1(6 * cb), cc(6 * cb);
    a->encode(pairs.x.data(), 6, ca.data());
    for (int i = 0; i < 6; ++i) b->encode(&pairs.x[static_cast<std::size_t>(i) * 64], 1, &cb1[i * cb]);
    c->encode(pairs.x.data(), 6, cc.data());
    EXPECT_EQ(ca, cb1) << method;
    if (method != "kivi") {
      EXPECT_NE(ca, cc) << method << ": the seed must change the codes";
    }
    EXPECT_EQ(a->method(), method);
  }
}

TEST(QuantizerFamily, BadParametersThrowTypedErrorsNamingTheValue) {
  auto expect_named = [](const std::string& method, int dim, int bits, const std::string& value) {
    try {
      vq::make_quantizer(method, dim, bits, 1);
      ADD_FAILURE() << method << " accepted dim " << dim << " bits " << bits;
    } catch (const veloxquant::QuantizerConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(value), std::string::npos) << e.what();
    }
  };
  for (const auto& method : vq::quantizer_methods()) {
    expect_named(method, 128, 0, "0");
    expect_named(method, 128, 9, "9");
    expect_named(method, 0, 2, "0");
  }
  expect_named("polar", 100, 2, "100");
  expect_named("nope", 128, 2, "nope");
  EXPECT_THROW(vq::draw_unit_pairs(128, 0, 1), veloxquant::QuantizerConfigError);
}

TEST(QuantizerFamily, EvaluationReportsConsistentNumbers) {
  const auto r = vq::evaluate_quantizer("turboquant_rvq", 2, 128, 300, 5);
  EXPECT_EQ(r.method, "turboquant_rvq");
  EXPECT_EQ(r.n, 300u);
  EXPECT_EQ(r.bytes_per_vector, 66u);
  EXPECT_GT(r.encode_vectors_per_s, 0.0);
  EXPECT_GT(r.score_vectors_per_s, 0.0);
  EXPECT_GT(r.ip_bias_se, 0.0);
  // d * mean(err^2) >= d * bias^2 (variance is non-negative).
  EXPECT_GE(r.ip_var_scaled, 128 * r.ip_bias * r.ip_bias);
}

TEST(QuantizerFamily, OneQuantizerSharedAcrossThreadsGivesTheSerialResults) {
  // Caches encode and score heads in parallel through one const quantizer: its scratch space
  // is per thread, so concurrent calls must reproduce the serial codes and scores exactly.
  const auto pairs = vq::draw_unit_pairs(96, 64, 5);
  for (const auto& method : vq::quantizer_methods()) {
    auto q = vq::make_quantizer(method, 96, 2, 3);
    const std::size_t cb = q->code_bytes();
    std::vector<uint8_t> serial(64 * cb);
    q->encode(pairs.x.data(), 64, serial.data());
    const auto prepared = q->prepare_query(pairs.y.data());
    std::vector<float> serial_scores(64);
    q->score(prepared, serial.data(), 64, serial_scores.data());
    std::vector<std::vector<uint8_t>> codes(4, std::vector<uint8_t>(64 * cb));
    std::vector<std::vector<float>> scores(4, std::vector<float>(64));
    std::vector<std::thread> threads;
    threads.reserve(4);
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        for (int rep = 0; rep < 5; ++rep) {
          q->encode(pairs.x.data(), 64, codes[t].data());
          q->score(prepared, codes[t].data(), 64, scores[t].data());
        }
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) {
      EXPECT_EQ(codes[t], serial) << method;
      EXPECT_EQ(scores[t], serial_scores) << method;
    }
  }
}
