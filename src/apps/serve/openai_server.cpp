#include "apps/serve/openai_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>

#include "base/error.h"

namespace apps::serve {

using nlohmann::json;

namespace {

std::atomic<uint64_t> next_id{1};

std::string make_id(const char* prefix) {
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%s-%016llx", prefix,
                static_cast<unsigned long long>(next_id.fetch_add(1) * 0x9E3779B97F4A7C15ull));
  return buffer;
}

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status();
  res.set_content(error_body(error), "application/json");
}

// Where a request is counted in /metrics.
std::string endpoint_label(const std::string& path) {
  for (const auto& e : OpenAiServer::endpoints()) {
    if (path == e) return e;
  }
  return "other";
}

json usage_json(const JobResult& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

json cache_report(const CacheSelection& cache, const JobResult& r) {
  return {{"method", cache.label},
          {"kv_bytes", r.kv_bytes},
          {"kv_f16_bytes", r.kv_f16_bytes},
          {"kv_native_bytes", r.kv_native_bytes},
          {"prompt_tokens_per_s", r.prompt_tokens_per_s},
          {"generation_tokens_per_s", r.generation_tokens_per_s}};
}

// One streamed piece in the shape of the endpoint.
json stream_chunk(bool chat, const std::string& id, int64_t created, const std::string& model,
                  const json& delta_or_text, const json& finish_reason) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason}, {"logprobs", nullptr}};
  if (chat) {
    choice["delta"] = delta_or_text;
  } else {
    choice["text"] = delta_or_text;
  }
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({choice})}};
}

std::string sse(const json& payload) { return "data: " + dump_json(payload) + "\n\n"; }

// The server-sent events of one streamed completion, written as the job's events arrive
// (httplib calls it once per response and it runs until the job ends or the client leaves).
struct CompletionStream {
  std::shared_ptr<Job> job;
  bool chat;
  std::string id;
  int64_t created;
  std::string model;
  bool include_usage;

  // false when the client went away: the job is cancelled, the slot stops at its next token.
  bool write(httplib::DataSink& sink, const std::string& data) const {
    if (sink.write(data.data(), data.size())) return true;
    job->cancel();
    return false;
  }

  json with_usage(json piece) const {
    if (include_usage) piece["usage"] = nullptr;
    return piece;
  }

  json chunk(const json& delta_or_text, const json& finish_reason) const {
    return stream_chunk(chat, id, created, model, delta_or_text, finish_reason);
  }

  // The last chunk (finish reason and the cache report), the usage chunk when asked, [DONE].
  bool finish(httplib::DataSink& sink, const JobResult& result) const {
    const json empty = chat ? json::object() : json("");
    json last = with_usage(chunk(empty, result.finish_reason));
    last["veloxquant"] = cache_report(job->cache, result);
    if (!write(sink, sse(last))) return false;
    if (include_usage) {
      json usage = chunk(empty, nullptr);
      usage["choices"] = json::array();
      usage["usage"] = usage_json(result);
      if (!write(sink, sse(usage))) return false;
    }
    write(sink, "data: [DONE]\n\n");
    sink.done();
    return true;
  }

  bool operator()(std::size_t /*offset*/, httplib::DataSink& sink) const {
    if (chat && !write(sink, sse(with_usage(stream_chunk(true, id, created, model,
                                                         {{"role", "assistant"}, {"content", ""}}, nullptr))))) {
      return false;
    }
    for (;;) {
      JobEvent e = job->next(std::chrono::milliseconds(1000));
      switch (e.kind) {
        case JobEvent::Kind::kTimeout:
          // A comment line: ignored by SSE clients, and a failed write tells that the
          // client left while the request waited for a slot or a long prefill.
          if (!write(sink, ": waiting\n\n")) return false;
          break;
        case JobEvent::Kind::kText: {
          const json piece = chat ? json{{"content", e.text}} : json(e.text);
          if (!write(sink, sse(with_usage(chunk(piece, nullptr))))) return false;
          break;
        }
        case JobEvent::Kind::kError: {
          const json err = json::parse(error_body(ApiError(e.status, e.text, "", "server_error")));
          write(sink, sse(err));
          write(sink, "data: [DONE]\n\n");
          sink.done();
          return true;
        }
        case JobEvent::Kind::kDone:
          return finish(sink, e.result);
      }
    }
  }
};

}  // namespace

