// A whole model in the formats Q5_0, Q5_1, Q5_K, Q3_K, Q2_K, IQ4_NL, IQ4_XS, against the exact
// float64 forward of the same file.
//
// tools/reference/make_new_formats_model.py (gguf-py + numpy only) writes the model, its
// tokens and the exact logits into the build directory when this suite starts: each matmul
// weight uses one of the seven formats (each appears at least twice, token embedding Q5_K,
// output head Q5_0), and the reference is numpy_llama.py's float64 forward over gguf-py's
// dequantization, which shares no code with lm. The formats' kernels are checked block for
// block in weight_formats_reference_test.cpp; this checks that a model with them loads and
// that prefill (rows dequantized, f32 tiles), decode with 16-bit activations (each format's
// i16 dot) and decode with f32 activations (each format's fused f32 SIMD dot) all compute the
// model's function.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "lm/cache/cache.h"
#include "lm/gguf/gguf_file.h"
#include "lm/kernels/i16_activations.h"
#include "lm/kernels/vec_dot.h"
#include "lm/load.h"
#include "lm/model.h"
#include "lm/weights/ggml_type.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One directory per process: ctest runs each test case as its own process, possibly in
// parallel, and each regenerates the model.
const fs::path kOut = fs::path(VQ_BINARY_DIR) / "new_formats_model" / std::to_string(::getpid());

struct Generated {
  bool ok = false;
  std::string why;
  json fx;
  std::vector<float> exact;
  ~Generated() {
    std::error_code ignored;
    fs::remove_all(kOut, ignored);
  }
};

// Runs the generator once per process.
const Generated& generated() {
  static const Generated g = [] {
    Generated r;
    const fs::path python = VQ_TEST_PYTHON;
    if (!fs::exists(python)) {
      r.why = python.string() + " is absent: run scripts/setup.sh (it installs gguf into .venv-test)";
      return r;
    }
    const fs::path script = fs::path(VQ_SOURCE_DIR) / "tools/reference/make_new_formats_model.py";
    const std::string cmd = "'" + python.string() + "' '" + script.string() + "' --out '" + kOut.string() + "'";
    if (std::system((cmd + " > /dev/null").c_str()) != 0) {
      r.why = "generator failed: " + cmd;
      return r;
    }
    std::ifstream in(kOut / "new_formats.json");
    r.fx = json::parse(in);
    const auto n = r.fx.at("tokens").size() * r.fx.at("vocab_size").get<std::size_t>();
    r.exact.resize(n);
    std::ifstream bin(kOut / r.fx.at("exact_logits_file").get<std::string>(), std::ios::binary);
    bin.read(reinterpret_cast<char*>(r.exact.data()), static_cast<std::streamsize>(n * sizeof(float)));
    r.ok = static_cast<bool>(bin);
    if (!r.ok) r.why = "short exact logits file";
    return r;
  }();
  return g;
}

class NewFormatsModel : public ::testing::Test {
 protected:
  void SetUp() override {
    const Generated& g = generated();
    if (!fs::exists(VQ_TEST_PYTHON)) GTEST_SKIP() << g.why;
    ASSERT_TRUE(g.ok) << g.why;
    tokens_ = g.fx.at("tokens").get<std::vector<int32_t>>();
    vocab_ = g.fx.at("vocab_size").get<int>();
  }

  lm::LoadedModel load(bool i16_activations) const {
    lm::LoadOptions options;
    options.threads = 2;
    options.i16_activations = i16_activations;
    return lm::load((kOut / "new_formats.gguf").string(), options);
  }

  // Logits of every position, the whole passage in one forward (the prefill kernels).
  std::vector<float> prefill(const lm::LoadedModel& m) const {
    lm::CacheList caches = lm::make_prompt_cache(*m.model);
    std::vector<float> last, all;
    m.model->forward(tokens_, caches, last, &all);
    return all;
  }

  // Logits of every position, one token per forward (the decode kernels).
  std::vector<float> decode(const lm::LoadedModel& m) const {
    lm::CacheList caches = lm::make_prompt_cache(*m.model);
    std::vector<float> out, last;
    for (int32_t t : tokens_) {
      m.model->forward({t}, caches, last, nullptr);
      out.insert(out.end(), last.begin(), last.end());
    }
    return out;
  }

  struct Distance {
    double max = 0.0, mean = 0.0, top1 = 0.0;
  };
  Distance vs_exact(const std::vector<float>& logits) const {
    const std::vector<float>& exact = generated().exact;
    EXPECT_EQ(logits.size(), exact.size());
    Distance d;
    if (logits.size() != exact.size()) return d;
    for (std::size_t i = 0; i < exact.size(); ++i) {
      const double e = std::abs(double(logits[i]) - exact[i]);
      d.max = std::max(d.max, e);
      d.mean += e;
    }
    d.mean /= static_cast<double>(exact.size());
    int same = 0;
    for (std::size_t p = 0; p < tokens_.size(); ++p) {
      const auto row = [&](const std::vector<float>& v) { return v.begin() + static_cast<std::ptrdiff_t>(p * vocab_); };
      same += std::max_element(row(logits), row(logits) + vocab_) - row(logits) ==
              std::max_element(row(exact), row(exact) + vocab_) - row(exact);
    }
    d.top1 = static_cast<double>(same) / static_cast<double>(tokens_.size());
    return d;
  }

