#pragma once
// What the transformers-verified family tests share (tests/lm/hf_<family>_test.cpp): reading a
// fixture of tools/reference/hf/make_<family>.py (tests/fixtures/reference/hf/<family>.{gguf,
// json,logits.f32}), lm's logits over its passage, the comparison with transformers' float32
// logits, lm's greedy tokens, and a compressed cache per method through KVCacheBuilder::for_model.
//
// The fixture models are tiny random-weight Hugging Face models whose matrices are stored as
// F16 in the GGUF and were rounded to those f16 values before transformers ran, so lm and
// transformers compute the same function from the same numbers: what is left is float32
// rounding in a different order. Each fixture records transformers' own float32-vs-float64
// spread (`f32_vs_f64`), the scale the tolerances are stated against.
//
// HF_FAMILY_TESTS(Suite, "family", tolerance) defines the standard tests of one family; the
// family's test file adds what is particular to it (its config, its layers' windows).
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"

#include "lm/cache/cache.h"
#include "lm/cache/kv_cache_type.h"
#include "lm/generate.h"
#include "lm/load.h"
#include "lm/model.h"
#include "lm/tokenizer/tokenizer.h"
#include "veloxquant/builder/kv_cache_builder.h"
#include "veloxquant/config/kv_cache_config.h"

namespace hf_fixture {

namespace fs = std::filesystem;
using nlohmann::json;

inline const fs::path kDir = fs::path(VQ_SOURCE_DIR) / "tests/fixtures/reference/hf";

struct Fixture {
  std::string family;
  json meta;
  std::vector<int32_t> tokens;  // the passage (BOS first)
  std::vector<int32_t> greedy;  // transformers' greedy continuation of `tokens`
  int vocab = 0;
  std::vector<float> logits;  // transformers' float32 logits, [tokens.size(), vocab]
  fs::path gguf;

  static Fixture open(const std::string& family) {
    Fixture f;
    f.family = family;
    const fs::path json_path = kDir / (family + ".json");
    std::ifstream in(json_path);
    if (!in) throw std::runtime_error("missing fixture " + json_path.string());
    f.meta = json::parse(in);
    f.tokens = f.meta.at("tokens").get<std::vector<int32_t>>();
    f.greedy = f.meta.at("greedy").get<std::vector<int32_t>>();
    f.vocab = f.meta.at("vocab_size").get<int>();
    f.gguf = kDir / f.meta.at("gguf_file").get<std::string>();
    const fs::path logits_path = kDir / f.meta.at("logits_file").get<std::string>();
    const std::size_t count = f.tokens.size() * static_cast<std::size_t>(f.vocab);
    std::ifstream lin(logits_path, std::ios::binary);
    if (!lin) throw std::runtime_error("missing fixture " + logits_path.string());
    f.logits.resize(count);
    lin.read(reinterpret_cast<char*>(f.logits.data()), static_cast<std::streamsize>(count * sizeof(float)));
    if (lin.gcount() != static_cast<std::streamsize>(count * sizeof(float)) || lin.peek() != EOF) {
      throw std::runtime_error(logits_path.string() + " does not hold exactly " + std::to_string(count) + " floats");
    }
    return f;
  }

