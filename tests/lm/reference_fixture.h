#pragma once
// What the whole-model reference tests share (tests/lm/reference_agreement_test.cpp,
// reference_agreement_gemma3_test.cpp): reading a fixture of tools/reference/make_model_fixtures.py,
// lm's logits over its passage (one forward, chunked prefill) and their agreement with the
// fixture's llama.cpp and exact-forward sections.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lm/cache/cache.h"
#include "lm/load.h"
#include "lm/model.h"
#include "lm/tokenizer/tokenizer.h"

namespace lm_reference {

namespace fs = std::filesystem;
using nlohmann::json;

inline const fs::path kFixtures = fs::path(VQ_SOURCE_DIR) / "tests/fixtures/reference/models";

// Gap (logits) under which llama.cpp's own top-1 is not a decision: 3x the mean |Δlogit|
// between llama.cpp's batch and decode paths on SmolLM2 (0.153, in the fixture), and above
// the largest top-1 gap at which the exact forward and llama.cpp disagree (0.27).
constexpr double kNearTie = 0.5;

inline json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("missing fixture " + path.string());
  return json::parse(in);
}

inline std::vector<float> read_f32(const fs::path& path, std::size_t expected_count) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("missing fixture " + path.string());
  std::vector<float> v(expected_count);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(expected_count * sizeof(float)));
  if (in.gcount() != static_cast<std::streamsize>(expected_count * sizeof(float)) || in.peek() != EOF) {
    throw std::runtime_error(path.string() + " does not hold exactly " + std::to_string(expected_count) + " floats");
  }
  return v;
}

struct AbsDiff {
  double max = 0.0, sum = 0.0;
  int64_t n = 0;
  void add(double a, double b) {
    const double d = std::abs(a - b);
    max = std::max(max, d);
    sum += d;
    ++n;
  }
  double mean() const { return n ? sum / static_cast<double>(n) : 0.0; }
};

// lm's logits over a passage compared with one reference section of a fixture.
struct Agreement {
  int positions = 0;
  int top1_same = 0;  // lm argmax == reference argmax
  int decided = 0;    // positions whose reference top-1/top-2 gap exceeds kNearTie
  int decided_same = 0;
  int within_near_tie = 0;  // reference scores lm's argmax within kNearTie of its best
  AbsDiff sparse;           // top-5 and probe logits at every position
  AbsDiff full;             // whole rows at the fixture's full-logit positions
  double top1_rate() const { return static_cast<double>(top1_same) / positions; }
  double decided_rate() const { return decided ? static_cast<double>(decided_same) / decided : 1.0; }
  double near_tie_rate() const { return static_cast<double>(within_near_tie) / positions; }
};

inline int argmax(const float* row, int vocab) { return static_cast<int>(std::max_element(row, row + vocab) - row); }

// `section` has top1, top5_ids, top5_logits, probe_logits (+ the top-level probe_ids) and
// full rows in `full` at `full_positions`.
inline Agreement compare(const std::vector<float>& logits, int vocab, const json& section, const json& probe_ids,
                         const std::vector<float>& full, const std::vector<int>& full_positions) {
  Agreement a;
  const auto& top1 = section.at("top1");
  a.positions = static_cast<int>(top1.size());
  for (int p = 0; p < a.positions; ++p) {
    const float* row = logits.data() + static_cast<std::size_t>(p) * vocab;
    const int ours = argmax(row, vocab);
    const int ref = top1[p].get<int>();
    const auto& ids = section.at("top5_ids")[p];
    const auto& vals = section.at("top5_logits")[p];
    a.top1_same += ours == ref;
    const double gap = vals[0].get<double>() - vals[1].get<double>();
    if (gap > kNearTie) {
      ++a.decided;
      a.decided_same += ours == ref;
    }
    // The reference's score for our choice is known when it is among the reference's top 5;
    // a choice outside them is never counted as a near-tie (conservative).
    bool near = ours == ref;
    for (int k = 1; k < 5; ++k) {
      if (ids[k].get<int>() == ours) near = vals[0].get<double>() - vals[k].get<double>() <= kNearTie;
    }
    a.within_near_tie += near;
    for (int k = 0; k < 5; ++k) a.sparse.add(row[ids[k].get<int>()], vals[k].get<double>());
    for (std::size_t k = 0; k < probe_ids.size(); ++k) {
      a.sparse.add(row[probe_ids[k].get<int>()], section.at("probe_logits")[p][k].get<double>());
    }
  }
  for (std::size_t i = 0; i < full_positions.size(); ++i) {
    const float* row = logits.data() + static_cast<std::size_t>(full_positions[i]) * vocab;
    for (int v = 0; v < vocab; ++v) a.full.add(row[v], full[i * vocab + v]);
  }
  return a;
}

