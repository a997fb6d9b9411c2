// `veloxquant estimate-memory`: KV bytes per cache configuration for a model's geometry at a
// context length and batch, before loading anything heavy: the configurations' real caches are
// fed random rows and their nbytes() read (kv_memory_planning.h), and a bench-methods record for
// the same model, method, bits and settings (--results) replaces the estimate with what was
// measured on real text. Smallest first; --json for scripts.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/command_registry.h"
#include "apps/int_flag.h"
#include "apps/kv_memory_planning.h"
#include "apps/kv_method_flags.h"
#include "base/error.h"
#include "lm/stats.h"
#include "veloxquant/presets/kv_presets.h"
#include "veloxquant/registry/method_registry.h"

namespace apps {
namespace {

struct EstimateFlags {
  GeometryFlags geometry;
  std::string context = "4096";
  std::string batch = "1";
  std::string measure_tokens = "2048";
  std::string top = "0";
  std::vector<std::string> results;
  bool json = false;
  KvMethodFlags kv;
};

struct Candidate {
  std::string label;
  std::optional<veloxquant::KVCacheConfig> config;
  std::string bits, settings;
};

// Without --method/--preset: the host's cache, every servable method at its defaults, every preset.
std::vector<Candidate> candidates(const EstimateFlags& f) {
  std::vector<Candidate> out;
  if (f.kv.method != "none" || !f.kv.preset.empty()) {
    Candidate c;
    c.config = kv_config_from_flags(f.kv);
    c.bits = f.kv.bits;
    c.settings = kv_settings_text(f.kv);
    c.label =
        f.kv.preset.empty() ? f.kv.method + (f.kv.bits.empty() ? "" : " --bits " + f.kv.bits) : "preset " + f.kv.preset;
    out.push_back(std::move(c));
    return out;
  }
  out.push_back({"native f16", std::nullopt, "", ""});
  for (const std::string& method : veloxquant::servable_method_names()) {
    veloxquant::KVCacheConfig config;
    config.method = method;
    const std::string bits = config.bit_width_inlier.is_list() ? "" : std::to_string(config.bit_width_inlier.scalar());
    out.push_back({method, config, bits, ""});
  }
  for (const veloxquant::KvPreset& p : veloxquant::kv_presets()) {
    KvMethodFlags preset;
    preset.preset = p.name;
    out.push_back({"preset " + p.name, veloxquant::kv_preset_config(p), "", kv_settings_text(preset)});
  }
  return out;
}

void run_estimate(const EstimateFlags& f) {
  const int64_t context = parse_int_flag("--context", f.context, 1, int64_t{1} << 24);
  const int64_t batch = parse_int_flag("--batch", f.batch, 1, 1 << 16);
  const int64_t measure = parse_int_flag("--measure-tokens", f.measure_tokens, 2, 1 << 20);
  const auto top = static_cast<std::size_t>(parse_int_flag("--top", f.top, 0, 1 << 20));
  const std::vector<Candidate> configs = candidates(f);  // bad --method/--set fail before loading
  std::vector<MeasuredRecord> records;
  for (const std::string& path : f.results) {
    const std::vector<MeasuredRecord> more = read_measured_records(path);
    records.insert(records.end(), more.begin(), more.end());
  }
  const GeometryModel geometry = geometry_from_flags(f.geometry);
  const std::string model_name = geometry.config().name;

  std::vector<MemoryEstimate> rows;
  std::vector<std::string> skipped;
  for (const Candidate& c : configs) {
    MemoryEstimate e;
    try {
      e = measure_kv_bytes(geometry, c.config, context, batch, measure);
    } catch (const std::exception& ex) {
      skipped.push_back(c.label + ": " + ex.what());
      continue;
    }
    e.label = c.label;
    e.method = c.config ? c.config->method : "none";
    e.bits = c.bits;
    e.settings = c.settings;
    // A record measured by bench-methods on this model with this configuration wins.
    for (const MeasuredRecord& r : records) {
      if (r.model == model_name && r.method == e.method && r.bits == e.bits && r.settings == e.settings) {
        e.bytes_per_token = r.kv_bytes_per_token;
        e.bytes = r.kv_bytes_per_token * static_cast<double>(context) * static_cast<double>(batch);
        e.source = "measured by bench-methods at ctx " + std::to_string(r.ctx) + " (" + r.file + ")";
      }
    }
    rows.push_back(std::move(e));
  }
  // The host's cache is the reference for "x smaller", whatever the order.
  double native = 0;
  for (const MemoryEstimate& e : rows) {
    if (e.method == "none") native = e.bytes;
  }
  if (native == 0)
    native = static_cast<double>(measure_kv_bytes(geometry, std::nullopt, context, batch, measure).bytes);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const MemoryEstimate& a, const MemoryEstimate& b) { return a.bytes < b.bytes; });
  if (top > 0 && rows.size() > top) rows.resize(top);

