// The generation loop's contract on a toy model whose predictions are read back out of its
// caches (tests/support/fake_model.h): make_prompt_cache honours the hook, every generate()
// call gets fresh caches, chunked prefill, stop conditions, context errors, prompt-cache
// continuation (including the trim used when everything is cached), streamed UTF-8, stats.
#include "lm/generate.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>
#include <set>

#include "base/error.h"
#include "lm/stats.h"
#include "support/fake_model.h"

namespace {

using lm::GenerateOptions;
using lm::StopReason;
using test_support::expected_greedy;
using test_support::fake_text;
using test_support::FakeModel;
using test_support::FakeTokenizer;

std::vector<int32_t> collect(const FakeModel& model, const std::vector<int32_t>& prompt, const GenerateOptions& o,
                             lm::GenerationStats* stats = nullptr, lm::PromptCache* cache = nullptr) {
  FakeTokenizer tok;
  std::vector<int32_t> out;
  const auto s = lm::stream_generate(
      model, tok, prompt, o,
      [&](const lm::GenerationChunk& c) {
        if (c.token >= 0) out.push_back(c.token);
        return true;
      },
      cache);
  if (stats) *stats = s;
  return out;
}

TEST(MakePromptCache, UsesTheHookWhenSetElseNativeCaches) {
  FakeModel model;
  auto native = lm::make_prompt_cache(model);
  ASSERT_EQ(native.size(), 2u);
  EXPECT_EQ(native[0]->type_name(), "FullKVCache");
  EXPECT_EQ(model.native_calls, 1);
  int hook_calls = 0;
  model.make_cache = [&] {
    ++hook_calls;
    return lm::CacheList{std::make_shared<lm::RotatingKVCache>(8), std::make_shared<lm::RotatingKVCache>(8)};
  };
  const auto hooked = lm::make_prompt_cache(model);
  EXPECT_EQ(hook_calls, 1);
  EXPECT_EQ(model.native_calls, 1);
  EXPECT_EQ(hooked[0]->type_name(), "RotatingKVCache");
}

TEST(Generate, GreedyMatchesIndependentReference) {
  FakeModel model;
  FakeTokenizer tok;
  GenerateOptions o;
  o.max_tokens = 20;
  const std::string text = lm::generate(model, tok, "abc", o);
  EXPECT_EQ(text, fake_text(expected_greedy({1, 3, 4, 5}, 20)));
  EXPECT_EQ(text.size(), 20u);
}

// A tokenizer that knows only the first 8 of the model's 16 ids (as a tokenizer file smaller
// than the model's vocabulary would).
class ShortTokenizer : public FakeTokenizer {
 public:
  int32_t vocab_size() const override { return 8; }
};

TEST(Generate, SamplesOnlyIdsTheTokenizerKnows) {
  FakeModel model;
  // Unrestricted greedy decoding of this prompt reaches ids >= 8 (else the test proves nothing).
  const std::vector<int32_t> free_run = expected_greedy({1, 3, 4, 5}, 30);
  ASSERT_TRUE(std::any_of(free_run.begin(), free_run.end(), [](int32_t t) { return t >= 8; }));
  ShortTokenizer tok;
  GenerateOptions o;
  o.max_tokens = 30;
  std::vector<int32_t> out;
  lm::stream_generate(model, tok, std::vector<int32_t>{1, 3, 4, 5}, o, [&](const lm::GenerationChunk& c) {
    if (c.token >= 0) out.push_back(c.token);
    return true;
  });
  ASSERT_FALSE(out.empty());
  for (int32_t t : out) EXPECT_LT(t, 8);
}

TEST(Generate, EveryCallGetsFreshCachesFromTheHook) {
  FakeModel model;
  FakeTokenizer tok;
  std::vector<lm::CacheList> made;
  model.make_cache = [&] {
    made.push_back(model.native_make_cache());
    return made.back();
  };
  GenerateOptions o;
  o.max_tokens = 12;
  const std::string first = lm::generate(model, tok, "hello", o);
  const std::string second = lm::generate(model, tok, "hello", o);
  ASSERT_EQ(made.size(), 2u);
  EXPECT_NE(made[0][0].get(), made[1][0].get());
  EXPECT_NE(made[0][1].get(), made[1][1].get());
  EXPECT_EQ(first, second);
  // Each list holds exactly its own call's tokens: 1 BOS + 5 prompt + 11 fed back.
  EXPECT_EQ(made[0][0]->offset(), 17);
  EXPECT_EQ(made[1][0]->offset(), 17);
  // A hook handing back a used list is refused (its offset disagrees with the new prompt).
  model.make_cache = [&] { return made[0]; };
  EXPECT_THROW(lm::generate(model, tok, "hello", o), base::InvalidArgument);  // offset != token count
}

TEST(Generate, ReusedCachesWouldChangeTheOutput) {
  // Guard for the test above: the toy model's text depends on what its caches hold.
  FakeModel model;
  GenerateOptions o;
  o.max_tokens = 10;
  lm::PromptCache warm{model.native_make_cache(), {}};
  collect(model, {1, 3, 4}, o, nullptr, &warm);
  const auto fresh = collect(model, {1, 3, 4}, o);
  lm::PromptCache continuing = warm;
  const auto stale = collect(model, {3, 4}, o, nullptr, &continuing);
  EXPECT_NE(fresh, stale);
}

TEST(Generate, ChunkedPrefillGivesTheSameTokens) {
  const std::vector<int32_t> prompt = {1, 3, 4, 5, 6, 7, 8, 9, 10};
  FakeModel chunked, whole;
  GenerateOptions o;
  o.max_tokens = 6;
  o.prefill_step_size = 4;
  std::vector<std::pair<int64_t, int64_t>> progress;
  o.on_prefill_progress = [&](int64_t done, int64_t total) { progress.emplace_back(done, total); };
  const auto a = collect(chunked, prompt, o);
  o.prefill_step_size = 512;
  o.on_prefill_progress = nullptr;
  const auto b = collect(whole, prompt, o);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, expected_greedy(prompt, 6));
  ASSERT_GE(chunked.forward_chunks.size(), 3u);
  EXPECT_EQ(chunked.forward_chunks[0].size(), 4u);
  EXPECT_EQ(chunked.forward_chunks[1].size(), 4u);
  EXPECT_EQ(chunked.forward_chunks[2].size(), 1u);
  // 3 prefill chunks + 5 single-token feeds (the 6th token is not fed back).
  EXPECT_EQ(chunked.forward_chunks.size(), 8u);
  EXPECT_EQ(progress, (std::vector<std::pair<int64_t, int64_t>>{{4, 9}, {8, 9}, {9, 9}}));
}

