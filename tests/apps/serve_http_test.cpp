// `veloxquant serve` end to end: the server runs as a child process on a free loopback port and
// the tests speak HTTP to it over sockets, as any client does. Greedy answers must equal
// `veloxquant generate` token for token with the same cache; bad requests get a 4xx JSON error
// and the server keeps serving; a client that leaves frees its slot; prefix reuse skips the
// history; 64 concurrent streaming clients all get their own whole answers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "support/cli_run.h"
#include "support/server_process.h"

namespace {

using nlohmann::json;
using test_support::http_request;
using test_support::HttpResponse;
using test_support::metric_value;
using test_support::ServerProcess;
using test_support::sse_events;

const std::string kStories = std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
const std::string kSmolLM2 = std::string(VQ_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";

std::string strip_newline(std::string text) {
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

json post_json(int port, const std::string& path, const json& body, int* status = nullptr) {
  const HttpResponse r = http_request(port, "POST", path, body.dump());
  if (status) *status = r.status;
  return r.body.empty() ? json() : json::parse(r.body, nullptr, false);
}

// The text of a streamed answer (chat deltas or completion text) and its finish reason.
struct Streamed {
  std::string text;
  std::string finish_reason;
  json usage;
  bool done = false;
};

Streamed read_stream(const std::string& body, bool chat) {
  Streamed s;
  for (const json& e : sse_events(body)) {
    if (e.is_string()) {
      s.done = e == "[DONE]";
      continue;
    }
    if (e.contains("usage") && !e["usage"].is_null()) s.usage = e["usage"];
    if (e.at("choices").empty()) continue;
    const json& c = e["choices"][0];
    if (chat && c["delta"].contains("content")) s.text += c["delta"]["content"].get<std::string>();
    if (!chat) s.text += c["text"].get<std::string>();
    if (!c["finish_reason"].is_null()) s.finish_reason = c["finish_reason"];
  }
  return s;
}

json chat_body(const std::string& prompt, int max_tokens, bool stream = false) {
  return {{"messages", {{{"role", "user"}, {"content", prompt}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"stream", stream}};
}

TEST(ServeHttp, ReadyLineModelsAndHealth) {
  ServerProcess server({"-m", kStories, "--method", "kivi", "--bits", "4"});
  ASSERT_TRUE(server.ready()) << server.stderr_text();
  const json& ready = server.ready_info();
  EXPECT_EQ(ready.at("schema_version"), 1);
  EXPECT_EQ(ready.at("model"), "stories260K");
  EXPECT_EQ(ready.at("method"), "kivi");
  EXPECT_EQ(ready.at("bits"), 4);
  EXPECT_EQ(ready.at("host"), "127.0.0.1");
  EXPECT_EQ(ready.at("port"), server.port());
  EXPECT_EQ(ready.at("layer_caches"), 5);
  EXPECT_NE(std::find(ready.at("endpoints").begin(), ready.at("endpoints").end(), "/v1/chat/completions"),
            ready.at("endpoints").end());

  const HttpResponse models = http_request(server.port(), "GET", "/v1/models");
  ASSERT_EQ(models.status, 200) << models.body;
  const json m = json::parse(models.body);
  EXPECT_EQ(m.at("object"), "list");
  ASSERT_EQ(m.at("data").size(), 1u);
  EXPECT_EQ(m["data"][0].at("id"), "stories260K");
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 200);
  const HttpResponse page = http_request(server.port(), "GET", "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("/v1/chat/completions"), std::string::npos);
}

// /v1/completions, JSON and SSE, equals `veloxquant generate` with the same cache, greedy.
TEST(ServeHttp, CompletionEqualsGenerateTokenForToken) {
  for (const std::string cache : {"--method none", "--method kivi --bits 2", "--preset q4"}) {
    const test_support::CliResult cli = test_support::run_cli(
        std::string("generate -m ").append(kStories).append(" -p 'Once upon a time' -n 40 ").append(cache));
    ASSERT_EQ(cli.exit_code, 0) << cli.err;
    const std::string expected = strip_newline(cli.out);
    ASSERT_GT(expected.size(), 20u);

    std::vector<std::string> args = {"-m", kStories, "--prompt-cache-entries", "0"};
    std::istringstream words(cache);
    for (std::string w; words >> w;) args.push_back(w);
    ServerProcess server(args);
    ASSERT_TRUE(server.ready()) << server.stderr_text();
    int status = 0;
    const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}};
    const json r = post_json(server.port(), "/v1/completions", body, &status);
    ASSERT_EQ(status, 200) << r.dump();
    EXPECT_EQ(r.at("object"), "text_completion");
    EXPECT_EQ(r["choices"][0].at("text"), expected) << cache;
    EXPECT_EQ(r["choices"][0].at("finish_reason"), "length");
    EXPECT_EQ(r["usage"].at("completion_tokens"), 40);

    json streamed_body = body;
    streamed_body["stream"] = true;
    const HttpResponse sse = http_request(server.port(), "POST", "/v1/completions", streamed_body.dump());
    ASSERT_EQ(sse.status, 200);
    EXPECT_NE(sse.headers.find("text/event-stream"), std::string::npos);
    const Streamed s = read_stream(sse.body, false);
    EXPECT_TRUE(s.done);
    EXPECT_EQ(s.text, expected) << cache;
    EXPECT_EQ(s.finish_reason, "length");
  }
}

// The same through the request's `veloxquant` field on a server whose own cache differs.
TEST(ServeHttp, PerRequestCacheEqualsGenerate) {
  const test_support::CliResult cli = test_support::run_cli(
      "generate -m " + kStories + " -p 'The dog' -n 30 --method turboquant_rvq --bits 3 --set rvq_value_bits=4");
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  ServerProcess server({"-m", kStories, "--prompt-cache-entries", "0"});
  ASSERT_TRUE(server.ready()) << server.stderr_text();
  int status = 0;
  const json r =
      post_json(server.port(), "/v1/completions",
                {{"prompt", "The dog"},
                 {"max_tokens", 30},
                 {"temperature", 0},
                 {"veloxquant", {{"method", "turboquant_rvq"}, {"bits", 3}, {"set", {{"rvq_value_bits", 4}}}}}},
                &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["text"], strip_newline(cli.out));
  EXPECT_EQ(r["veloxquant"]["method"], "turboquant_rvq");
  EXPECT_GT(r["veloxquant"]["kv_bytes"].get<int64_t>(), 0);
}

// Chat through the model's template, as `generate --chat` builds it (SmolLM2: ChatML).
TEST(ServeHttp, ChatEqualsGenerateChat) {
  if (!std::filesystem::exists(kSmolLM2)) GTEST_SKIP() << kSmolLM2 << " is not here (scripts/fetch_models.sh)";
  const std::string prompt = "What is the capital of France? Answer in one sentence.";
  const test_support::CliResult cli =
      test_support::run_cli("generate -m " + kSmolLM2 + " --chat -p '" + prompt + "' -n 24 --preset q4");
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  ServerProcess server({"-m", kSmolLM2, "--preset", "q4", "--prompt-cache-entries", "0"});
  ASSERT_TRUE(server.ready()) << server.stderr_text();
  int status = 0;
  const json r = post_json(server.port(), "/v1/chat/completions", chat_body(prompt, 24), &status);
  ASSERT_EQ(status, 200) << r.dump();
  EXPECT_EQ(r.at("object"), "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], strip_newline(cli.out));

  json streamed = chat_body(prompt, 24, true);
  streamed["stream_options"] = {{"include_usage", true}};
  const HttpResponse sse = http_request(server.port(), "POST", "/v1/chat/completions", streamed.dump());
  ASSERT_EQ(sse.status, 200);
  const std::vector<json> events = sse_events(sse.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events.back(), "[DONE]");
  const json& usage_event = events[events.size() - 2];  // include_usage: choices [] and the usage
  EXPECT_TRUE(usage_event.at("choices").empty());
  EXPECT_EQ(usage_event["usage"]["prompt_tokens"], r["usage"]["prompt_tokens"]);
  for (std::size_t i = 0; i + 2 < events.size(); ++i) EXPECT_TRUE(events[i].at("usage").is_null()) << i;
  const Streamed s = read_stream(sse.body, true);
  EXPECT_EQ(s.text, strip_newline(cli.out));
}

TEST(ServeHttp, StopSequenceCutsTheAnswer) {
  ServerProcess server({"-m", kStories, "--prompt-cache-entries", "0"});
  ASSERT_TRUE(server.ready()) << server.stderr_text();
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}};
  const std::string full = post_json(server.port(), "/v1/completions", base)["choices"][0]["text"];
  ASSERT_GT(full.size(), 30u);
  const std::string stop = full.substr(20, 4);
  json with_stop = base;
  with_stop["stop"] = {stop};
  const json r = post_json(server.port(), "/v1/completions", with_stop);
  EXPECT_EQ(r["choices"][0]["text"], full.substr(0, full.find(stop)));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  with_stop["stream"] = true;
  const Streamed s = read_stream(http_request(server.port(), "POST", "/v1/completions", with_stop.dump()).body, false);
  EXPECT_EQ(s.text, full.substr(0, full.find(stop)));
  EXPECT_EQ(s.finish_reason, "stop");
}

TEST(ServeHttp, BadRequestsGetClearErrorsAndTheServerKeepsServing) {
  ServerProcess server({"-m", kStories, "--ctx", "64", "--max-body-mib", "1", "--read-timeout", "1"});
  ASSERT_TRUE(server.ready()) << server.stderr_text();
  const int port = server.port();
  struct Case {
    std::string path, body;
    int status;
    std::string message;
  };
  const std::string long_prompt(2000, 'a');
  const std::vector<Case> cases = {
      {"/v1/completions", "{\"prompt\": ", 400, "not valid JSON"},
      {"/v1/completions", "[1, 2]", 400, "must be a JSON object"},
      {"/v1/completions", R"({"max_tokens": 4})", 400, "'prompt' is required"},
      {"/v1/completions", R"({"prompt": 5})", 400, "'prompt' must be a string"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": "ten"})", 400, "'max_tokens' must be an integer"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": 1000000000})", 400, "'max_tokens' must be in [0, 64]"},
      {"/v1/completions", R"({"prompt": "hi", "max_tokens": -1})", 400, "'max_tokens' must be in [0, 64]"},
      {"/v1/completions", R"({"prompt": "hi", "temperature": 9})", 400, "'temperature' must be in"},
      {"/v1/completions", R"({"prompt": "hi", "stream": "yes"})", 400, "'stream' must be true or false"},
      {"/v1/completions", R"({"prompt": "hi", "stop": [1]})", 400, "'stop[0]' must be a string"},
      {"/v1/completions", R"({"prompt": "hi", "n": 3})", 400, "'n' must be 1"},
      {"/v1/completions", R"({"prompt": "hi", "veloxquant": {"method": "nope"}})", 400, "unknown method 'nope'"},
      {"/v1/completions", R"({"prompt": "hi", "veloxquant": {"preset": "q6"}})", 400, "unknown preset 'q6'"},
      {"/v1/completions", R"({"prompt": "hi", "veloxquant": {"method": "kivi", "bits": 99}})", 400,
       "'veloxquant.bits' must be in"},
      {"/v1/completions", R"({"prompt": "hi", "veloxquant": {"method": "kivi", "bits": [2, 3]}})", 400,
       "attention layers"},
      {"/v1/completions", R"({"prompt": "hi", "veloxquant": {"method": "turboquant_prod"}})", 400, "standalone"},
      {"/v1/completions", R"({"prompt": "hi", "veloxquant": {"colour": 1}})", 400, "unknown field 'veloxquant.colour'"},
      {"/v1/completions", "{\"prompt\": \"" + long_prompt + "\"}", 400, "the context holds 64 tokens"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "at least one message"},
      {"/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})", 400, "must be system"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}]})", 400, "chat template"},
      {"/v1/nothing", "{}", 404, "no route"},
  };
  for (const Case& c : cases) {
    const HttpResponse r = http_request(port, "POST", c.path, c.body);
    EXPECT_EQ(r.status, c.status) << c.body << " -> " << r.body;
    const json error = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(error.is_object() && error.contains("error")) << c.body << " -> " << r.body;
    EXPECT_NE(error["error"]["message"].get<std::string>().find(c.message), std::string::npos)
        << c.body << " -> " << r.body;
  }
  // An oversized body (limit 1 MiB) is refused before it is read.
  const std::string huge = "{\"prompt\": \"" + std::string(2 << 20, 'a') + "\"}";
  const HttpResponse big = http_request(port, "POST", "/v1/completions", huge);
  EXPECT_EQ(big.status, 413) << big.body.substr(0, 200);

  // Slow loris: a request whose headers never end is dropped after --read-timeout, and the
  // server answers others meanwhile.
  const int slow = test_support::connect_loopback(port, 10);
  ASSERT_GE(slow, 0);
  ASSERT_TRUE(test_support::send_all(slow, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: "));
  EXPECT_EQ(http_request(port, "GET", "/health").status, 200);
  const auto start = std::chrono::steady_clock::now();
  char buffer[512];
  while (::recv(slow, buffer, sizeof(buffer), 0) > 0) {
  }
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(waited, 8.0) << "the half-sent request held its connection";
  ::close(slow);

  EXPECT_TRUE(server.alive());
  int status = 0;
  const json ok =
      post_json(port, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 8}, {"temperature", 0}}, &status);
  EXPECT_EQ(status, 200) << ok.dump();
  const std::string metrics = http_request(port, "GET", "/metrics").body;
  EXPECT_EQ(metric_value(metrics, "veloxquant_requests_total{endpoint=\"/v1/completions\",status=\"413\"}"), 1);
}

