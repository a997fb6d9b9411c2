// The llama forward pass on real weights (stories260K, Karpathy's tinyllamas checkpoint) and
// the cache contract as the host drives it.
//
// Expected values come from outside this code: the greedy text is llama2.c's published test
// expectation (quoted in ../shared/models/stories260K/README.md, checked there against
// run.c and llama.cpp); the .bin and .gguf files were produced by different tools (llama2.c's
// export and llama.cpp's converter), so equal logits from both are a cross-check of the two
// readers, not of the code against itself.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "gguf_test_writer.h"
#include "lm/cache/cache.h"
#include "lm/cache/full_kv_cache.h"
#include "lm/gguf/gguf_file.h"
#include "lm/kernels/attention.h"
#include "lm/load.h"
#include "lm/model.h"

namespace {

namespace fs = std::filesystem;
const fs::path kStories = fs::path(VQ_SHARED_DIR) / "models/stories260K";

std::string stories_bin() { return (kStories / "stories260K.bin").string(); }
std::string stories_gguf() { return (kStories / "stories260K.gguf").string(); }

// The fenced block under "## Reference output" in the model's README.
std::string reference_text() {
  std::ifstream in(kStories / "README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const auto section = readme.find("## Reference output");
  const auto open = readme.find("```\n", section);
  const auto close = readme.find("\n```", open + 4);
  if (section == std::string::npos || open == std::string::npos || close == std::string::npos) return {};
  return readme.substr(open + 4, close - open - 4);
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// run.c's generate loop with -t 0 -n 200 and an empty prompt: start at BOS, 200 positions,
// stop early if BOS comes back, print decode(previous, next) each step.
std::string greedy_story(const lm::LoadedModel& loaded, int steps) {
  lm::CacheList caches = lm::make_prompt_cache(*loaded.model);
  int32_t token = *loaded.tokenizer->bos_id();
  std::string text;
  std::vector<float> logits;
  for (int pos = 0; pos < steps; ++pos) {
    loaded.model->forward({token}, caches, logits);
    const int32_t next = argmax(logits);
    if (next == 1) break;
    text += loaded.tokenizer->decode_token(token, next);
    token = next;
  }
  return text;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0.0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m;
}

TEST(ModelForward, Stories260KConfigFromBothFormats) {
  const auto bin = lm::load(stories_bin());
  const auto gguf = lm::load(stories_gguf());
  for (const auto* m : {&bin, &gguf}) {
    const lm::ModelConfig& c = m->model->config();
    // The README's header table: 64 / 172 / 5 / 8 / 4 / 512 / 512.
    EXPECT_EQ(c.dim, 64);
    EXPECT_EQ(c.hidden_dim, 172);
    EXPECT_EQ(c.n_layers, 5);
    EXPECT_EQ(c.n_heads, 8);
    EXPECT_EQ(c.n_kv_heads, 4);
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.context_length, 512);
    ASSERT_EQ(m->model->layers().size(), 5u);
    EXPECT_EQ(m->model->layers()[0].n_kv_heads, 4);
    EXPECT_EQ(m->tokenizer->vocab_size(), 512);
  }
}

TEST(ModelForward, Llama2cGreedyFromBosMatchesPublishedOutput) {
  const std::string expected = reference_text();
  ASSERT_GT(expected.size(), 400u) << "reference block not found in README";
  EXPECT_EQ(greedy_story(lm::load(stories_bin()), 200), expected);
}

TEST(ModelForward, GgufGreedyFromBosMatchesPublishedOutput) {
  const std::string expected = reference_text();
  ASSERT_GT(expected.size(), 400u);
  EXPECT_EQ(greedy_story(lm::load(stories_gguf()), 200), expected);
}

TEST(ModelForward, BinAndGgufGiveTheSameLogits) {
  const auto bin = lm::load(stories_bin());
  const auto gguf = lm::load(stories_gguf());
  const std::vector<int32_t> tokens = bin.tokenizer->encode("Once upon a time, there was a cat named Tom.", true);
  ASSERT_GT(tokens.size(), 5u);
  lm::CacheList c1 = lm::make_prompt_cache(*bin.model), c2 = lm::make_prompt_cache(*gguf.model);
  std::vector<float> last1, last2, all1, all2;
  bin.model->forward(tokens, c1, last1, &all1);
  gguf.model->forward(tokens, c2, last2, &all2);
  ASSERT_EQ(all1.size(), tokens.size() * 512);
  // Same f32 weights, same kernels: only the byte source differs, so the results must agree
  // exactly (the GGUF's separate output.weight holds the same values as the tied embedding).
  EXPECT_EQ(max_abs_diff(all1, all2), 0.0);
  EXPECT_EQ(last1, std::vector<float>(all1.end() - 512, all1.end()));
}

TEST(ModelForward, ChunkedPrefillEqualsTokenByToken) {
  const auto m = lm::load(stories_bin());
  const std::vector<int32_t> tokens = m.tokenizer->encode("Lily saw a big red ball in the park.", true);
  lm::CacheList whole = lm::make_prompt_cache(*m.model);
  std::vector<float> last, all;
  m.model->forward(tokens, whole, last, &all);
  EXPECT_EQ(whole[0]->offset(), static_cast<int64_t>(tokens.size()));

  lm::CacheList stepwise = lm::make_prompt_cache(*m.model);
  std::vector<float> step;
  double worst = 0.0, max_logit = 0.0;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    m.model->forward({tokens[t]}, stepwise, step);
    const std::vector<float> row(all.begin() + t * 512, all.begin() + (t + 1) * 512);
    worst = std::max(worst, max_abs_diff(step, row));
    for (float v : row) max_logit = std::max(max_logit, std::abs(double(v)));
    EXPECT_EQ(argmax(step), argmax(row)) << t;
  }
  // The two paths sum in different orders (prefill uses the 4-row f32 kernel), so K/V values
  // can land one f16 ulp apart (2^-11 relative) before they are cached; allow four such ulps
  // on the largest logit. A wrong position, mask or cache offset moves logits by O(1).
  EXPECT_LT(worst, 4.0 * std::ldexp(1.0, -11) * max_logit);
}

TEST(ModelForward, KvDtypesAgree) {
  const std::vector<int32_t> tokens{1, 403, 407, 261, 378, 412};
  std::vector<std::vector<float>> results;
  for (lm::KVCacheType type : {lm::KVCacheType::F32, lm::KVCacheType::F16, lm::KVCacheType::BF16}) {
    lm::LoadOptions options;
    options.kv_type = type;
    const auto m = lm::load(stories_bin(), options);
    lm::CacheList caches = lm::make_prompt_cache(*m.model);
    std::vector<float> last;
    m.model->forward(tokens, caches, last);
    results.push_back(last);
  }
  // f16 keeps 11 significant bits, bf16 8: each stored K/V element carries a relative error up
  // to 2^-11 (2^-8); through five layers that grows by a small factor (8 allowed here) on the
  // scale of the largest logit. A wrong layout or conversion would be O(|logit|).
  double max_logit = 0.0;
  for (float v : results[0]) max_logit = std::max(max_logit, std::abs(double(v)));
  EXPECT_LT(max_abs_diff(results[0], results[1]), 8.0 * std::ldexp(1.0, -11) * max_logit);
  EXPECT_LT(max_abs_diff(results[0], results[2]), 8.0 * std::ldexp(1.0, -8) * max_logit);
  EXPECT_EQ(argmax(results[0]), argmax(results[1]));
}

// A cache that records what the host asks of it, delegating storage to FullKVCache; optionally
// offers fused attention (computed by the reference kernel over its own f32 copies).
class RecordingCache : public lm::FullKVCache {
 public:
  explicit RecordingCache(bool fused, bool wants_q)
      : lm::FullKVCache(lm::DType::F16), fused_(fused), wants_q_(wants_q) {}
  mutable std::vector<std::string> calls;
  std::vector<lm::Shape> key_shapes;
  std::vector<lm::DType> key_dtypes;
  std::vector<lm::Shape> query_shapes;