const std::vector<std::string>& OpenAiServer::endpoints() {
  static const std::vector<std::string> list = {"/v1/models", "/v1/completions", "/v1/chat/completions",
                                                "/health",    "/metrics",        "/"};
  return list;
}

OpenAiServer::OpenAiServer(Engine& engine, HttpOptions options)
    : engine_(engine), options_(std::move(options)), server_(std::make_unique<httplib::Server>()) {
  limits_.context_length = engine_.context_length();
  int threads = options_.http_threads;
  // Each streaming request holds one HTTP thread while it waits or decodes: room for a full
  // queue of streams would be thousands of threads, so the pool is sized for the slots plus a
  // generous margin of waiting streams; the rest wait in the kernel's accept queue.
  if (threads <= 0) threads = engine_.options().parallel + 128;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  server_->set_payload_max_length(options_.max_body_bytes);
  server_->set_read_timeout(options_.read_timeout_s, 0);
  server_->set_write_timeout(30, 0);
  server_->set_keep_alive_timeout(5);
  install_routes();
}

OpenAiServer::~OpenAiServer() = default;

int OpenAiServer::bind() {
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ < 0) throw base::InvalidArgument("cannot bind " + options_.host + " on any port");
  } else {
    if (!server_->bind_to_port(options_.host, options_.port)) {
      throw base::InvalidArgument("cannot bind " + options_.host + ":" + std::to_string(options_.port) +
                                  " (in use, or not an address of this machine)");
    }
    port_ = options_.port;
  }
  return port_;
}

void OpenAiServer::listen() { server_->listen_after_bind(); }

bool OpenAiServer::stop() {
  // Before listen() has set httplib's running flag its stop() does nothing. After the first stop()
  // the flag stays set while listen() drains its pool (a long generation can hold it for seconds),
  // but the socket is gone: a second stop() fails httplib's assert(svr_sock_ != INVALID_SOCKET)
  // wherever asserts are compiled in (Debian's library has NDEBUG; a header-only httplib in a
  // build without it aborts).
  if (!server_->is_running()) return false;
  server_->stop();
  return true;
}

std::string OpenAiServer::ready_line() const {
  const CacheSelection& cache = engine_.default_cache();
  // --bits as given (one int, or one per attention layer); null for the method's default.
  json bits = nullptr;
  if (!cache.bits.empty()) {
    bits = json::array();
    std::size_t begin = 0;
    for (std::size_t comma; (comma = cache.bits.find(',', begin)) != std::string::npos; begin = comma + 1) {
      bits.push_back(std::stoi(cache.bits.substr(begin, comma - begin)));
    }
    bits.push_back(std::stoi(cache.bits.substr(begin)));
    if (bits.size() == 1) bits = bits[0];
  }
  const json ready = {{"schema_version", 1},
                      {"model", options_.model_id},
                      {"method", cache.label},
                      {"bits", bits},
                      {"settings", cache.settings},
                      {"host", options_.host},
                      {"port", port_},
                      {"layer_caches", engine_.model().layers().size()},
                      {"slots", engine_.options().parallel},
                      {"context_length", engine_.context_length()},
                      {"endpoints", endpoints()}};
  return "VELOXQUANT_READY " + dump_json(ready);
}

void OpenAiServer::install_routes() {
  httplib::Server& svr = *server_;

  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool protected_path = req.path.rfind("/v1/", 0) == 0 || req.path == "/metrics";
    if (options_.api_key.empty() || !protected_path) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") != "Bearer " + options_.api_key) {
      send_error(res, ApiError(401, "missing or wrong API key (send 'Authorization: Bearer KEY')", "",
                               "authentication_error"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // httplib's own refusals (404, 413 oversized body, 400 unparsable request) get a JSON body.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message = "HTTP " + std::to_string(res.status);
    if (res.status == 404) message = "no route for " + req.method + " " + req.path;
    if (res.status == 413) {
      message =
          "the request body is too large (send it as Content-Type: application/json; form-encoded bodies are "
          "limited to 8 KiB by the HTTP library, others by --max-body-mib)";
    }
    if (res.status == 405) message = "method " + req.method + " is not allowed on " + req.path;
    send_error(res, ApiError(res.status, message));
    return httplib::Server::HandlerResponse::Handled;
  }));
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, const std::exception_ptr& ep) {
    std::string message = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, message, "", "server_error"));
  });
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    counters_.count(endpoint_label(req.path), res.status);
  });

  svr.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const lm::ModelConfig& c = engine_.model().config();
    const json body = {{"object", "list"},
                       {"data", json::array({{{"id", options_.model_id},
                                              {"object", "model"},
                                              {"created", 0},
                                              {"owned_by", "veloxquant"},
                                              {"meta",
                                               {{"architecture", c.architecture},
                                                {"n_layers", c.n_layers},
                                                {"context_length", engine_.context_length()},
                                                {"kv_method", engine_.default_cache().label}}}}})}};
    res.set_content(dump_json(body), "application/json");
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(render_metrics(engine_.snapshot(), counters_.snapshot()), "text/plain; version=0.0.4");
  });
  svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(web_page_html(), "text/html; charset=utf-8");
  });
  svr.Post("/v1/completions",
           [this](const httplib::Request& req, httplib::Response& res) { handle_completion(req.body, false, res); });
  svr.Post("/v1/chat/completions",
           [this](const httplib::Request& req, httplib::Response& res) { handle_completion(req.body, true, res); });
}