  void expect_close(const std::vector<float>& logits, const std::string& what, double max_bound) const {
    const Distance d = vs_exact(logits);
    std::cout << "new_formats " << what << " vs exact f64: max " << d.max << " mean " << d.mean << " top-1 " << d.top1
              << "\n";
    EXPECT_LE(d.max, max_bound) << what;
    EXPECT_LE(d.mean, max_bound / 10) << what;
    EXPECT_GE(d.top1, 0.97) << what;
  }

  std::vector<int32_t> tokens_;
  int vocab_ = 0;
};

// Exact logits have std ~3 here. Measured (the line each test prints): prefill max 2.2e-5,
// mean 6.6e-7; decode with f32 activations max 3.6e-5, mean 1.4e-6 (f32 accumulation only);
// decode with 16-bit activations max 2.5e-4, mean 4.7e-5. Bounds are 3-4x those, and far
// below what one wrong scale or code in any format moves (O(0.01-1) on the logits).
constexpr double kF32Max = 1e-4;  // prefill and f32-activation decode
constexpr double kI16Max = 1e-3;  // decode on activations rounded to 16 bits per block

TEST_F(NewFormatsModel, EachNewFormatIsAMatmulWeight) {
  const auto file = lm::gguf::GgufFile::open((kOut / "new_formats.gguf").string());
  std::set<std::string> types;
  for (const auto& t : file->tensors()) {
    types.insert(lm::ggml_type_name(t.type));
    EXPECT_EQ(lm::ggml_type_name(t.type), generated().fx.at("types").at(t.name).get<std::string>()) << t.name;
  }
  EXPECT_EQ(types, (std::set<std::string>{"F32", "Q5_0", "Q5_1", "Q5_K", "Q3_K", "Q2_K", "IQ4_NL", "IQ4_XS"}));
}

TEST_F(NewFormatsModel, PrefillComputesTheExactFunction) {
  const lm::LoadedModel m = load(true);
  expect_close(prefill(m), "prefill", kF32Max);
}

TEST_F(NewFormatsModel, DecodeWithI16ActivationsComputesTheExactFunction) {
  const lm::LoadedModel m = load(true);
  expect_close(decode(m), "decode i16", kI16Max);
}

TEST_F(NewFormatsModel, DecodeWithF32ActivationsComputesTheExactFunction) {
  const lm::LoadedModel m = load(false);
  expect_close(decode(m), "decode f32", kF32Max);
}

// ---------------------------------------------------------------- a real file
//
// The Gemma 3 270M Q4_K_M checkpoint (issue 19; scripts/setup.sh fetches it into models/)
// stores 81 of its matrices as Q5_0, quantized by llama.cpp. Whatever the architecture code
// does with it, every tensor must now get a weight view, and its Q5_0 (and other quantized)
// rows must multiply like their dequantization, with f32 and with 16-bit activations.
const fs::path kGemma = fs::path(VQ_SOURCE_DIR) / "models/gemma-3-270m-q4_k_m.gguf";

TEST(RealFileFormats, Gemma3QuantizedRowsMultiplyLikeTheirDequantization) {
  if (!fs::exists(kGemma)) GTEST_SKIP() << kGemma << " is absent (scripts/setup.sh fetches it)";
  const auto file = lm::gguf::GgufFile::open(kGemma.string());
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  int q5_0 = 0;
  for (const auto& t : file->tensors()) {
    if (t.ne.size() != 2) continue;
    const lm::WeightMatrix w = file->weight(t.name);  // throws for an unsupported type
    if (t.type == lm::GgmlType::F32 || t.type == lm::GgmlType::F16) continue;
    q5_0 += t.type == lm::GgmlType::Q5_0;
    std::vector<float> x(static_cast<std::size_t>(w.cols)), deq(x.size());
    for (auto& v : x) v = normal(rng);
    std::vector<lm::kernels::I16Block> xq(x.size() / lm::kernels::kI16Block);
    lm::kernels::quantize_i16(x.data(), w.cols, xq.data());
    for (int64_t r : {int64_t{0}, w.rows / 2, w.rows - 1}) {
      w.dequantize_row_to(r, deq.data());
      double magnitude = 0.0;
      for (std::size_t i = 0; i < x.size(); ++i) magnitude += std::abs(double(deq[i]) * x[i]);
      const double reference = lm::kernels::vec_dot_reference(t.type, w.row(r), x.data(), w.cols);
      const double i16_reference = lm::kernels::vec_dot_i16_reference(t.type, w.row(r), xq.data(), w.cols);
      // f32 accumulation of cols terms, with the factored block minimum counted twice over.
      const double bound = 3.0 * (double(w.cols) + 16) * std::ldexp(1.0, -24) * magnitude + 1e-30;
      EXPECT_NEAR(lm::kernels::vec_dot(t.type, w.row(r), x.data(), w.cols), reference, bound) << t.name << " row " << r;
      EXPECT_NEAR(lm::kernels::vec_dot_i16(t.type, w.row(r), xq.data(), w.cols), i16_reference, bound)
          << t.name << " row " << r;
    }
  }
  EXPECT_EQ(q5_0, 81);
}

}  // namespace
