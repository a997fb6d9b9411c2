// The pieces of `veloxquant serve` that need no socket: request validation (every bad field
// named), the `veloxquant` cache field, stop sequences across token boundaries, the prefix
// pool's bounds and reuse rules on a real model's caches, and the /metrics text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "apps/serve/metrics_text.h"
#include "apps/serve/openai_request.h"
#include "apps/serve/prefix_cache_pool.h"
#include "apps/serve/stop_sequences.h"
#include "lm/generate.h"
#include "lm/load.h"
#include "lm/stats.h"

namespace {

using apps::serve::ApiError;
using apps::serve::parse_completion_request;
using apps::serve::RequestLimits;
using nlohmann::json;

std::string error_of(const std::string& body, bool chat = false, RequestLimits limits = {}) {
  try {
    parse_completion_request(body, chat, limits);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    return e.what();
  }
  return "(accepted)";
}

TEST(ServeRequest, ParsesOpenAiFields) {
  const auto r = parse_completion_request(
      R"({"model": "m", "prompt": "hi", "max_tokens": 5, "temperature": 0.5, "top_p": 0.9, "seed": 7,
          "stop": ["\n", "END"], "stream": true, "stream_options": {"include_usage": true},
          "presence_penalty": 0, "n": 1, "logprobs": null})",
      false, {});
  EXPECT_EQ(r.prompt, "hi");
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_FLOAT_EQ(r.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.top_p, 0.9f);
  EXPECT_EQ(r.seed, 7u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_FALSE(r.cache);
  const auto chat = parse_completion_request(
      R"({"messages": [{"role": "developer", "content": "be brief"},
                       {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
          "max_completion_tokens": 3, "stop": "x"})",
      true, {});
  ASSERT_EQ(chat.messages.size(), 2u);
  EXPECT_EQ(chat.messages[0].role, "system");
  EXPECT_EQ(chat.messages[1].content, "ab");
  EXPECT_EQ(chat.max_tokens, 3);
  EXPECT_EQ(chat.stop, std::vector<std::string>{"x"});
  EXPECT_FLOAT_EQ(chat.temperature, 1.0f);  // OpenAI's default
}

TEST(ServeRequest, NamesEveryBadField) {
  EXPECT_NE(error_of("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("\"text\"").find("must be a JSON object, got a string"), std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": ["a", "b"]})").find("batches of prompts"), std::string::npos);
  EXPECT_NE(
      error_of(R"({"prompt": "a", "max_tokens": 1.5})").find("'max_tokens' must be an integer, got a number (1.5)"),
      std::string::npos);
  RequestLimits small;
  small.context_length = 100;
  EXPECT_NE(
      error_of(R"({"prompt": "a", "max_tokens": 101})", false, small).find("'max_tokens' must be in [0, 100], got 101"),
      std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "a", "top_p": 0})").find("'top_p' must be in (0, 1]"), std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "a", "stop": ""})").find("must not be empty"), std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "a", "stream_options": {"include_usage": true}})").find("only allowed with"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "a", "frequency_penalty": 0.5})").find("'frequency_penalty' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "a", "logprobs": 3})").find("'logprobs' is not supported"), std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "user"}]})", true).find("'messages[0].content' is required"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", true)
                .find("content part type 'image_url' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "a", "veloxquant": {"bits": "four"}})").find("'veloxquant.bits' must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"prompt": "a", "veloxquant": {"set": {"x": {"y": 1}}}})").find("'veloxquant.set.x' must be"),
            std::string::npos);
}

TEST(ServeRequest, BytesThatAreNotUtf8NeverThrowOnTheWire) {
  EXPECT_NE(error_of("{\"prompt\": \"\xff\"}").find("not valid JSON"), std::string::npos);
  // A model may emit a lone byte token: the answer's JSON carries U+FFFD instead of throwing.
  EXPECT_EQ(apps::serve::dump_json(json("a\xff")), "\"a\xEF\xBF\xBD\"");
  // A long value cut in the middle of a character inside an error message.
  const std::string message = error_of("{\"prompt\": \"a\", \"max_tokens\": \"" + std::string(40, 'x') +
                                       "\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\u00e9\"}");
  EXPECT_NO_THROW(apps::serve::error_body(ApiError(400, message)));
}

TEST(ServeRequest, CacheFieldBecomesTheCliFlags) {
  const apps::KvMethodFlags f = apps::serve::parse_cache_choice(json::parse(
      R"({"method": "turboquant_rvq", "bits": [2, 3], "seed": 5, "set": {"rvq_value_bits": 4, "flag": true}})"));
  EXPECT_EQ(f.method, "turboquant_rvq");
  EXPECT_EQ(f.bits, "2,3");
  EXPECT_EQ(f.seed, 5);
  EXPECT_EQ(f.sets, (std::vector<std::string>{"flag=true", "rvq_value_bits=4"}));
  const apps::KvMethodFlags p = apps::serve::parse_cache_choice(json::parse(R"({"preset": "q4"})"));
  EXPECT_EQ(p.preset, "q4");
  EXPECT_EQ(p.method, "none");
}

TEST(ServeRequest, ErrorBodyHasOpenAisShape) {
  const json body = json::parse(apps::serve::error_body(ApiError(400, "bad 'x'", "x")));
  EXPECT_EQ(body["error"]["message"], "bad 'x'");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
  EXPECT_EQ(body["error"]["param"], "x");
  EXPECT_EQ(body["error"]["code"], 400);
}

