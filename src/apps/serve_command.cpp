// `veloxquant serve`: an OpenAI-compatible HTTP server over one model with compressed caches
// (src/apps/serve/). Flags are validated before the model is read; once bound, one handshake
// line goes to stdout (VELOXQUANT_READY {json}) so scripts and tests know the port; logs go
// to stderr. SIGINT/SIGTERM stop it cleanly.
#include <CLI/CLI.hpp>

#include <pthread.h>
#include <signal.h>

#include <charconv>
#include <chrono>
#include <mutex>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "apps/command_registry.h"
#include "apps/int_flag.h"
#include "apps/kv_method_flags.h"
#include "apps/model_loading.h"
#include "apps/serve/generation_engine.h"
#include "apps/serve/openai_server.h"
#include "base/error.h"
#include "lm/load.h"

namespace apps {
namespace {

struct ServeFlags : apps::ModelFlags {  // --model, --tokenizer, --threads, --kv-dtype (model_loading.h)
  std::string alias;
  std::string host = "127.0.0.1";
  std::string port = "8000";
  std::string api_key;
  std::string ctx;
  std::string parallel = "1";
  std::string prefill_step = "512";
  std::string max_queue = "1024";
  std::string prompt_cache_entries = "16";
  std::string prompt_cache_mib = "256";
  std::string max_body_mib = "8";
  std::string read_timeout = "10";
  KvMethodFlags kv;
};

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

void run_serve(const ServeFlags& f) {
  // 1. Every flag before the model is read.
  if (f.model.empty()) throw base::InvalidArgument("--model is required (a GGUF or llama2.c file)");
  serve::ServeOptions options;
  options.parallel = static_cast<int>(parse_int_flag("--parallel", f.parallel, 1, 256));
  options.max_queue = static_cast<std::size_t>(parse_int_flag("--max-queue", f.max_queue, 0, 1 << 20));
  options.prompt_cache_entries =
      static_cast<std::size_t>(parse_int_flag("--prompt-cache-entries", f.prompt_cache_entries, 0, 1 << 20));
  options.prompt_cache_bytes =
      static_cast<std::size_t>(parse_int_flag("--prompt-cache-mib", f.prompt_cache_mib, 0, 1 << 20)) << 20;
  options.prefill_step = static_cast<int>(parse_int_flag("--prefill-step", f.prefill_step, 1, 1 << 20));
  serve::HttpOptions http;
  http.host = f.host;
  http.port = static_cast<int>(parse_int_flag("--port", f.port, 0, 65535));
  http.api_key = f.api_key;
  http.max_body_bytes = static_cast<std::size_t>(parse_int_flag("--max-body-mib", f.max_body_mib, 1, 1024)) << 20;
  http.read_timeout_s = static_cast<int>(parse_int_flag("--read-timeout", f.read_timeout, 1, 3600));
  http.model_id = f.alias.empty() ? std::filesystem::path(f.model).stem().string() : f.alias;

  // Signals: blocked in every thread, received by one waiter. A thread inherits the mask of the
  // thread that starts it, so this comes before the first thread: size_global_pool() below
  // starts the shared pool's workers, and a worker started with SIGTERM unblocked took the signal
  // with its default action (the process died with status 143 instead of stopping cleanly).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server

  lm::LoadOptions load_options;
  load_options.kv_type = lm::parse_kv_cache_type(f.kv_dtype);
  load_options.threads = f.thread_count();
  apps::size_global_pool(load_options.threads);  // the caches' pool, shared with the model
  if (!f.ctx.empty()) {
    options.context_length = parse_int_flag("--ctx", f.ctx, 1, int64_t{1} << 40);
    load_options.context_length = options.context_length;
  }
  if (!f.tokenizer.empty()) load_options.tokenizer_path = f.tokenizer;
  kv_config_from_flags(f.kv);  // a bad --method/--preset/--set fails here, before loading

  if (!is_loopback(http.host) && http.api_key.empty()) {
    std::fprintf(stderr,
                 "[veloxquant warning] serving on %s without --api-key: anyone who can reach this address can "
                 "use the model\n",
                 http.host.c_str());
  }

  // 2. Load, start the slots, bind.
  serve::Engine engine(lm::load(f.model, load_options), options, f.kv);
  serve::OpenAiServer server(engine, http);
  const int port = server.bind();
  // httplib's stop() does nothing before listen() has started its loop, so a signal that comes
  // right after the ready line is repeated until it takes (once: OpenAiServer::stop). The state
  // outlives this function (the waiter is detached); `server` is touched only under the lock
  // while listening.
  struct StopState {
    std::mutex mutex;
    bool listening = true;
  };
  auto state = std::make_shared<StopState>();
  std::thread waiter([state, &server, stop_signals] {
    int received = 0;
    sigwait(&stop_signals, &received);
    std::fprintf(stderr, "[veloxquant info] signal %d: stopping\n", received);
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (!state->listening || server.stop()) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  waiter.detach();

  std::fprintf(stderr, "[veloxquant info] serving %s on http://%s:%d/ (cache %s, %d slot(s), context %lld)\n",
               http.model_id.c_str(), http.host.c_str(), port, engine.default_cache().label.c_str(), options.parallel,
               static_cast<long long>(engine.context_length()));
  std::printf("%s\n", server.ready_line().c_str());
  std::fflush(stdout);
  server.listen();
  std::lock_guard<std::mutex> lock(state->mutex);
  state->listening = false;
}

CommandRegistration registration{
    "serve", [](CLI::App& root) {
      auto f = std::make_shared<ServeFlags>();
      auto* cmd = root.add_subcommand("serve", "OpenAI-compatible HTTP server with compressed KV caches");
      apps::add_model_flags(*cmd, *f, {.model_required = false});
      cmd->add_option("--alias", f->alias, "Model name in /v1/models (default: the file name without extension)");
      cmd->add_option("--host", f->host, "Address to bind (a warning when not loopback without --api-key)")
          ->capture_default_str();
      cmd->add_option("--port", f->port, "Port (0 = any free port; the ready line says which)")->capture_default_str();
      cmd->add_option("--api-key", f->api_key, "Require 'Authorization: Bearer KEY' on /v1/* and /metrics");
      cmd->add_option("--ctx", f->ctx, "Context length per request (default: the model's)")->type_name("N");
      cmd->add_option("--parallel", f->parallel, "Slots generating at once; further requests queue")
          ->capture_default_str();
      cmd->add_option("--prefill-step", f->prefill_step, "Prompt tokens per prefill forward")->capture_default_str();
      cmd->add_option("--max-queue", f->max_queue, "Requests that may wait for a slot (more get 503)")
          ->capture_default_str();
      cmd->add_option("--prompt-cache-entries", f->prompt_cache_entries,
                      "Finished requests' caches kept for prefix reuse (0 = off)")
          ->capture_default_str();
      cmd->add_option("--prompt-cache-mib", f->prompt_cache_mib, "Resident bytes the prompt cache may hold, MiB")
          ->capture_default_str();
      cmd->add_option("--max-body-mib", f->max_body_mib, "Largest request body, MiB (larger: 413)")
          ->capture_default_str();
      cmd->add_option("--read-timeout", f->read_timeout, "Seconds a client may take to send its request")
          ->capture_default_str();
      add_kv_method_flags(*cmd, f->kv);
      cmd->callback([f] { run_serve(*f); });
    }};

}  // namespace
}  // namespace apps
