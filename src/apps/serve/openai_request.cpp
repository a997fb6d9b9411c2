#include "apps/serve/openai_request.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

namespace apps::serve {

using nlohmann::json;

namespace {

std::string type_name_of(const json& value) {
  if (value.is_null()) return "null";
  if (value.is_boolean()) return "a boolean";
  if (value.is_number_integer() || value.is_number_unsigned()) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "an array";
  return "an object";
}

std::string shown(const json& value) {
  std::string text = dump_json(value);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

[[noreturn]] void bad(const std::string& param, const std::string& message) { throw ApiError(400, message, param); }

[[noreturn]] void wrong_type(const std::string& param, const std::string& want, const json& value) {
  bad(param, "'" + param + "' must be " + want + ", got " + type_name_of(value) + " (" + shown(value) + ")");
}

// A JSON number that is an integer (1 and 1.0 both qualify, 1.5 does not).
int64_t integer_field(const json& value, const std::string& param, int64_t min, int64_t max) {
  int64_t n = 0;
  if (value.is_number_integer()) {
    n = value.get<int64_t>();
  } else if (value.is_number_unsigned()) {
    const auto u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      bad(param,
          "'" + param + "' must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + shown(value));
    }
    n = static_cast<int64_t>(u);
  } else if (value.is_number_float() && std::isfinite(value.get<double>()) &&
             value.get<double>() == std::floor(value.get<double>()) && std::fabs(value.get<double>()) < 9e15) {
    n = static_cast<int64_t>(value.get<double>());
  } else {
    wrong_type(param, "an integer", value);
  }
  if (n < min || n > max) {
    bad(param, "'" + param + "' must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " +
                   std::to_string(n));
  }
  return n;
}

double number_field(const json& value, const std::string& param, double min, double max) {
  if (!value.is_number()) wrong_type(param, "a number", value);
  const double x = value.get<double>();
  if (!std::isfinite(x) || x < min || x > max) {
    bad(param,
        "'" + param + "' must be in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + shown(value));
  }
  return x;
}

bool bool_field(const json& value, const std::string& param) {
  if (!value.is_boolean()) wrong_type(param, "true or false", value);
  return value.get<bool>();
}

std::string string_field(const json& value, const std::string& param) {
  if (!value.is_string()) wrong_type(param, "a string", value);
  return value.get<std::string>();
}

// Message content: a string, or OpenAI's array of parts of which only text parts are served.
std::string message_content(const json& content, const std::string& param) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_null()) return "";
  if (!content.is_array()) wrong_type(param, "a string or an array of text parts", content);
  std::string text;
  for (std::size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string at = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) wrong_type(at, "an object {\"type\": \"text\", \"text\": ...}", part);
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string()) bad(at + ".type", "'" + at + ".type' is required");
    if (*type != "text") {
      bad(at + ".type", "content part type '" + type->get<std::string>() + "' is not supported (text only)");
    }
    const auto t = part.find("text");
    if (t == part.end()) bad(at + ".text", "'" + at + ".text' is required");
    text += string_field(*t, at + ".text");
  }
  return text;
}

// The role of message `at` (messages[i]); "developer" is OpenAI's newer name for the system turn.
std::string message_role(const json& m, const std::string& at) {
  const auto role = m.find("role");
  if (role == m.end()) bad(at + ".role", "'" + at + ".role' is required");
  const std::string r = string_field(*role, at + ".role");
  if (r != "system" && r != "user" && r != "assistant" && r != "developer") {
    bad(at + ".role", "'" + at + ".role' must be system, developer, user or assistant, got '" + r + "'");
  }
  return r == "developer" ? "system" : r;
}

std::vector<lm::ChatMessage> parse_messages(const json& value, const RequestLimits& limits) {
  if (!value.is_array()) wrong_type("messages", "an array of messages", value);
  if (value.empty()) bad("messages", "'messages' must hold at least one message");
  if (value.size() > limits.max_messages) {
    bad("messages", "'messages' holds " + std::to_string(value.size()) + " messages; at most " +
                        std::to_string(limits.max_messages) + " are accepted");
  }
  std::vector<lm::ChatMessage> messages;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const json& m = value[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) wrong_type(at, "an object {\"role\", \"content\"}", m);
    std::string role = message_role(m, at);
    const auto content = m.find("content");
    if (content == m.end()) bad(at + ".content", "'" + at + ".content' is required");
    messages.push_back({std::move(role), message_content(*content, at + ".content")});
  }
  return messages;
}