void OpenAiServer::handle_completion(const std::string& body, bool chat, httplib::Response& res) {
  std::shared_ptr<Job> job;
  CompletionRequest request;
  try {
    request = parse_completion_request(body, chat, limits_);
    job = std::make_shared<Job>();
    job->cache = engine_.resolve_cache(request.cache);

    // The prompt as `veloxquant generate` builds it: the chat template for chat, BOS + text.
    std::string text = request.prompt;
    if (chat) {
      try {
        text = engine_.tokenizer().apply_chat_template(request.messages);
      } catch (const std::exception& e) {
        throw ApiError(400, std::string("cannot apply the model's chat template: ") + e.what(), "messages");
      }
    }
    if (!text.empty()) job->prompt_tokens = engine_.tokenizer().encode(text, true);
    const int64_t ctx = engine_.context_length();
    const auto n_prompt = static_cast<int64_t>(job->prompt_tokens.size());
    if (ctx > 0 && n_prompt >= ctx) {
      throw ApiError(400,
                     "the prompt is " + std::to_string(n_prompt) + " tokens; the context holds " + std::to_string(ctx) +
                         " tokens (prompt plus at least one generated token)",
                     chat ? "messages" : "prompt");
    }
    lm::GenerateOptions& o = job->options;
    o.max_tokens = request.max_tokens.value_or(
        chat ? static_cast<int>(std::min<int64_t>(ctx > 0 ? ctx - n_prompt : (1 << 20), 1 << 20)) : 16);
    o.temperature = request.temperature;
    o.top_p = request.top_p;
    o.top_k = request.top_k;
    o.min_p = request.min_p;
    o.seed = request.seed;
    o.prefill_step_size = engine_.options().prefill_step;
    if (ctx > 0) o.context_length = ctx;
    lm::validate(lm::sampler_options(o));
    job->stop = request.stop;
    job->fresh_caches = engine_.make_caches(job->cache);
    engine_.submit(job);
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  } catch (const std::invalid_argument& e) {
    send_error(res, ApiError(400, e.what()));
    return;
  }

  const std::string id = make_id(chat ? "chatcmpl" : "cmpl");
  const int64_t created = static_cast<int64_t>(std::time(nullptr));
  const std::string model = options_.model_id;

  if (!request.stream) {
    std::string text;
    for (;;) {
      JobEvent e = job->next(std::chrono::milliseconds(1000));
      if (e.kind == JobEvent::Kind::kTimeout) continue;
      if (e.kind == JobEvent::Kind::kText) {
        text += e.text;
        continue;
      }
      if (e.kind == JobEvent::Kind::kError) {
        send_error(res, ApiError(e.status, e.text, "", e.status >= 500 ? "server_error" : "invalid_request_error"));
        return;
      }
      json choice = {{"index", 0}, {"finish_reason", e.result.finish_reason}, {"logprobs", nullptr}};
      if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
      } else {
        choice["text"] = text;
      }
      const json out = {{"id", id},
                        {"object", chat ? "chat.completion" : "text_completion"},
                        {"created", created},
                        {"model", model},
                        {"choices", json::array({choice})},
                        {"usage", usage_json(e.result)},
                        {"veloxquant", cache_report(job->cache, e.result)}};
      res.set_content(dump_json(out), "application/json");
      return;
    }
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider("text/event-stream",
                                   CompletionStream{job, chat, id, created, model, request.include_usage},
                                   [job](bool) { job->cancel(); });
}

}  // namespace apps::serve
