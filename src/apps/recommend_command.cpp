// `veloxquant recommend`: a method and its settings for an objective, chosen from what was
// measured (bench-methods results.json: KL, top-1, bytes per token, tokens/s against the native
// cache on the same model), with the numbers that decided it; without measurements it falls back
// to auto-config's rules and says so.
//   memory   - the fewest bytes per token whose top-1 agreement stays >= --min-top1
//   quality  - the lowest KL divergence
//   latency  - the highest tokens/s relative to the native cache, top-1 >= --min-top1
//   balanced - the lowest KL x bytes per token (quality per byte), top-1 >= --min-top1
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "apps/command_registry.h"
#include "apps/int_flag.h"
#include "apps/kv_memory_planning.h"
#include "base/error.h"

namespace apps {
namespace {

struct RecommendFlags {
  std::string objective = "balanced";
  std::vector<std::string> results;
  std::string min_top1 = "90";
  std::string model;  // only records of this model (file name without extension)
  std::string seq_len = "4096";
  bool json = false;
};

std::string record_flags(const MeasuredRecord& r) {
  std::string out = "--method " + r.method;
  if (!r.bits.empty()) out += " --bits " + r.bits;
  std::stringstream settings(r.settings);
  for (std::string s; std::getline(settings, s, ',');) {
    if (!s.empty()) out += " --set " + s;
  }
  return out;
}

void run_recommend(const RecommendFlags& f) {
  const std::vector<std::string> objectives = {"memory", "latency", "quality", "balanced"};
  if (std::find(objectives.begin(), objectives.end(), f.objective) == objectives.end()) {
    throw base::InvalidArgument("--objective must be memory, latency, quality or balanced, got '" + f.objective + "'");
  }
  const double min_top1 = static_cast<double>(parse_int_flag("--min-top1", f.min_top1, 0, 100));
  std::vector<std::string> paths = f.results;
  if (paths.empty()) {
    for (const char* p : {"docs/results.json", "docs/eviction/results.json"}) {
      if (std::filesystem::exists(p)) paths.emplace_back(p);
    }
  }
  std::vector<MeasuredRecord> records;
  for (const std::string& path : paths) {
    for (MeasuredRecord& r : read_measured_records(path)) {
      if (f.model.empty() || r.model == std::filesystem::path(f.model).stem().string()) records.push_back(std::move(r));
    }
  }

  nlohmann::json out = {{"schema_version", 1}, {"objective", f.objective}};
  if (records.empty()) {
    AutoConfigInput in;
    in.seq_len = parse_int_flag("--seq-len", f.seq_len, 1, int64_t{1} << 24);
    const auto [total, used] = machine_memory_bytes();
    in.memory_total_bytes = total;
    in.memory_used_bytes = used;
    const AutoConfigChoice c = auto_config(in);
    out["flags"] = c.flags();
    out["source"] = "rules";
    out["why"] =
        "no bench-methods measurements (give --results PATH, or run `veloxquant bench-methods`); auto-config's " +
        c.rule;
  } else {
    // The candidates that meet the quality floor (the quality objective needs none).
    std::vector<const MeasuredRecord*> eligible;
    for (const MeasuredRecord& r : records) {
      if (f.objective == "quality" || r.top1 >= min_top1) eligible.push_back(&r);
    }
    if (eligible.empty()) {
      throw base::InvalidArgument("no measured configuration keeps top-1 agreement >= " + f.min_top1 +
                                  "% (lower --min-top1, or measure more with bench-methods)");
    }
    std::function<double(const MeasuredRecord&)> cost;
    std::string measure;
    if (f.objective == "memory") {
      cost = [](const MeasuredRecord& r) { return r.kv_bytes_per_token; };
      measure = "bytes per token";
    } else if (f.objective == "quality") {
      cost = [](const MeasuredRecord& r) { return r.kld; };
      measure = "KL divergence";
    } else if (f.objective == "latency") {
      cost = [](const MeasuredRecord& r) {
        return r.tok_per_s_baseline > 0 ? -r.tok_per_s / r.tok_per_s_baseline : 0.0;
      };
      measure = "tokens/s relative to the native cache (higher is better)";
    } else {
      cost = [](const MeasuredRecord& r) { return r.kld * r.kv_bytes_per_token; };
      measure = "KL x bytes per token";
    }
    std::stable_sort(eligible.begin(), eligible.end(),
                     [&](const MeasuredRecord* a, const MeasuredRecord* b) { return cost(*a) < cost(*b); });
    const MeasuredRecord& best = *eligible.front();
    std::ostringstream why;
    why << "lowest " << measure << " among " << eligible.size() << " measured configuration(s)";
    if (f.objective != "quality") why << " with top-1 >= " << min_top1 << "%";
    why << " on " << best.model << ": " << best.kv_bytes_per_token << " bytes/token, KL " << best.kld << ", top-1 "
        << best.top1 << "%, " << best.tok_per_s << " tok/s (native " << best.tok_per_s_baseline << ")";
    if (eligible.size() > 1) {
      const MeasuredRecord& next = *eligible[1];
      why << "; runner-up " << record_flags(next) << ": " << next.kv_bytes_per_token << " bytes/token, KL " << next.kld
          << ", top-1 " << next.top1 << "%";
    }
    out["flags"] = record_flags(best);
    out["method"] = best.method;
    out["bits"] = best.bits;
    out["settings"] = best.settings;
    out["source"] = best.file;
    out["why"] = why.str();
  }
  if (f.json) {
    std::printf("%s\n", out.dump(1).c_str());
  } else {
    std::printf("%s\n  why: %s\n", out["flags"].get<std::string>().c_str(), out["why"].get<std::string>().c_str());
  }
}

CommandRegistration registration{
    "recommend", [](CLI::App& root) {
      auto f = std::make_shared<RecommendFlags>();
      auto* cmd =
          root.add_subcommand("recommend", "A cache for an objective, from measured results (or auto-config's rules)");
      cmd->add_option("--objective", f->objective, "memory, latency, quality or balanced")->capture_default_str();
      cmd->add_option("--results", f->results,
                      "bench-methods results.json (repeatable; default docs/results.json and "
                      "docs/eviction/results.json when present)");
      cmd->add_option("--min-top1", f->min_top1, "Quality floor: top-1 agreement %, for memory/latency/balanced")
          ->capture_default_str();
      cmd->add_option("--model", f->model, "Only records measured on this model (file name)");
      cmd->add_option("--seq-len", f->seq_len, "Context for the rule-based fallback")->capture_default_str();
      cmd->add_flag("--json", f->json, "One JSON document on stdout");
      cmd->callback([f] { run_recommend(*f); });
    }};

}  // namespace
}  // namespace apps