std::string parse_prompt(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_array() && value.size() == 1 && value[0].is_string()) return value[0].get<std::string>();
  if (value.is_array()) {
    bad("prompt", "'prompt' must be one string (batches of prompts and token arrays are not served), got " +
                      type_name_of(value) + " of " + std::to_string(value.size()));
  }
  wrong_type("prompt", "a string", value);
}

std::vector<std::string> parse_stop(const json& value, const RequestLimits& limits) {
  std::vector<std::string> stop;
  if (value.is_null()) return stop;
  if (value.is_string()) {
    stop.push_back(value.get<std::string>());
  } else if (value.is_array()) {
    if (value.size() > limits.max_stop_sequences) {
      bad("stop", "'stop' holds " + std::to_string(value.size()) + " sequences; at most " +
                      std::to_string(limits.max_stop_sequences) + " are accepted");
    }
    for (std::size_t i = 0; i < value.size(); ++i)
      stop.push_back(string_field(value[i], "stop[" + std::to_string(i) + "]"));
  } else {
    wrong_type("stop", "a string or an array of strings", value);
  }
  for (const std::string& s : stop) {
    if (s.empty()) bad("stop", "'stop' sequences must not be empty");
  }
  return stop;
}

// Fields OpenAI clients may send that this server does not implement: accepted at their
// neutral value, refused otherwise (never silently ignored).
void refuse_unsupported(const json& body) {
  for (const char* name : {"frequency_penalty", "presence_penalty"}) {
    const auto it = body.find(name);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_number()) wrong_type(name, "a number", *it);
    if (it->get<double>() != 0.0) bad(name, std::string("'") + name + "' is not supported (only 0)");
  }
  if (const auto n = body.find("n"); n != body.end() && !n->is_null()) {
    if (integer_field(*n, "n", 1, 1 << 30) != 1) bad("n", "'n' must be 1 (one choice per request)");
  }
  if (const auto best_of = body.find("best_of"); best_of != body.end() && !best_of->is_null()) {
    if (integer_field(*best_of, "best_of", 1, 1 << 30) != 1) bad("best_of", "'best_of' must be 1");
  }
  for (const char* name : {"logprobs", "echo"}) {
    const auto it = body.find(name);
    if (it == body.end() || it->is_null()) continue;
    if (it->is_boolean() && !it->get<bool>()) continue;
    bad(name, std::string("'") + name + "' is not supported");
  }
  if (const auto tools = body.find("tools");
      tools != body.end() && !tools->is_null() && !(tools->is_array() && tools->empty())) {
    bad("tools", "'tools' (function calling) is not supported");
  }
}

}  // namespace

std::string error_body(const ApiError& error) {
  json body = {{"error",
                {{"message", error.what()},
                 {"type", error.type()},
                 {"param", error.param().empty() ? json(nullptr) : json(error.param())},
                 {"code", error.status()}}}};
  return dump_json(body);
}

std::string dump_json(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

namespace {

// "bits": one width, or a list of them (one per attention layer), as the text --bits takes.
std::string bits_field(const json& value, const std::string& param) {
  if (!value.is_array()) return std::to_string(integer_field(value, param, 1, 16));
  if (value.empty()) bad(param, "'" + param + "' must not be an empty list");
  std::string bits;
  for (std::size_t i = 0; i < value.size(); ++i) {
    if (i > 0) bits += ',';
    bits += std::to_string(integer_field(value[i], param + "[" + std::to_string(i) + "]", 1, 16));
  }
  return bits;
}

// One "set" entry as the FIELD=VALUE text --set takes: a string as it is, a number or boolean
// as JSON writes it, a list of numbers comma-separated.
std::string set_assignment(const std::string& param, const std::string& name, const json& v) {
  const std::string at = param + "." + name;  // the entry, in errors
  std::string text = name + "=";
  if (v.is_string()) return text + v.get<std::string>();
  if (v.is_boolean() || v.is_number()) return text + v.dump();
  if (!v.is_array()) wrong_type(at, "a string, number, boolean or list of numbers", v);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number()) wrong_type(at + "[" + std::to_string(i) + "]", "a number", v[i]);
    if (i > 0) text += ',';
    text += v[i].dump();
  }
  return text;
}

}  // namespace