  lm::KeysValues update_and_fetch(const lm::Tensor& k, const lm::Tensor& v) override {
    calls.push_back("update_and_fetch");
    key_shapes.push_back(k.shape());
    key_dtypes.push_back(k.dtype());
    return lm::FullKVCache::update_and_fetch(k, v);
  }
  int64_t offset() const override {
    calls.push_back("offset");
    return lm::FullKVCache::offset();
  }
  lm::AttentionMask make_mask(int64_t n, std::optional<int64_t> window) const override {
    calls.push_back("make_mask");
    return lm::FullKVCache::make_mask(n, window);
  }
  bool wants_queries() const override { return wants_q_; }
  void observe_queries(const lm::Tensor& q) override {
    calls.push_back("observe_queries");
    query_shapes.push_back(q.shape());
  }
  bool supports_fused_attention() const override { return fused_; }
  void fused_attention(const lm::FusedAttentionRequest& r, lm::Tensor& out) override {
    calls.push_back("fused_attention");
    const int64_t n = r.queries->dim(2);
    const lm::KeysValues kv = lm::FullKVCache::update_and_fetch(*r.keys, *r.values);
    lm::Tensor result;
    lm::kernels::attention_reference(*r.queries, kv.keys, kv.values, lm::FullKVCache::make_mask(n, r.window), r.window,
                                     r.scale, result);
    out = result;
  }

