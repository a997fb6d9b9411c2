#include "apps/serve/metrics_text.h"

#include <sstream>

namespace apps::serve {

void RequestCounters::count(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[{endpoint, status}];
}

std::map<std::pair<std::string, int>, uint64_t> RequestCounters::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

namespace {

// Label values escape backslash, double quote and newline (the exposition format's rule).
std::string label_value(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void header(std::ostringstream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}

}  // namespace

std::string render_metrics(const EngineSnapshot& e, const std::map<std::pair<std::string, int>, uint64_t>& requests) {
  std::ostringstream out;
  header(out, "veloxquant_requests_total", "counter", "HTTP requests answered, by endpoint and status.");
  for (const auto& [key, n] : requests) {
    out << "veloxquant_requests_total{endpoint=\"" << label_value(key.first) << "\",status=\"" << key.second << "\"} "
        << n << '\n';
  }
  header(out, "veloxquant_prompt_tokens_total", "counter",
         "Prompt tokens prefilled (tokens restored from the prompt cache excluded).");
  out << "veloxquant_prompt_tokens_total " << e.prompt_tokens_total << '\n';
  header(out, "veloxquant_completion_tokens_total", "counter", "Tokens generated.");
  out << "veloxquant_completion_tokens_total " << e.completion_tokens_total << '\n';
  header(out, "veloxquant_generations_total", "counter", "Generations by outcome.");
  out << "veloxquant_generations_total{outcome=\"finished\"} " << e.jobs_finished << '\n'
      << "veloxquant_generations_total{outcome=\"cancelled\"} " << e.jobs_cancelled << '\n'
      << "veloxquant_generations_total{outcome=\"failed\"} " << e.jobs_failed << '\n';
  header(out, "veloxquant_queue_depth", "gauge", "Requests waiting for a slot.");
  out << "veloxquant_queue_depth " << e.queue_depth << '\n';

  header(out, "veloxquant_slot_busy", "gauge", "1 while the slot generates.");
  for (std::size_t i = 0; i < e.slots.size(); ++i)
    out << "veloxquant_slot_busy{slot=\"" << i << "\"} " << (e.slots[i].busy ? 1 : 0) << '\n';
  header(out, "veloxquant_slot_tokens", "gauge", "Tokens held in the slot's caches.");
  for (std::size_t i = 0; i < e.slots.size(); ++i)
    out << "veloxquant_slot_tokens{slot=\"" << i << "\"} " << e.slots[i].tokens << '\n';
  header(out, "veloxquant_slot_kv_bytes", "gauge",
         "KV bytes resident in the slot's caches (nbytes(): allocated, not bit accounting).");
  for (std::size_t i = 0; i < e.slots.size(); ++i) {
    out << "veloxquant_slot_kv_bytes{slot=\"" << i << "\",method=\"" << label_value(e.slots[i].method) << "\"} "
        << e.slots[i].kv_bytes << '\n';
  }
  header(out, "veloxquant_slot_kv_f16_bytes", "gauge",
         "The same tokens as bare f16 rows (the uncompressed reference).");
  for (std::size_t i = 0; i < e.slots.size(); ++i)
    out << "veloxquant_slot_kv_f16_bytes{slot=\"" << i << "\"} " << e.slots[i].kv_f16_bytes << '\n';

  header(out, "veloxquant_slot_kv_native_bytes", "gauge",
         "What the host's native f16 cache would allocate for the same tokens (256-token growth steps).");
  for (std::size_t i = 0; i < e.slots.size(); ++i)
    out << "veloxquant_slot_kv_native_bytes{slot=\"" << i << "\"} " << e.slots[i].kv_native_bytes << '\n';

  std::size_t slot_bytes = 0;
  for (const SlotSnapshot& s : e.slots) slot_bytes += s.kv_bytes;
  header(out, "veloxquant_kv_bytes_resident", "gauge", "KV bytes resident in total: every slot plus the prompt cache.");
  out << "veloxquant_kv_bytes_resident " << slot_bytes + e.prefix.bytes << '\n';

  header(out, "veloxquant_prompt_cache_hits_total", "counter", "Requests that continued from a cached prefix.");
  out << "veloxquant_prompt_cache_hits_total " << e.prefix.hits << '\n';
  header(out, "veloxquant_prompt_cache_misses_total", "counter", "Requests that found no cached prefix.");
  out << "veloxquant_prompt_cache_misses_total " << e.prefix.misses << '\n';
  header(out, "veloxquant_prompt_cache_tokens_reused_total", "counter", "Prompt tokens restored instead of prefilled.");
  out << "veloxquant_prompt_cache_tokens_reused_total " << e.prefix.tokens_reused << '\n';
  header(out, "veloxquant_prompt_cache_entries", "gauge", "Entries in the prompt cache.");
  out << "veloxquant_prompt_cache_entries " << e.prefix.entries << '\n';
  header(out, "veloxquant_prompt_cache_bytes", "gauge", "KV bytes resident in the prompt cache.");
  out << "veloxquant_prompt_cache_bytes " << e.prefix.bytes << '\n';
  header(out, "veloxquant_process_resident_bytes", "gauge", "Resident set size of the server (VmRSS).");
  out << "veloxquant_process_resident_bytes " << e.rss_bytes << '\n';
  return out.str();
}

}  // namespace apps::serve