KvMethodFlags parse_cache_choice(const json& field) {
  if (!field.is_object()) wrong_type("veloxquant", "an object {\"method\", \"bits\", \"preset\", \"set\"}", field);
  KvMethodFlags flags;
  for (const auto& [key, value] : field.items()) {
    const std::string param = "veloxquant." + key;
    if (key == "method") {
      flags.method = string_field(value, param);
    } else if (key == "preset") {
      flags.preset = string_field(value, param);
    } else if (key == "bits") {
      flags.bits = bits_field(value, param);
    } else if (key == "seed") {
      flags.seed = integer_field(value, param, 0, std::numeric_limits<int64_t>::max());
    } else if (key == "set") {
      if (!value.is_object()) wrong_type(param, "an object {FIELD: VALUE}", value);
      for (const auto& [name, v] : value.items()) flags.sets.push_back(set_assignment(param, name, v));
    } else {
      bad(param, "unknown field '" + param + "'; fields: method, preset, bits, seed, set");
    }
  }
  return flags;
}

CompletionRequest parse_completion_request(const std::string& body, bool chat, const RequestLimits& limits) {
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::parse_error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  }
  return parse_completion_json(parsed, chat, limits);
}

CompletionRequest parse_completion_json(const json& body, bool chat, const RequestLimits& limits) {
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object, got " + type_name_of(body));
  CompletionRequest r;
  r.chat = chat;
  refuse_unsupported(body);
  if (const auto it = body.find("model"); it != body.end() && !it->is_null()) r.model = string_field(*it, "model");
  if (chat) {
    const auto it = body.find("messages");
    if (it == body.end()) bad("messages", "'messages' is required");
    r.messages = parse_messages(*it, limits);
  } else {
    const auto it = body.find("prompt");
    if (it == body.end()) bad("prompt", "'prompt' is required");
    r.prompt = parse_prompt(*it);
  }
  const int64_t cap = limits.context_length > 0 ? limits.context_length : limits.max_tokens_cap;
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    const auto it = body.find(name);
    if (it == body.end() || it->is_null()) continue;
    r.max_tokens = static_cast<int>(integer_field(*it, name, 0, cap));
  }
  if (const auto it = body.find("temperature"); it != body.end() && !it->is_null()) {
    r.temperature = static_cast<float>(number_field(*it, "temperature", 0.0, 2.0));
  }
  if (const auto it = body.find("top_p"); it != body.end() && !it->is_null()) {
    r.top_p = static_cast<float>(number_field(*it, "top_p", 0.0, 1.0));
    if (r.top_p == 0.0f) bad("top_p", "'top_p' must be in (0, 1], got 0");
  }
  if (const auto it = body.find("top_k"); it != body.end() && !it->is_null()) {
    r.top_k = static_cast<int>(integer_field(*it, "top_k", 0, 1 << 30));
  }
  if (const auto it = body.find("min_p"); it != body.end() && !it->is_null()) {
    r.min_p = static_cast<float>(number_field(*it, "min_p", 0.0, 1.0));
  }
  if (const auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    r.seed = static_cast<uint64_t>(integer_field(*it, "seed", 0, std::numeric_limits<int64_t>::max()));
  }
  if (const auto it = body.find("stop"); it != body.end()) r.stop = parse_stop(*it, limits);
  if (const auto it = body.find("stream"); it != body.end() && !it->is_null()) r.stream = bool_field(*it, "stream");
  if (const auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) wrong_type("stream_options", "an object", *it);
    if (!r.stream) bad("stream_options", "'stream_options' is only allowed with \"stream\": true");
    if (const auto u = it->find("include_usage"); u != it->end() && !u->is_null()) {
      r.include_usage = bool_field(*u, "stream_options.include_usage");
    }
  }
  if (const auto it = body.find("veloxquant"); it != body.end() && !it->is_null()) r.cache = parse_cache_choice(*it);
  return r;
}

}  // namespace apps::serve