TEST(Generate, StopsOnStopTokenWithoutEmittingIt) {
  FakeModel model;
  const std::vector<int32_t> prompt = {1, 3};
  const auto reference = expected_greedy(prompt, 30);
  // Stop at the 5th token's id (the first occurrence of that id in the reference).
  const int32_t stop = reference[4];
  std::size_t first_at = 0;
  while (reference[first_at] != stop) ++first_at;
  GenerateOptions o;
  o.max_tokens = 30;
  o.extra_stop_ids = {stop};
  lm::GenerationStats stats;
  const auto got = collect(model, prompt, o, &stats);
  EXPECT_EQ(got, std::vector<int32_t>(reference.begin(), reference.begin() + static_cast<std::ptrdiff_t>(first_at)));
  EXPECT_EQ(stats.stop_reason, StopReason::kEos);
  EXPECT_EQ(stats.generation_tokens, static_cast<int64_t>(first_at) + 1);
}

TEST(Generate, StopsAtMaxTokensAndAtTheContextLimit) {
  FakeModel model(/*context_length=*/12);
  GenerateOptions o;
  o.max_tokens = 4;
  lm::GenerationStats stats;
  EXPECT_EQ(collect(model, {1, 3, 4}, o, &stats).size(), 4u);
  EXPECT_EQ(stats.stop_reason, StopReason::kMaxTokens);
  EXPECT_EQ(stats.prompt_tokens, 3);
  EXPECT_EQ(stats.generation_tokens, 4);
  o.max_tokens = 100;
  EXPECT_EQ(collect(model, {1, 3, 4}, o, &stats).size(), 9u);  // 3 + 9 = the 12-token context
  EXPECT_EQ(stats.stop_reason, StopReason::kContextLimit);
  o.context_length = 5;  // the option overrides the model's
  EXPECT_EQ(collect(model, {1, 3, 4}, o, &stats).size(), 2u);
  EXPECT_EQ(stats.stop_reason, StopReason::kContextLimit);
}