TEST(StopMatcher, HoldsBackWhatMayBecomeAStopSequence) {
  apps::serve::StopMatcher m({"END", "\n\n"});
  EXPECT_EQ(m.push("hello E"), "hello ");  // "E" may start END
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("X more"), "ENX more");  // it did not
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.push(" then\n"), " then");
  EXPECT_EQ(m.push("\nafter"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.push("ignored"), "");
  EXPECT_EQ(m.flush(), "");

  apps::serve::StopMatcher tail({"END"});
  EXPECT_EQ(tail.push("the EN"), "the ");
  EXPECT_EQ(tail.flush(), "EN");  // generation ended: what was held back goes out
  apps::serve::StopMatcher none({});
  EXPECT_EQ(none.push("abc"), "abc");
  apps::serve::StopMatcher first({"b", "abc"});
  EXPECT_EQ(first.push("xabc"), "x");  // the earliest stop wins ("abc" at 1, before "b" at 2)
}

class PrefixPool : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    loaded_ = lm::load(std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf");
  }
  static void TearDownTestSuite() { loaded_ = {}; }
  // Caches holding `prompt` plus `generate` greedy tokens.
  lm::PromptCache run(const std::vector<int32_t>& prompt, int generate) {
    lm::PromptCache state;
    state.caches = loaded_.model->native_make_cache();
    lm::GenerateOptions o;
    o.max_tokens = generate;
    lm::stream_generate(*loaded_.model, *loaded_.tokenizer, prompt, o, nullptr, &state);
    return state;
  }
  static lm::LoadedModel loaded_;
};
lm::LoadedModel PrefixPool::loaded_;

TEST_F(PrefixPool, TakesTheLongestSharedPrefixAndTrimsToIt) {
  const std::vector<int32_t> prompt = loaded_.tokenizer->encode("Once upon a time there was a cat", true);
  apps::serve::PrefixCachePool pool(4, std::size_t{64} << 20);
  lm::PromptCache state = run(prompt, 6);
  const std::vector<int32_t> held = state.tokens;
  ASSERT_EQ(held.size(), prompt.size() + 5);  // the last sampled token is never fed
  pool.put("k", std::move(state));
  EXPECT_EQ(pool.counters().entries, 1u);
  EXPECT_GT(pool.counters().bytes, 0u);

  EXPECT_FALSE(pool.take("other", held));  // another configuration: miss
  // A new prompt that shares the prompt and 2 generated tokens, then differs.
  std::vector<int32_t> next(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(prompt.size() + 2));
  next.push_back(held[prompt.size() + 2] == 5 ? 6 : 5);
  std::optional<lm::PromptCache> hit = pool.take("k", next);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->tokens.size(), prompt.size() + 2);
  EXPECT_EQ(hit->caches.front()->offset(), static_cast<int64_t>(prompt.size() + 2));
  EXPECT_EQ(pool.counters().entries, 0u);  // moved out: no two requests share a cache
  EXPECT_EQ(pool.counters().bytes, 0u);
  EXPECT_EQ(pool.counters().hits, 1u);
  EXPECT_EQ(pool.counters().misses, 1u);
  EXPECT_EQ(pool.counters().tokens_reused, prompt.size() + 2);
}

TEST_F(PrefixPool, StaysWithinEntriesAndBytes) {
  const std::vector<int32_t> prompt = loaded_.tokenizer->encode("Tom had a dog", true);
  lm::PromptCache probe = run(prompt, 4);
  const std::size_t one = lm::kv_bytes_resident(probe.caches);
  apps::serve::PrefixCachePool by_entries(2, std::size_t{1} << 30);
  for (const char* key : {"k0", "k1", "k2", "k3", "k4"}) by_entries.put(key, run(prompt, 4));
  EXPECT_EQ(by_entries.counters().entries, 2u);
  EXPECT_TRUE(by_entries.take("k4", prompt));   // the newest stay
  EXPECT_FALSE(by_entries.take("k0", prompt));  // the oldest left first
  apps::serve::PrefixCachePool by_bytes(100, one * 3 / 2);
  by_bytes.put("a", run(prompt, 4));
  by_bytes.put("b", run(prompt, 4));
  EXPECT_EQ(by_bytes.counters().entries, 1u);
  EXPECT_LE(by_bytes.counters().bytes, one * 3 / 2);
  apps::serve::PrefixCachePool off(0, 0);
  off.put("a", run(prompt, 4));
  EXPECT_EQ(off.counters().entries, 0u);
}

TEST(ServeMetrics, PrometheusText) {
  apps::serve::EngineSnapshot e;
  e.slots.resize(2);
  e.slots[1].busy = true;
  e.slots[1].method = "kivi";
  e.slots[1].kv_bytes = 1000;
  e.prefix.bytes = 24;
  e.queue_depth = 3;
  apps::serve::RequestCounters counters;
  counters.count("/v1/completions", 200);
  counters.count("/v1/completions", 200);
  const std::string text = apps::serve::render_metrics(e, counters.snapshot());
  EXPECT_NE(text.find("veloxquant_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("veloxquant_slot_kv_bytes{slot=\"1\",method=\"kivi\"} 1000\n"), std::string::npos);
  EXPECT_NE(text.find("veloxquant_kv_bytes_resident 1024\n"), std::string::npos);
  EXPECT_NE(text.find("veloxquant_queue_depth 3\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE veloxquant_slot_busy gauge\n"), std::string::npos);
}

}  // namespace
