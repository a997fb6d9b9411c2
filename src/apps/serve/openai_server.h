#pragma once
// The HTTP face of `veloxquant serve` on cpp-httplib: OpenAI's /v1/models, /v1/completions and
// /v1/chat/completions (JSON or server-sent events), /health, /metrics and the page at /.
// Every handler turns a bad request into a 4xx JSON error in OpenAI's shape; nothing a client
// sends can end the process.
#include <memory>
#include <string>
#include <vector>

#include "apps/serve/generation_engine.h"
#include "apps/serve/metrics_text.h"
#include "apps/serve/openai_request.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace apps::serve {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;       // 0 = any free port (the ready line says which)
  std::string api_key;   // "" = no authentication
  std::string model_id;  // the name /v1/models lists
  std::size_t max_body_bytes = std::size_t{8} << 20;
  int read_timeout_s = 10;  // a client that sends its request slower than this is dropped
  int http_threads = 0;     // 0 = enough for the slots, the queue's streams and /metrics
};

class OpenAiServer {
 public:
  OpenAiServer(Engine& engine, HttpOptions options);
  ~OpenAiServer();

  // Binds (throws base::InvalidArgument naming host and port when it cannot); returns the port.
  int bind();
  // Serves until stop().
  void listen();
  // Ends listen() if it has started its loop; returns whether it had (false: call again later).
  // Call it until it returns true, and not after: httplib asserts that a running server still
  // holds its socket, which the first stop() gave up.
  bool stop();

  // The handshake line: VELOXQUANT_READY {json} (schema_version, model, method, bits, host,
  // port, layer_caches, endpoints).
  std::string ready_line() const;
  static const std::vector<std::string>& endpoints();

 private:
  void install_routes();
  void handle_completion(const std::string& body, bool chat, httplib::Response& res);

  Engine& engine_;
  HttpOptions options_;
  int port_ = 0;
  RequestLimits limits_;
  RequestCounters counters_;
  std::unique_ptr<httplib::Server> server_;
};

// The page served at / (static HTML, no build step).
const std::string& web_page_html();

}  // namespace apps::serve