  // transformers' float32 against float64 on the same model (measured by the generator).
  double transformers_f32_spread() const { return meta.at("f32_vs_f64").at("max_abs").get<double>(); }
};

// The reference settings: f32 KV cache and f32 activations everywhere, so lm's only departure
// from transformers is summation order. Two threads (the machine is shared).
inline lm::LoadedModel load_exact(const Fixture& f) {
  lm::LoadOptions options;
  options.kv_type = lm::KVCacheType::F32;
  options.i16_activations = false;
  options.threads = 2;
  return lm::load(f.gguf.string(), options);
}

// What a user runs: lm's default 16-bit-rounded decode activations and the given native KV
// type (f16 by default; q8_0 blocks go through lm::BlockKVCache).
inline lm::LoadedModel load_production(const Fixture& f, lm::KVCacheType kv_type) {
  lm::LoadOptions options;
  options.kv_type = kv_type;
  options.threads = 2;
  return lm::load(f.gguf.string(), options);
}

// A copy of the fixture's GGUF (in the build directory) whose scalar metadata `key` holds
// `value` instead: the 4 bytes after the key's name and its u32 value type are replaced, so it
// suits u32 / i32 / f32 keys. The caller removes the file.
inline fs::path with_metadata_value(const Fixture& f, const std::string& key, const void* value,
                                    const std::string& tag) {
  std::ifstream in(f.gguf, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string name = key;
  const std::size_t at = bytes.find(name);
  if (at == std::string::npos) throw std::runtime_error(f.gguf.string() + " has no metadata " + key);
  std::memcpy(bytes.data() + at + name.size() + 4, value, 4);
  const fs::path path =
      fs::path(VQ_BINARY_DIR) / ("hf_" + f.family + "_" + tag + "_" + std::to_string(::getpid()) + ".gguf");
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// lm::load of `path` throws base::FormatError whose message contains `needle`; removes `path`.
inline void expect_format_error(const fs::path& path, const std::string& needle) {
  try {
    lm::load(path.string());
    ADD_FAILURE() << "loaded " << path << ", expected an error naming " << needle;
  } catch (const base::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  fs::remove(path);
}

// Logits of every position: one forward over `tokens` on the model's native caches.
inline std::vector<float> forward_all(const lm::Model& model, const std::vector<int32_t>& tokens) {
  lm::CacheList caches = model.native_make_cache();
  std::vector<float> last, all;
  model.forward(tokens, caches, last, &all);
  return all;
}

// The same tokens fed in uneven chunks (single tokens: the decode path; larger: prefill into a
// cache that already holds rows), so a windowed layer's mask is exercised across chunks.
inline std::vector<float> forward_chunked(const lm::Model& model, const std::vector<int32_t>& tokens) {
  lm::CacheList caches = model.native_make_cache();
  const std::vector<std::size_t> plan = {1, 7, 2, 13, 1, 5, 19, 3};
  std::vector<float> out, last, all;
  std::size_t begin = 0, step = 0;
  while (begin < tokens.size()) {
    const std::size_t n = std::min(plan[step++ % plan.size()], tokens.size() - begin);
    model.forward(std::vector<int32_t>(tokens.begin() + begin, tokens.begin() + begin + n), caches, last, &all);
    out.insert(out.end(), all.begin(), all.end());
    begin += n;
  }
  return out;
}

inline int argmax(const float* row, int vocab) { return static_cast<int>(std::max_element(row, row + vocab) - row); }

struct LogitDiff {
  double max_abs = 0.0, sum_abs = 0.0;
  int64_t count = 0;
  int positions = 0, top1_same = 0;
  double mean_abs() const { return count ? sum_abs / static_cast<double>(count) : 0.0; }
  double top1_rate() const { return positions ? static_cast<double>(top1_same) / positions : 0.0; }
};

inline LogitDiff compare(const std::vector<float>& ours, const std::vector<float>& ref, int vocab) {
  LogitDiff d;
  EXPECT_EQ(ours.size(), ref.size());
  const std::size_t n = std::min(ours.size(), ref.size()) / static_cast<std::size_t>(vocab);
  for (std::size_t p = 0; p < n; ++p) {
    const float* a = ours.data() + p * vocab;
    const float* b = ref.data() + p * vocab;
    for (int v = 0; v < vocab; ++v) {
      const double e = std::abs(static_cast<double>(a[v]) - b[v]);
      d.max_abs = std::isfinite(e) ? std::max(d.max_abs, e) : INFINITY;
      d.sum_abs += e;
      ++d.count;
    }
    ++d.positions;
    d.top1_same += argmax(a, vocab) == argmax(b, vocab);
  }
  return d;
}

inline void report(const std::string& what, const LogitDiff& d) {
  std::cout << "[hf] " << what << ": max |dlogit| " << d.max_abs << ", mean " << d.mean_abs() << ", top-1 "
            << d.top1_same << "/" << d.positions << std::endl;
}

// lm::stream_generate's greedy tokens after `prompt` (lm's decode path, one token per step).
inline std::vector<int32_t> lm_greedy(const lm::LoadedModel& m, const std::vector<int32_t>& prompt, int n) {
  lm::GenerateOptions o;
  o.max_tokens = n;
  o.temperature = 0.0f;
  std::vector<int32_t> out;
  lm::stream_generate(*m.model, *m.tokenizer, prompt, o, [&](const lm::GenerationChunk& c) {
    if (c.token >= 0) out.push_back(c.token);
    return true;
  });
  return out;
}

// transformers' greedy tokens as lm::generate can reproduce them: lm stops at EOS (without
// emitting it), the generator did not, so the comparison ends before the first EOS.
inline std::vector<int32_t> expected_greedy(const Fixture& f, int32_t eos) {
  std::vector<int32_t> g = f.greedy;
  const auto it = std::find(g.begin(), g.end(), eos);
  g.erase(it, g.end());
  return g;
}

// The compressed caches of the done-when of issue 19, set so that they compress something on a
// passage of ~80 tokens: 4-bit turboquant_rvq; 4-bit kivi with no full-precision residual; h2o
// with a 48-row budget (eviction starts during the passage).
// Bounds of one family, each stated in the family's test file with its measured value.
struct Tolerance {
  double max_abs;   // max |lm - transformers| over every logit of the passage
  double mean_abs;  // mean of the same
  // Top-1 agreement of each compressed cache with lm's native caches over passage + greedy.
  double rvq_top1, kivi_top1, h2o_top1;
  // lm's production settings (f16 or q8_0 KV cache, 16-bit-rounded decode activations) against
  // transformers: max |dlogit| and top-1 agreement over the passage (chunked prefill). Measured
  // on llama, mistral, phi3, gemma2, gemma3: max 0.0023-0.028 (f16 KV), 0.0027-0.088 (q8_0 KV;
  // the windowed layers of mistral / phi3 keep f16 rotating caches, so equal to f16 there);
  // top-1 64/64 except gemma2 with q8_0, 63/64 (its passage has a top-1/top-2 gap of 0.001).
  // Defaults: 2x margin on the largest difference, two near-ties may flip.
  double production_max_abs = 0.2;
  double production_top1 = 62.0 / 64.0;
};

struct CompressedCase {
  std::string label;
  veloxquant::KVCacheConfig config;
  double Tolerance::*floor;
};

inline std::vector<CompressedCase> compressed_configs() {
  std::vector<CompressedCase> out;
  veloxquant::KVCacheConfig rvq;
  rvq.method = "turboquant_rvq";
  rvq.bit_width_inlier = 4;
  out.push_back({"turboquant_rvq 4-bit", rvq, &Tolerance::rvq_top1});
  veloxquant::KVCacheConfig kivi;
  kivi.method = "kivi";
  kivi.bit_width_inlier = 4;
  kivi.kivi.residual_length = 0;
  out.push_back({"kivi 4-bit", kivi, &Tolerance::kivi_top1});
  veloxquant::KVCacheConfig h2o;
  h2o.method = "h2o";
  h2o.h2o.h2o_budget = 48;
  h2o.h2o.h2o_grace = 4;
  out.push_back({"h2o budget 48", h2o, &Tolerance::h2o_top1});
  return out;
}

struct CompressedRun {
  bool finite = true;
  int positions = 0, top1_same = 0;
  double top1_rate() const { return positions ? static_cast<double>(top1_same) / positions : 0.0; }
};

// `seq` through for_model's caches: the first 16 tokens as one prefill, then one token per
// forward (the decode path, fused attention where the cache offers it). Top-1 at every position
// is compared with `native` (lm's logits of `seq` on its native caches).
inline CompressedRun run_compressed(const lm::Model& model, const veloxquant::KVCacheConfig& config,
                                    const std::vector<int32_t>& seq, const std::vector<float>& native, int vocab) {
  CompressedRun r;
  lm::CacheList caches = veloxquant::KVCacheBuilder::for_model(model, config);
  std::vector<float> last, all, logits;
  const std::size_t prefill = std::min<std::size_t>(16, seq.size());
  model.forward(std::vector<int32_t>(seq.begin(), seq.begin() + prefill), caches, last, &all);
  logits = all;
  for (std::size_t t = prefill; t < seq.size(); ++t) {
    model.forward({seq[t]}, caches, last);
    logits.insert(logits.end(), last.begin(), last.end());
  }
  for (float v : logits) r.finite = r.finite && std::isfinite(v);
  for (std::size_t p = 0; p < seq.size(); ++p) {
    ++r.positions;
    r.top1_same += argmax(logits.data() + p * vocab, vocab) == argmax(native.data() + p * vocab, vocab);
  }
  return r;
}

}  // namespace hf_fixture

// The standard tests of one family: transformers' logits (one forward and chunked prefill),
// top-1 at every position, the greedy continuation through lm::stream_generate, the tokenizer on
// the fixture text, and turboquant_rvq / kivi / h2o through KVCacheBuilder::for_model.
#define HF_FAMILY_TESTS(Suite, family_name, tolerance)                                                                 \
  class Suite : public ::testing::Test {                                                                               \
   protected:                                                                                                          \
    static void SetUpTestSuite() {                                                                                     \
      fx_ = new hf_fixture::Fixture(hf_fixture::Fixture::open(family_name));                                           \
      model_ = new lm::LoadedModel(hf_fixture::load_exact(*fx_));                                                      \
    }                                                                                                                  \
    static void TearDownTestSuite() {                                                                                  \
      delete model_;                                                                                                   \
      delete fx_;                                                                                                      \
      model_ = nullptr;                                                                                                \
      fx_ = nullptr;                                                                                                   \
    }                                                                                                                  \
    static hf_fixture::Fixture* fx_;                                                                                   \
    static lm::LoadedModel* model_;                                                                                    \
  };                                                                                                                   \
  hf_fixture::Fixture* Suite::fx_ = nullptr;                                                                           \
  lm::LoadedModel* Suite::model_ = nullptr;                                                                            \
                                                                                                                       \
  TEST_F(Suite, OneForwardMatchesTransformersLogits) {                                                                 \
    ASSERT_EQ(model_->model->config().vocab_size, fx_->vocab);                                                         \
    const auto d = hf_fixture::compare(hf_fixture::forward_all(*model_->model, fx_->tokens), fx_->logits, fx_->vocab); \
    hf_fixture::report(std::string(family_name) + " one forward vs transformers", d);                                  \
    EXPECT_LE(d.max_abs, (tolerance).max_abs);                                                                         \
    EXPECT_LE(d.mean_abs(), (tolerance).mean_abs);                                                                     \
    EXPECT_EQ(d.top1_same, d.positions);                                                                               \
  }                                                                                                                    \
                                                                                                                       \
  TEST_F(Suite, ChunkedPrefillMatchesTransformersLogits) {                                                             \
    const auto d =                                                                                                     \
        hf_fixture::compare(hf_fixture::forward_chunked(*model_->model, fx_->tokens), fx_->logits, fx_->vocab);        \
    hf_fixture::report(std::string(family_name) + " chunked prefill vs transformers", d);                              \
    EXPECT_LE(d.max_abs, (tolerance).max_abs);                                                                         \
    EXPECT_LE(d.mean_abs(), (tolerance).mean_abs);                                                                     \
    EXPECT_EQ(d.top1_same, d.positions);                                                                               \
  }                                                                                                                    \
                                                                                                                       \
  TEST_F(Suite, ProductionSettingsStayCloseToTransformers) {                                                           \
    for (const lm::KVCacheType kv : {lm::KVCacheType::F16, lm::KVCacheType::Q8_0}) {                                   \
      const lm::LoadedModel m = hf_fixture::load_production(*fx_, kv);                                                 \
      const auto d = hf_fixture::compare(hf_fixture::forward_chunked(*m.model, fx_->tokens), fx_->logits, fx_->vocab); \
      hf_fixture::report(std::string(family_name) + " chunked, " + std::string(lm::kv_cache_type_name(kv)) +           \
                             " KV, i16 activations vs transformers",                                                   \
                         d);                                                                                           \
      EXPECT_LE(d.max_abs, (tolerance).production_max_abs) << lm::kv_cache_type_name(kv);                              \
      EXPECT_GE(d.top1_rate(), (tolerance).production_top1) << lm::kv_cache_type_name(kv);                             \
    }                                                                                                                  \
  }                                                                                                                    \
                                                                                                                       \
  TEST_F(Suite, GreedyTokensMatchTransformers) {                                                                       \
    const auto eos = model_->tokenizer->eos_id();                                                                      \
    const auto want = hf_fixture::expected_greedy(*fx_, eos ? *eos : -1);                                              \
    ASSERT_GE(want.size(), 8u) << "the fixture's greedy continuation hits EOS too early to test much";                 \
    const auto got = hf_fixture::lm_greedy(*model_, fx_->tokens, static_cast<int>(fx_->greedy.size()));                \
    EXPECT_EQ(got, want);                                                                                              \
  }                                                                                                                    \
                                                                                                                       \
  TEST_F(Suite, TokenizerMatchesTheFixture) {                                                                          \
    const auto& check = fx_->meta.at("tokenizer_check");                                                               \
    EXPECT_EQ(model_->tokenizer->encode(check.at("text").get<std::string>(), check.at("add_bos").get<bool>()),         \
              check.at("ids").get<std::vector<int32_t>>());                                                            \
  }                                                                                                                    \
                                                                                                                       \
  TEST_F(Suite, CompressedCachesRunThroughForModel) {                                                                  \
    std::vector<int32_t> seq = fx_->tokens;                                                                            \
    seq.insert(seq.end(), fx_->greedy.begin(), fx_->greedy.end());                                                     \
    const std::vector<float> native = hf_fixture::forward_all(*model_->model, seq);                                    \
    for (const auto& c : hf_fixture::compressed_configs()) {                                                           \
      const auto r = hf_fixture::run_compressed(*model_->model, c.config, seq, native, fx_->vocab);                    \
      std::cout << "[hf] " << family_name << " " << c.label << ": top-1 vs native " << r.top1_same << "/"              \
                << r.positions << std::endl;                                                                           \
      EXPECT_TRUE(r.finite) << c.label;                                                                                \
      EXPECT_GE(r.top1_rate(), (tolerance).*c.floor) << c.label;                                                       \
    }                                                                                                                  \
  }