TEST(ServeHttp, ApiKeyGuardsTheApi) {
  ServerProcess server({"-m", kStories, "--api-key", "sesame"});
  ASSERT_TRUE(server.ready()) << server.stderr_text();
  const HttpResponse refused = http_request(server.port(), "GET", "/v1/models");
  EXPECT_EQ(refused.status, 401);
  EXPECT_NE(refused.body.find("API key"), std::string::npos);
  EXPECT_EQ(http_request(server.port(), "GET", "/v1/models", "", "Authorization: Bearer wrong\r\n").status, 401);
  EXPECT_EQ(http_request(server.port(), "GET", "/v1/models", "", "Authorization: Bearer sesame\r\n").status, 200);
  EXPECT_EQ(http_request(server.port(), "GET", "/metrics").status, 401);
  EXPECT_EQ(http_request(server.port(), "GET", "/health").status, 200);
}

TEST(ServeHttp, WarnsWhenReachableFromOutsideWithoutAKey) {
  ServerProcess open({"-m", kStories, "--host", "0.0.0.0"});
  ASSERT_TRUE(open.ready()) << open.stderr_text();
  EXPECT_NE(open.stderr_text().find("serving on 0.0.0.0 without --api-key"), std::string::npos) << open.stderr_text();
  ServerProcess local({"-m", kStories});
  ASSERT_TRUE(local.ready()) << local.stderr_text();
  EXPECT_EQ(local.stderr_text().find("without --api-key"), std::string::npos) << local.stderr_text();
}