TEST(Generate, PromptLongerThanContextNamesBothNumbers) {
  FakeModel model(/*context_length=*/6);
  FakeTokenizer tok;
  try {
    lm::generate(model, tok, "abcdefgh", GenerateOptions{});
    FAIL() << "a 9-token prompt fit a 6-token context";
  } catch (const base::InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find('9'), std::string::npos) << what;
    EXPECT_NE(what.find('6'), std::string::npos) << what;
  }
}

TEST(Generate, EmptyPromptStartsFromBos) {
  FakeModel model;
  FakeTokenizer tok;
  GenerateOptions o;
  o.max_tokens = 5;
  EXPECT_EQ(lm::generate(model, tok, "", o), fake_text(expected_greedy({1}, 5)));
  EXPECT_EQ(model.forward_chunks.front(), (std::vector<int32_t>{1}));
}

TEST(Generate, ContinuesFromAPromptCache) {
  FakeModel model;
  GenerateOptions o;
  o.max_tokens = 0;
  lm::PromptCache cache{model.native_make_cache(), {}};
  collect(model, {1, 3, 4, 5}, o, nullptr, &cache);  // prefill only
  EXPECT_EQ(cache.tokens, (std::vector<int32_t>{1, 3, 4, 5}));
  EXPECT_EQ(cache.caches[0]->offset(), 4);
  // New tokens after the cached ones: as if the whole sequence had been the prompt.
  o.max_tokens = 8;
  lm::PromptCache more = cache;
  more.caches = {cache.caches[0]->clone(), cache.caches[1]->clone()};
  EXPECT_EQ(collect(model, {6, 7}, o, nullptr, &more), expected_greedy({1, 3, 4, 5, 6, 7}, 8));
  // Nothing new: the last cached token is trimmed and fed again to get its logits.
  EXPECT_EQ(collect(model, {}, o, nullptr, &cache), expected_greedy({1, 3, 4, 5}, 8));
  EXPECT_EQ(cache.caches[0]->offset(), static_cast<int64_t>(cache.tokens.size()));
}

TEST(Generate, SlidingWindowLayerUsesRotatingCacheAndItsMask) {
  // Layer 1 sees only the last 4 tokens; the reference sums the window by hand.
  FakeModel model(64, /*sliding_window=*/4);
  const std::vector<int32_t> prompt = {1, 3, 4, 5, 6, 7, 8};
  GenerateOptions o;
  o.max_tokens = 10;
  o.prefill_step_size = 3;
  const auto got = collect(model, prompt, o);
  std::vector<int32_t> seq = prompt;
  std::vector<int32_t> want;
  for (int i = 0; i < 10; ++i) {
    int64_t all = 0, window = 0;
    for (std::size_t j = 0; j < seq.size(); ++j) {
      all += seq[j];
      if (j + 4 >= seq.size()) window += seq[j];
    }
    want.push_back(test_support::fake_target(all, window, static_cast<int64_t>(seq.size()) - 1));
    seq.push_back(want.back());
  }
  EXPECT_EQ(got, want);
}

TEST(Generate, SeededSamplingIsReproducible) {
  FakeModel model;
  FakeTokenizer tok;
  GenerateOptions o;
  o.max_tokens = 40;
  o.temperature = 1.5f;
  o.seed = 5;
  const std::string a = lm::generate(model, tok, "ab", o);
  const std::string b = lm::generate(model, tok, "ab", o);
  o.seed = 6;
  const std::string c = lm::generate(model, tok, "ab", o);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  o.temperature = 0;
  EXPECT_NE(a, lm::generate(model, tok, "ab", o));
}

