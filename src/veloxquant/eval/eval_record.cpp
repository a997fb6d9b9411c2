#include "veloxquant/eval/eval_record.h"

#include <cmath>
#include <limits>

#include "base/error.h"

namespace veloxquant::eval {

namespace {

nlohmann::json number(double value) {
  if (!std::isfinite(value)) return nullptr;
  return value;
}

double read_number(const nlohmann::json& json, const char* key) {
  if (!json.contains(key)) throw base::FormatError(std::string("result record lacks key '") + key + "'");
  const auto& v = json.at(key);
  if (v.is_null()) return std::numeric_limits<double>::infinity();
  if (!v.is_number()) throw base::FormatError(std::string("result key '") + key + "' is not a number");
  return v.get<double>();
}

}  // namespace

const char* chunking_name(Chunking chunking) { return chunking == Chunking::kLlama ? "llama" : "sliding"; }

Chunking parse_chunking(const std::string& name) {
  if (name == "sliding") return Chunking::kSliding;
  if (name == "llama") return Chunking::kLlama;
  throw base::InvalidArgument("--chunking must be 'sliding' or 'llama', got '" + name + "'");
}

EvalRecord make_record(const EvalRun& run, std::size_t method_index, const EvalOptions& options,
                       const RecordLabels& labels) {
  const SideResult& m = run.methods.at(method_index);
  EvalRecord r;
  r.model = labels.model;
  r.method = labels.method;
  r.bits = labels.bits;
  r.settings = labels.settings;
  r.chunking = chunking_name(options.chunking);
  r.ctx = run.ctx;
  r.stride = options.chunking == Chunking::kLlama ? run.ctx : (options.stride == 0 ? run.ctx : options.stride);
  r.tail = options.tail;
  r.batch = options.batch;
  r.n_windows = run.n_windows;
  r.n_text_tokens = run.n_text_tokens;
  r.n_tokens = run.n_scored;
  r.n_compared = run.n_compared;
  r.ppl = m.ppl;
  r.ppl_stderr = m.ppl_stderr;
  r.ppl_baseline = run.baseline.ppl;
  r.ppl_baseline_stderr = run.baseline.ppl_stderr;
  r.kld = m.kld;
  r.kld_max = m.kld_max;
  r.top1_agreement = m.top1_agreement;
  r.kv_bytes_per_token = m.kv_bytes_per_token;
  r.kv_bytes_per_token_baseline = run.baseline.kv_bytes_per_token;
  r.tok_per_s = m.tok_per_s;
  r.tok_per_s_baseline = run.baseline.tok_per_s;
  r.peak_rss_bytes = run.peak_rss_bytes;
  return r;
}

nlohmann::json to_json(const EvalRecord& r) {
  nlohmann::json j;
  j["model"] = r.model;
  j["method"] = r.method;
  j["bits"] = r.bits;
  j["settings"] = r.settings;
  j["chunking"] = r.chunking;
  j["ctx"] = r.ctx;
  j["stride"] = r.stride;
  j["tail"] = r.tail;
  j["batch"] = r.batch;
  j["n_windows"] = r.n_windows;
  j["n_text_tokens"] = r.n_text_tokens;
  j["n_tokens"] = r.n_tokens;
  j["n_compared"] = r.n_compared;
  j["ppl"] = number(r.ppl);
  j["ppl_stderr"] = number(r.ppl_stderr);
  j["ppl_baseline"] = number(r.ppl_baseline);
  j["ppl_baseline_stderr"] = number(r.ppl_baseline_stderr);
  j["kld"] = number(r.kld);
  j["kld_max"] = number(r.kld_max);
  j["top1_agreement"] = number(r.top1_agreement);
  j["kv_bytes_per_token"] = number(r.kv_bytes_per_token);
  j["kv_bytes_per_token_baseline"] = number(r.kv_bytes_per_token_baseline);
  j["tok_per_s"] = number(r.tok_per_s);
  j["tok_per_s_baseline"] = number(r.tok_per_s_baseline);
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  return j;
}

EvalRecord record_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw base::FormatError("result record is not a JSON object");
  EvalRecord r;
  r.model = j.value("model", "");
  r.method = j.value("method", "");
  r.bits = j.value("bits", "");
  r.settings = j.value("settings", "");
  r.chunking = j.value("chunking", "sliding");
  r.ctx = j.value("ctx", int64_t{0});
  r.stride = j.value("stride", int64_t{0});
  r.tail = j.value("tail", 1.0);
  r.batch = j.value("batch", int64_t{0});
  r.n_windows = j.value("n_windows", int64_t{0});
  r.n_text_tokens = j.value("n_text_tokens", int64_t{0});
  r.n_tokens = j.value("n_tokens", int64_t{0});
  r.n_compared = j.value("n_compared", int64_t{0});
  r.ppl = read_number(j, "ppl");
  r.ppl_stderr = j.value("ppl_stderr", 0.0);
  r.ppl_baseline = read_number(j, "ppl_baseline");
  r.ppl_baseline_stderr = j.value("ppl_baseline_stderr", 0.0);
  r.kld = read_number(j, "kld");
  r.kld_max = j.contains("kld_max") ? read_number(j, "kld_max") : r.kld;
  r.top1_agreement = read_number(j, "top1_agreement");
  r.kv_bytes_per_token = read_number(j, "kv_bytes_per_token");
  r.kv_bytes_per_token_baseline = read_number(j, "kv_bytes_per_token_baseline");
  r.tok_per_s = read_number(j, "tok_per_s");
  r.tok_per_s_baseline = read_number(j, "tok_per_s_baseline");
  r.peak_rss_bytes = j.value("peak_rss_bytes", int64_t{0});
  return r;
}

}  // namespace veloxquant::eval