// SIGTERM right after the ready line (before the accept loop may have started) still stops it,
// with exit code 0.
TEST(ServeHttp, StopsOnSigtermRightAfterReady) {
  for (int i = 0; i < 3; ++i) {
    ServerProcess server({"-m", kStories});
    ASSERT_TRUE(server.ready()) << server.stderr_text();
    EXPECT_EQ(server.stop(), 0) << "wait status (-2: it ignored SIGTERM and was killed)";
  }
}

// Every thread of the server but the waiter, the shared pool's workers included, blocks SIGINT
// and SIGTERM, so the signal reaches the waiter and the server stops cleanly. With --threads the
// pool was started before the mask was set: its worker took SIGTERM with the default action
// (status 143), found running `serve --threads 2` under ThreadSanitizer on 2026-12-06.
TEST(ServeHttp, EveryThreadButTheWaiterBlocksTheStopSignals) {
  ServerProcess server({"-m", kStories, "--threads", "2", "--parallel", "2"});
  ASSERT_TRUE(server.ready()) << server.stderr_text();
  // A completion first, so that threads started on first use exist too.
  const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}};
  ASSERT_EQ(http_request(server.port(), "POST", "/v1/completions", body.dump()).status, 200);
  const unsigned long long stop_mask = (1ull << (SIGINT - 1)) | (1ull << (SIGTERM - 1));
  int threads = 0;
  std::vector<std::string> open;  // threads that would take a stop signal
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(server.pid()) + "/task")) {
    const std::string status = test_support::read_file_text(task.path().string() + "/status");
    const std::size_t at = status.find("SigBlk:");
    ASSERT_NE(at, std::string::npos) << status;
    const unsigned long long blocked = std::stoull(status.substr(at + 7), nullptr, 16);
    if ((blocked & stop_mask) != stop_mask) open.push_back(task.path().filename().string());
    ++threads;
  }
  EXPECT_GE(threads, 5);  // main, waiter, pool worker, 2 slots, HTTP threads
  // The waiter, inside sigwait(): the kernel unblocks the awaited signals for the wait.
  EXPECT_EQ(open.size(), 1u) << "threads with SIGINT/SIGTERM unblocked: " << testing::PrintToString(open);
  EXPECT_EQ(server.stop(), 0) << "wait status (15: SIGTERM killed it; -2: it ignored SIGTERM)";
}