TEST(Generate, RejectsBadOptionsAndMismatchedCaches) {
  FakeModel model;
  FakeTokenizer tok;
  GenerateOptions o;
  o.max_tokens = -1;
  EXPECT_THROW(lm::generate(model, tok, "a", o), base::InvalidArgument);
  o = {};
  o.prefill_step_size = 0;
  EXPECT_THROW(lm::generate(model, tok, "a", o), base::InvalidArgument);
  o = {};
  o.top_p = 0;
  EXPECT_THROW(lm::generate(model, tok, "a", o), base::InvalidArgument);
  model.make_cache = [] { return lm::CacheList{std::make_shared<lm::FullKVCache>()}; };
  try {
    lm::generate(model, tok, "a", GenerateOptions{});
    FAIL() << "one cache accepted for two layers";
  } catch (const base::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("1 caches for a model of 2 layers"), std::string::npos) << e.what();
  }
}

TEST(Utf8Stream, HoldsBackPartialCharacters) {
  lm::Utf8Stream s;
  EXPECT_EQ(s.push("a\xC3"), "a");
  EXPECT_EQ(s.push("\xA9"), "\xC3\xA9");
  EXPECT_EQ(s.push("\xE2\x82"), "");
  EXPECT_EQ(s.push("\xAC!"), "\xE2\x82\xAC!");
  EXPECT_EQ(s.push("\xF0\x9F"), "");
  EXPECT_EQ(s.flush(), "\xF0\x9F");
  EXPECT_EQ(s.push("\x80\x80"), "\x80\x80");  // stray continuation bytes pass through
}

TEST(GenerationStats, KvBytesAndPeakRss) {
  FakeModel model;
  lm::CacheList captured;
  model.make_cache = [&] {
    captured = model.native_make_cache();
    return captured;
  };
  GenerateOptions o;
  o.max_tokens = 10;
  lm::GenerationStats stats;
  collect(model, {1, 3, 4}, o, &stats);
  // Two f32 full caches of 256 rows x 4 dims, keys + values.
  EXPECT_EQ(stats.kv_bytes_resident, 2u * 2u * 256u * 4u * 4u);
  EXPECT_EQ(stats.kv_bytes_resident, captured[0]->nbytes() + captured[1]->nbytes());
  EXPECT_GT(stats.peak_rss_bytes, 0u);
  EXPECT_GE(stats.peak_rss_bytes, lm::current_rss_bytes() / 2);  // VmHWM >= VmRSS at any time
  EXPECT_GE(lm::peak_rss_bytes(), lm::current_rss_bytes());
}

TEST(GenerationStats, ParsesProcStatusAndFormatsBytes) {
  const std::string status = "Name:\tvq\nVmPeak:\t  9000 kB\nVmHWM:\t    1536 kB\nVmRSS:\t 1024 kB\n";
  EXPECT_EQ(lm::parse_status_kib_field(status, "VmHWM"), 1536u * 1024u);
  EXPECT_EQ(lm::parse_status_kib_field(status, "VmRSS"), 1024u * 1024u);
  EXPECT_EQ(lm::parse_status_kib_field(status, "VmSwap"), 0u);
  EXPECT_EQ(lm::parse_status_kib_field("XVmHWM: 5 kB\n", "VmHWM"), 0u);
  EXPECT_EQ(lm::format_bytes(512), "512 B");
  EXPECT_EQ(lm::format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(lm::format_bytes(3u * 1024u * 1024u + 262144u), "3.25 MiB");
  EXPECT_EQ(lm::stop_reason_name(StopReason::kContextLimit), "context_limit");
}

}  // namespace

