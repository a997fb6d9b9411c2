#pragma once
// The OpenAI request bodies `veloxquant serve` accepts (/v1/completions, /v1/chat/completions),
// parsed and validated at the front door: every field is type-checked and range-checked, and a
// bad one becomes an ApiError naming the field and the value (HTTP 400, OpenAI's error shape),
// never an exception that reaches the connection. Pure functions: tested without a socket.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "apps/kv_method_flags.h"
#include "lm/tokenizer/tokenizer.h"

namespace apps::serve {

// An error the client caused (or a state it must wait out); `status` is the HTTP status.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "", std::string type = "invalid_request_error")
      : std::runtime_error(message), status_(status), param_(std::move(param)), type_(std::move(type)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& type() const { return type_; }

 private:
  int status_;
  std::string param_;
  std::string type_;
};

// JSON text for the wire. Generated text may hold bytes that are not UTF-8 (a model can emit
// a lone byte token); they become U+FFFD instead of an exception.
std::string dump_json(const nlohmann::json& value);

// {"error": {"message", "type", "param", "code"}} as OpenAI's API answers.
std::string error_body(const ApiError& error);

// Bounds the server applies to every request (from its flags).
struct RequestLimits {
  int64_t context_length = 0;  // 0 = unlimited (max_tokens is then bounded by max_tokens_cap)
  int max_tokens_cap = 1 << 20;
  std::size_t max_stop_sequences = 16;
  std::size_t max_messages = 4096;
};

struct CompletionRequest {
  bool chat = false;
  std::string model;                      // echoed back; any value is accepted (one model served)
  std::string prompt;                     // /v1/completions
  std::vector<lm::ChatMessage> messages;  // /v1/chat/completions
  // Tokens to generate. Unset: OpenAI's defaults, 16 for completions and "until the context
  // is full" for chat.
  std::optional<int> max_tokens;
  float temperature = 1.0f;  // OpenAI's default; 0 = greedy (the sampler's argmax)
  float top_p = 1.0f;
  int top_k = 0;       // extension (llama-server's name): 0 = off
  float min_p = 0.0f;  // extension: 0 = off
  uint64_t seed = 0;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // The `veloxquant` extension field: {"method", "bits", "preset", "seed", "set": {F: V}}.
  // Unset = the server's cache. Parsed into the same flags the CLI takes, so the same rules
  // and messages apply.
  std::optional<KvMethodFlags> cache;
};

// Parses a request body. Throws ApiError(400) naming the first bad field.
CompletionRequest parse_completion_request(const std::string& body, bool chat, const RequestLimits& limits);
CompletionRequest parse_completion_json(const nlohmann::json& body, bool chat, const RequestLimits& limits);

// The `veloxquant` field alone (also used by tests): method/preset/bits/seed/set -> flags.
KvMethodFlags parse_cache_choice(const nlohmann::json& field);

}  // namespace apps::serve