 private:
  bool fused_, wants_q_;
};

lm::CacheList recording_caches(int layers, bool fused, bool wants_q, std::vector<RecordingCache*>& raw) {
  lm::CacheList list;
  for (int l = 0; l < layers; ++l) {
    auto c = std::make_shared<RecordingCache>(fused, wants_q);
    raw.push_back(c.get());
    list.push_back(c);
  }
  return list;
}

TEST(ModelForward, DrivesTheCacheContractInOrder) {
  const auto m = lm::load(stories_bin());
  std::vector<RecordingCache*> raw;
  lm::CacheList caches = recording_caches(5, false, true, raw);
  std::vector<float> last;
  m.model->forward({1, 403, 407}, caches, last);
  m.model->forward({261}, caches, last);
  for (RecordingCache* c : raw) {
    // The first call's sequence, then the decode step's: offset before mask, queries before
    // storing, one update per forward.
    std::vector<std::string> expected{"offset", "make_mask", "observe_queries", "update_and_fetch"};
    // forward() also reads layer 0's offset up front, for the context-length check.
    if (c == raw[0]) expected.insert(expected.begin(), "offset");
    std::vector<std::string> twice = expected;
    twice.insert(twice.end(), expected.begin(), expected.end());
    EXPECT_EQ(c->calls, twice);
    ASSERT_EQ(c->key_shapes.size(), 2u);
    EXPECT_EQ(c->key_shapes[0], (lm::Shape{1, 4, 3, 8}));
    EXPECT_EQ(c->key_shapes[1], (lm::Shape{1, 4, 1, 8}));
    EXPECT_EQ(c->key_dtypes[0], lm::DType::F16);
    EXPECT_EQ(c->query_shapes[0], (lm::Shape{1, 8, 3, 8}));
    EXPECT_EQ(c->lm::FullKVCache::offset(), 4);
  }
}

TEST(ModelForward, FusedAttentionPathGivesTheSameLogits) {
  const auto m = lm::load(stories_bin());
  const std::vector<int32_t> prompt{1, 403, 407, 261, 378};
  std::vector<RecordingCache*> raw_fused, raw_plain;
  lm::CacheList fused = recording_caches(5, true, false, raw_fused);
  lm::CacheList plain = recording_caches(5, false, false, raw_plain);
  std::vector<float> a, b;
  m.model->forward(prompt, fused, a);
  m.model->forward(prompt, plain, b);
  m.model->forward({412}, fused, a);
  m.model->forward({412}, plain, b);
  // The fused stand-in attends in double, the host's kernel in float: the attention outputs
  // differ by float rounding (~1e-7 relative), which five layers and the head grow to ~1e-3 on
  // logits of size ~10. Miswiring (a missing store, a wrong mask or position) is O(1).
  EXPECT_LT(max_abs_diff(a, b), 5e-3);
  EXPECT_NE(std::find(raw_fused[0]->calls.begin(), raw_fused[0]->calls.end(), "fused_attention"),
            raw_fused[0]->calls.end());
  EXPECT_EQ(std::find(raw_fused[0]->calls.begin(), raw_fused[0]->calls.end(), "update_and_fetch"),
            raw_fused[0]->calls.end());
}

TEST(ModelForward, MakeCacheHookIsUsed) {
  auto m = lm::load(stories_bin());
  int calls = 0;
  m.model->make_cache = [&] {
    ++calls;
    lm::CacheList list;
    for (int l = 0; l < 5; ++l) list.push_back(std::make_shared<lm::FullKVCache>(lm::DType::F32));
    return list;
  };
  lm::CacheList caches = lm::make_prompt_cache(*m.model);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(std::static_pointer_cast<lm::FullKVCache>(caches[0])->kv_dtype(), lm::DType::F32);
  std::vector<float> last;
  m.model->forward({1, 403}, caches, last);
  EXPECT_EQ(caches[4]->offset(), 2);
}

TEST(ModelForward, RejectsBadCallsWithTypedErrors) {
  const auto m = lm::load(stories_bin());
  lm::CacheList caches = lm::make_prompt_cache(*m.model);
  std::vector<float> last;
  EXPECT_THROW(m.model->forward({}, caches, last), base::InvalidArgument);
  EXPECT_THROW(m.model->forward({512}, caches, last), base::InvalidArgument);
  EXPECT_THROW(m.model->forward({-1}, caches, last), base::InvalidArgument);
  lm::CacheList too_few(caches.begin(), caches.begin() + 2);
  EXPECT_THROW(m.model->forward({1}, too_few, last), base::InvalidArgument);
  // Context length 512: position 512 does not exist.
  lm::LoadOptions small;
  small.context_length = 4;
  const auto short_ctx = lm::load(stories_bin(), small);
  lm::CacheList c2 = lm::make_prompt_cache(*short_ctx.model);
  EXPECT_THROW(short_ctx.model->forward({1, 2, 3, 4, 5}, c2, last), base::InvalidArgument);
  EXPECT_NO_THROW(short_ctx.model->forward({1, 2, 3, 4}, c2, last));
  EXPECT_THROW(short_ctx.model->forward({5}, c2, last), base::InvalidArgument);
}

// SmolLM2-135M-Instruct Q4_1 (setup fetches it; absent only on a machine that skipped setup).
TEST(ModelForward, SmolLM2ConfigAndPrefillDecodeAgreement) {
  const fs::path path = fs::path(VQ_SOURCE_DIR) / "models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << "SmolLM2 GGUF not found at " << path << " (run scripts/fetch_models.sh)";
  lm::LoadOptions options;
  options.threads = 2;
  const auto m = lm::load(path.string(), options);
  const lm::ModelConfig& c = m.model->config();
  // The file's metadata (llama.* keys): 30 blocks, width 576, FFN 1536, 9 query / 3 kv
  // heads of 64, RoPE base 100000, context 8192; token_embd is [576, 49152] and no
  // output.weight, so the head is tied.
  EXPECT_EQ(c.architecture, "llama");
  EXPECT_EQ(c.n_layers, 30);
  EXPECT_EQ(c.dim, 576);
  EXPECT_EQ(c.hidden_dim, 1536);
  EXPECT_EQ(c.n_heads, 9);
  EXPECT_EQ(c.n_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_FLOAT_EQ(c.rope_theta, 100000.0f);
  const std::vector<int32_t> tokens = m.tokenizer->encode("The quick brown fox jumps over the lazy dog.", false);
  ASSERT_GE(tokens.size(), 8u);
  lm::CacheList whole = lm::make_prompt_cache(*m.model), stepwise = lm::make_prompt_cache(*m.model);
  std::vector<float> last, all, step;
  m.model->forward(tokens, whole, last, &all);
  for (float v : last) ASSERT_TRUE(std::isfinite(v));
  int agree = 0;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    m.model->forward({tokens[t]}, stepwise, step);
    const std::vector<float> row(all.begin() + t * 49152, all.begin() + (t + 1) * 49152);
    agree += argmax(step) == argmax(row);
  }
  // Prefill (4-row f32 kernel over dequantized rows) and decode (fused block dots) differ
  // only in rounding; near-ties aside, the predicted tokens must match.
  EXPECT_GE(agree, static_cast<int>(tokens.size()) - 1);
  EXPECT_EQ(whole[29]->offset(), static_cast<int64_t>(tokens.size()));
}

// stories260K's metadata under architecture arch ("llama.x" keys renamed "<arch>.x").
void write_metadata_as(const lm::gguf::GgufFile& stories, const std::string& arch, gguf_test::Writer& w) {
  for (const auto& [key, value] : stories.metadata()) {
    std::string k = key;
    if (k.rfind("llama.", 0) == 0) k.replace(0, 5, arch);  // "llama.x" -> "<arch>.x"
    if (k == "general.architecture") {
      w.kv_str(k, arch);
    } else if (value.type == lm::gguf::ValueType::U32) {
      w.kv_u32(k, static_cast<uint32_t>(value.integer));
    } else if (value.type == lm::gguf::ValueType::F32) {
      w.kv_f32(k, static_cast<float>(value.number));
    } else if (value.type == lm::gguf::ValueType::STRING) {
      w.kv_str(k, value.text);
    } else if (value.is_array() && value.array_type == lm::gguf::ValueType::STRING) {
      w.kv_str_array(k, value.strings);
    } else if (value.is_array() && value.array_type == lm::gguf::ValueType::F32) {
      w.kv_f32_array(k, std::vector<float>(value.numbers.begin(), value.numbers.end()));
    } else if (value.is_array()) {
      w.kv_i32_array(k, std::vector<int32_t>(value.integers.begin(), value.integers.end()));
    }
  }
}

// One q/k tensor of stories260K (head dim 8, 64 columns) with the converter's row permutation
// undone: row 2i + c of a head goes back to row c * 4 + i.
void unpermute_qk_rows(const float* src, int64_t rows, std::vector<float>& values) {
  const int64_t d = 8, dim = 64;
  for (int64_t head = 0; head < rows / d; ++head) {
    for (int64_t i = 0; i < d / 2; ++i) {
      for (int64_t c = 0; c < 2; ++c) {
        const int64_t from = head * d + 2 * i + c, to = head * d + c * (d / 2) + i;
        std::copy_n(src + from * dim, dim, values.begin() + to * dim);
      }
    }
  }
}

// stories260K's tensors, q and k unpermuted.
void write_unpermuted_tensors(const lm::gguf::GgufFile& stories, gguf_test::Writer& w) {
  for (const auto& t : stories.tensors()) {
    const float* src = reinterpret_cast<const float*>(stories.tensor_data(t));
    std::vector<float> values(src, src + t.numel());
    const bool qk =
        t.name.find("attn_q.weight") != std::string::npos || t.name.find("attn_k.weight") != std::string::npos;
    if (qk) unpermute_qk_rows(src, t.ne[1], values);
    w.tensor_f32(t.name, std::vector<uint64_t>(t.ne.begin(), t.ne.end()), values);
  }
}

// The unpermuted stories260K written as architecture arch and loaded (the file removed after).
lm::LoadedModel load_unpermuted_as(const lm::gguf::GgufFile& stories, const std::string& arch) {
  gguf_test::Writer w;
  write_metadata_as(stories, arch, w);
  write_unpermuted_tensors(stories, w);
  const std::string path =
      (fs::temp_directory_path() / ("vq_" + arch + "_" + std::to_string(::getpid()) + ".gguf")).string();
  w.write(path);
  auto loaded = lm::load(path);
  fs::remove(path);
  return loaded;
}

// qwen2 uses NEOX RoPE (pairs i, i + D/2) where GGUF llama uses adjacent pairs, because the
// HF->GGUF converter permutes llama's q/k rows (row 2i + c of a head comes from HF row
// c * D/2 + i) and leaves qwen2's alone. Undoing that permutation on stories260K's q/k rows
// and relabelling the file as qwen2 must give the same logits: q.k is unchanged when both
// sides are permuted alike, and v/o/FFN are untouched. This checks the NEOX path and the
// qwen2 loader against the llama path on real weights.
TEST(ModelForward, Qwen2NeoxLayoutEqualsLlamaNormalLayout) {
  const auto stories = lm::gguf::GgufFile::open(stories_gguf());
  const auto qwen = load_unpermuted_as(*stories, "qwen2");
  const auto llama = lm::load(stories_gguf());
  EXPECT_EQ(qwen.model->config().architecture, "qwen2");
  const std::vector<int32_t> tokens{1, 403, 407, 261, 378, 412, 300, 280};
  lm::CacheList c1 = lm::make_prompt_cache(*qwen.model), c2 = lm::make_prompt_cache(*llama.model);
  std::vector<float> a, b, all_a, all_b;
  qwen.model->forward(tokens, c1, a, &all_a);
  llama.model->forward(tokens, c2, b, &all_b);
  // Same values, summed in a different order inside each head's q.k, so K can land one f16
  // ulp (2^-11 relative) apart when cached: allow four such ulps on the largest logit.
  double max_logit = 0.0;
  for (float v : all_b) max_logit = std::max(max_logit, std::abs(double(v)));
  EXPECT_LT(max_abs_diff(all_a, all_b), 4.0 * std::ldexp(1.0, -11) * max_logit);
  // Control: the same permuted weights with llama's adjacent-pair RoPE are clearly wrong, so
  // the agreement above is the NEOX pairing's doing.
  const auto wrong = load_unpermuted_as(*stories, "llama");
  lm::CacheList c3 = lm::make_prompt_cache(*wrong.model);
  std::vector<float> c, all_c;
  wrong.model->forward(tokens, c3, c, &all_c);
  EXPECT_GT(max_abs_diff(all_c, all_b), 0.1);
}

TEST(ModelForward, LoadOptionsAreValidated) {
  lm::LoadOptions bad_threads;
  bad_threads.threads = -2;
  EXPECT_THROW(lm::load(stories_bin(), bad_threads), base::InvalidArgument);
  lm::LoadOptions bad_ctx;
  bad_ctx.context_length = 0;
  EXPECT_THROW(lm::load(stories_bin(), bad_ctx), base::InvalidArgument);
  // llama.cpp's blocks hold 32 elements of one row: stories260K's head dim 8 cannot take them.
  lm::LoadOptions bad_blocks;
  bad_blocks.kv_type = lm::KVCacheType::Q8_0;
  EXPECT_THROW(lm::load(stories_bin(), bad_blocks), base::InvalidArgument);
  EXPECT_THROW(lm::load("/nonexistent/model.gguf"), base::FormatError);
}

TEST(ModelForward, ThreadCountDoesNotChangeLogits) {
  const std::vector<int32_t> tokens{1, 403, 407, 261, 378, 412, 300};
  std::vector<float> one, many;
  for (int threads : {1, 3}) {
    lm::LoadOptions o;
    o.threads = threads;
    const auto m = lm::load(stories_gguf(), o);
    lm::CacheList caches = lm::make_prompt_cache(*m.model);
    m.model->forward(tokens, caches, threads == 1 ? one : many);
  }
  // Each output element is computed by exactly one thread in the same order: bit-identical.
  EXPECT_EQ(one, many);
}

}  // namespace