namespace {

TEST(Generate, ReportsThePromptStateBeforeDecoding) {
  FakeModel model;
  GenerateOptions o;
  o.max_tokens = 5;
  int calls = 0;
  o.on_prompt_processed = [&](const lm::PromptCache& state) {
    ++calls;
    EXPECT_EQ(state.tokens, (std::vector<int32_t>{1, 3, 4}));
    EXPECT_EQ(state.caches.at(0)->offset(), 3);
    EXPECT_EQ(model.forward_chunks.size(), 1u);  // nothing decoded yet
  };
  collect(model, {1, 3, 4}, o);
  EXPECT_EQ(calls, 1);
}

}  // namespace

// The contract on a real model (stories260K GGUF): the hook is called once per generate(),
// each call gets distinct caches, and the text does not depend on earlier calls.
#include "lm/load.h"

namespace {

TEST(GenerateRealModel, FreshCachesPerCallOnStories260K) {
  const std::string dir = std::string(VQ_SHARED_DIR) + "/models/stories260K/";
  const lm::LoadedModel loaded = lm::load(dir + "stories260K.gguf");
  lm::Model& model = *loaded.model;
  std::vector<lm::CacheList> made;
  model.make_cache = [&] {
    made.push_back(model.native_make_cache());
    return made.back();
  };
  GenerateOptions o;
  o.max_tokens = 30;
  const std::string a = lm::generate(model, *loaded.tokenizer, "Once upon a time", o);
  const std::string b = lm::generate(model, *loaded.tokenizer, "Once upon a time", o);
  const std::string c = lm::generate(model, *loaded.tokenizer, "The cat", o);
  const std::string a2 = lm::generate(model, *loaded.tokenizer, "Once upon a time", o);
  ASSERT_EQ(made.size(), 4u);
  for (std::size_t i = 0; i < made.size(); ++i)
    for (std::size_t j = i + 1; j < made.size(); ++j) EXPECT_NE(made[i][0].get(), made[j][0].get());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, a2);
  EXPECT_NE(a, c);
  EXPECT_EQ(model.layers().size(), made[0].size());
  // Prompt (BOS + tokens) plus 29 fed-back tokens in the first call's caches.
  const auto prompt_tokens = loaded.tokenizer->encode("Once upon a time", true);
  EXPECT_EQ(made[0][0]->offset(), static_cast<int64_t>(prompt_tokens.size()) + 29);
}

}  // namespace

// SmolLM2 (byte-level BPE): Japanese output spells characters across several byte tokens.
// Every streamed chunk must be whole UTF-8 characters, and together they must equal the
// tokenizer's decoding of the generated ids.
namespace {

bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

TEST(GenerateRealModel, SmolLM2StreamsWholeUtf8Characters) {
  const std::string path = std::string(VQ_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " absent (scripts/fetch_models.sh fetches it)";
  const lm::LoadedModel loaded = lm::load(path);
  const lm::Tokenizer& tok = *loaded.tokenizer;
  const std::string prompt = tok.apply_chat_template({{"user", "Say hello in Japanese."}});
  GenerateOptions o;
  o.max_tokens = 30;
  std::vector<int32_t> ids;
  std::string streamed;
  int held_back = 0;
  lm::stream_generate(*loaded.model, tok, prompt, o, [&](const lm::GenerationChunk& c) {
    EXPECT_TRUE(valid_utf8(c.text)) << "chunk " << c.index << " is not whole UTF-8";
    if (c.token >= 0) ids.push_back(c.token);
    if (c.text.empty()) ++held_back;
    streamed += c.text;
    return true;
  });
  ASSERT_FALSE(ids.empty());
  std::string decoded;
  const std::vector<int32_t> prompt_ids = tok.encode(prompt, true);
  int32_t previous = prompt_ids.back();
  for (int32_t id : ids) {
    decoded += tok.decode_token(previous, id);
    previous = id;
  }
  EXPECT_EQ(streamed, decoded);
  EXPECT_TRUE(valid_utf8(streamed));
  EXPECT_GT(held_back, 0) << "no token ended inside a character: the prompt no longer exercises the holdback";
}

}  // namespace