inline void report(const std::string& what, const Agreement& a) {
  std::cout << "[agreement] " << what << ": top-1 " << a.top1_same << "/" << a.positions << " ("
            << 100.0 * a.top1_rate() << "%), decided " << a.decided_same << "/" << a.decided << ", within near-tie "
            << a.within_near_tie << "/" << a.positions << "; top5+probe |d| max " << a.sparse.max << " mean "
            << a.sparse.mean() << "; full rows |d| max " << a.full.max << " mean " << a.full.mean() << std::endl;
}

// The fixture of one model, its references and lm's logits computed two ways.
struct ModelRun {
  json fx;
  std::vector<int32_t> tokens;
  int vocab = 0;
  lm::LoadedModel loaded;
  std::vector<float> llama_full, exact_full;
  std::vector<int> llama_full_pos, exact_full_pos;

  void open(const std::string& name, const fs::path& model_path) {
    fx = read_json(kFixtures / (name + ".json"));
    tokens = fx.at("tokens").get<std::vector<int32_t>>();
    vocab = fx.at("vocab_size").get<int>();
    llama_full_pos = fx.at("full_logits_positions").get<std::vector<int>>();
    exact_full_pos = fx.at("exact_f64").at("full_logits_positions").get<std::vector<int>>();
    llama_full = read_f32(kFixtures / fx.at("full_logits_file").get<std::string>(), llama_full_pos.size() * vocab);
    exact_full = read_f32(kFixtures / fx.at("exact_f64").at("full_logits_file").get<std::string>(),
                          exact_full_pos.size() * vocab);
    lm::LoadOptions options;
    options.threads = 2;
    loaded = lm::load(model_path.string(), options);
    ASSERT_EQ(loaded.model->config().vocab_size, vocab);
  }

  // Logits of every position: one forward over the whole passage on fresh caches.
  std::vector<float> one_forward() const {
    lm::CacheList caches = lm::make_prompt_cache(*loaded.model);
    std::vector<float> last, all;
    loaded.model->forward(tokens, caches, last, &all);
    EXPECT_EQ(all.size(), tokens.size() * static_cast<std::size_t>(vocab));
    // last_logits is the final row of all_logits.
    EXPECT_TRUE(std::equal(last.begin(), last.end(), all.end() - vocab));
    return all;
  }

  // The same passage fed as a chunked prefill, each chunk attending to the cache. Uneven
  // chunk sizes: 1-3 tokens (the decode kernels, mid-sequence too), sizes that are not
  // multiples of 4, 8 or 32, and larger chunks (the prefill kernels).
  std::vector<float> chunked_forward() const {
    lm::CacheList caches = lm::make_prompt_cache(*loaded.model);
    const std::vector<std::size_t> plan = {1, 37, 2, 64, 3, 5, 100, 1, 13};
    std::vector<float> out, last, all;
    std::size_t begin = 0, step = 0;
    while (begin < tokens.size()) {
      const std::size_t n = std::min(plan[step++ % plan.size()], tokens.size() - begin);
      std::vector<int32_t> chunk(tokens.begin() + begin, tokens.begin() + begin + n);
      loaded.model->forward(chunk, caches, last, &all);
      out.insert(out.end(), all.begin(), all.end());
      begin += n;
    }
    EXPECT_EQ(caches.front()->offset(), static_cast<int64_t>(tokens.size()));
    return out;
  }

  Agreement vs_llama(const std::vector<float>& logits) const {
    return compare(logits, vocab, fx, fx.at("probe_ids"), llama_full, llama_full_pos);
  }
  Agreement vs_exact(const std::vector<float>& logits) const {
    return compare(logits, vocab, fx.at("exact_f64"), fx.at("probe_ids"), exact_full, exact_full_pos);
  }
};

inline void expect_tokenizer_matches(const ModelRun& run) {
  const json& check = run.fx.at("tokenizer_check");
  const auto expected = check.at("ids").get<std::vector<int32_t>>();
  const auto ours = run.loaded.tokenizer->encode(check.at("text").get<std::string>(), check.at("add_bos").get<bool>());
  EXPECT_EQ(ours, expected) << "lm's tokenizer and llama.cpp's disagree on the fixture text";
}

}  // namespace lm_reference