  const lm::ModelConfig& mc = geometry.config();
  if (f.json) {
    nlohmann::json j;
    j["schema_version"] = 1;
    j["model"] = model_name;
    j["geometry"] = {
        {"layers", mc.n_layers}, {"heads", mc.n_heads}, {"kv_heads", mc.n_kv_heads}, {"head_dim", mc.head_dim}};
    j["context"] = context;
    j["batch"] = batch;
    j["native_f16_bytes"] = native;
    j["estimates"] = nlohmann::json::array();
    for (const MemoryEstimate& e : rows) {
      j["estimates"].push_back({{"label", e.label},
                                {"method", e.method},
                                {"bits", e.bits},
                                {"settings", e.settings},
                                {"bytes", e.bytes},
                                {"bytes_per_token", e.bytes_per_token},
                                {"x_smaller", e.bytes > 0 ? native / e.bytes : 0.0},
                                {"source", e.source}});
    }
    j["skipped"] = skipped;
    std::printf("%s\n", j.dump(1).c_str());
    return;
  }
  std::printf("KV cache for %s (%d layers, %d KV heads x %d) at %lld tokens x batch %lld\n", model_name.c_str(),
              mc.n_layers, mc.n_kv_heads, mc.head_dim, static_cast<long long>(context), static_cast<long long>(batch));
  std::printf("%-24s %12s %12s %9s  %s\n", "cache", "resident", "bytes/token", "x smaller", "source");
  for (const MemoryEstimate& e : rows) {
    std::printf("%-24s %12s %12.1f %9.2f  %s\n", e.label.c_str(),
                lm::format_bytes(static_cast<std::size_t>(e.bytes)).c_str(), e.bytes_per_token,
                e.bytes > 0 ? native / e.bytes : 0.0, e.source.c_str());
  }
  for (const std::string& s : skipped) std::fprintf(stderr, "skipped %s\n", s.c_str());
}

CommandRegistration registration{
    "estimate-memory", [](CLI::App& root) {
      auto f = std::make_shared<EstimateFlags>();
      auto* cmd = root.add_subcommand("estimate-memory",
                                      "KV bytes per cache configuration at a context length (smallest first)");
      add_geometry_flags(*cmd, f->geometry);
      cmd->add_option("--context", f->context, "Tokens per sequence")->capture_default_str();
      cmd->add_option("--batch", f->batch, "Sequences")->capture_default_str();
      cmd->add_option("--measure-tokens", f->measure_tokens,
                      "Tokens fed to the real caches; longer contexts are extrapolated linearly")
          ->capture_default_str();
      cmd->add_option("--results", f->results,
                      "bench-methods results.json whose records override the estimates (repeatable)");
      cmd->add_option("--top", f->top, "Show only the N smallest (0 = all)")->capture_default_str();
      cmd->add_flag("--json", f->json, "One JSON document on stdout");
      add_kv_method_flags(*cmd, f->kv);
      cmd->callback([f] { run_estimate(*f); });
    }};

}  // namespace
}  // namespace apps