TEST(ServeHttp, BadFlagsFailBeforeLoading) {
  const test_support::CliResult method = test_support::run_cli("serve -m /nonexistent.gguf --method nope");
  EXPECT_EQ(method.exit_code, 2);
  EXPECT_NE(method.err.find("unknown method 'nope'"), std::string::npos) << method.err;
  const test_support::CliResult port = test_support::run_cli("serve -m /nonexistent.gguf --port 70000");
  EXPECT_EQ(port.exit_code, 2);
  EXPECT_NE(port.err.find("--port must be in [0, 65535]"), std::string::npos) << port.err;
  const test_support::CliResult missing = test_support::run_cli("serve -m /nonexistent.gguf");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("/nonexistent.gguf"), std::string::npos) << missing.err;
}

// A multi-turn conversation continues from the cached history instead of prefilling it again.
TEST(ServeHttp, PrefixReuseSkipsTheHistory) {
  ServerProcess server({"-m", kStories, "--method", "kivi", "--bits", "4"});
  ASSERT_TRUE(server.ready()) << server.stderr_text();
  const int port = server.port();
  const json first =
      post_json(port, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}});
  EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const std::string history = "Once upon a time" + first["choices"][0]["text"].get<std::string>() + " Then";
  const json second = post_json(port, "/v1/completions", {{"prompt", history}, {"max_tokens", 8}, {"temperature", 0}});
  const int64_t prompt_tokens = second["usage"]["prompt_tokens"];
  const int64_t cached = second["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(cached, first["usage"]["prompt_tokens"].get<int64_t>()) << second.dump();
  EXPECT_LT(cached, prompt_tokens);
  // Another cache configuration never reuses these caches.
  const json other =
      post_json(port, "/v1/completions",
                {{"prompt", history}, {"max_tokens", 4}, {"temperature", 0}, {"veloxquant", {{"method", "none"}}}});
  EXPECT_EQ(other["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  const std::string metrics = http_request(port, "GET", "/metrics").body;
  EXPECT_EQ(metric_value(metrics, "veloxquant_prompt_cache_hits_total"), 1);
  EXPECT_EQ(metric_value(metrics, "veloxquant_prompt_cache_misses_total"), 2);
  EXPECT_GT(metric_value(metrics, "veloxquant_prompt_cache_bytes"), 0);
}

// A client that hangs up mid-stream frees its slot at once; the next request is served.
TEST(ServeHttp, ClientDisconnectFreesTheSlot) {
  if (!std::filesystem::exists(kSmolLM2)) GTEST_SKIP() << kSmolLM2 << " is not here (scripts/fetch_models.sh)";
  ServerProcess server({"-m", kSmolLM2, "--parallel", "1", "--ctx", "2048"});
  ASSERT_TRUE(server.ready()) << server.stderr_text();
  const int port = server.port();
  json body = chat_body("Write a very long story about a dragon.", 2000, true);
  const int fd = test_support::connect_loopback(port);
  ASSERT_GE(fd, 0);
  const std::string payload = body.dump();
  ASSERT_TRUE(
      test_support::send_all(fd,
                             "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             "Content-Length: " +
                                 std::to_string(payload.size()) + "\r\n\r\n" + payload));
  std::string got;
  char buffer[4096];
  while (got.find("\"content\":\"") == std::string::npos || std::count(got.begin(), got.end(), '\n') < 8) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    ASSERT_GT(n, 0);
    got.append(buffer, static_cast<std::size_t>(n));
  }
  // The slot shows busy while its answer streams (polled: on a loaded machine the gauge can be
  // read before the worker has published it).
  double busy = 0;
  for (int i = 0; i < 100 && busy != 1; ++i) {
    busy = metric_value(http_request(port, "GET", "/metrics").body, "veloxquant_slot_busy{slot=\"0\"}");
    if (busy != 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(busy, 1);
  ::close(fd);
  // The slot frees at the next token the server fails to write. No wall-clock bound: on a loaded
  // machine a token can take long (60 s only stops a hang); the "cancelled" count below tells a
  // cancelled request from one that simply finished.
  std::string metrics;
  for (int i = 0; i < 600; ++i) {
    metrics = http_request(port, "GET", "/metrics").body;
    if (metric_value(metrics, "veloxquant_slot_busy{slot=\"0\"}") == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(metric_value(metrics, "veloxquant_slot_busy{slot=\"0\"}"), 0);
  EXPECT_EQ(metric_value(metrics, "veloxquant_generations_total{outcome=\"cancelled\"}"), 1);
  int status = 0;
  post_json(port, "/v1/chat/completions", chat_body("Hi", 4), &status);
  EXPECT_EQ(status, 200);
}

}  // namespace
