// `veloxquant bench-methods`: evaluates every servable method of the registry (or those
// named) at each bit setting against the native cache — one run, the same windows, one
// shared baseline — and writes results.json, results.md (sorted by KV bytes per token) and
// results.svg (KL vs bytes/token) into --out.
#include <CLI/CLI.hpp>
#include <sys/utsname.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/command_registry.h"
#include "apps/model_loading.h"
#include "apps/kv_method_flags.h"
#include "apps/progress_bar.h"
#include "base/error.h"
#include "lm/cache/kv_type_caches.h"
#include "lm/load.h"
#include "veloxquant/builder/kv_cache_builder.h"
#include "veloxquant/config/config_validation.h"
#include "veloxquant/config/field_spec.h"
#include "veloxquant/config/per_layer_lists.h"
#include "veloxquant/errors.h"
#include "veloxquant/eval/bench_report.h"
#include "veloxquant/eval/eval_runner.h"
#include "veloxquant/eval/reference_formats.h"
#include "veloxquant/eval/text_source.h"
#include "veloxquant/registry/field_assignment.h"
#include "veloxquant/presets/kv_presets.h"
#include "veloxquant/registry/method_registry.h"

namespace {

namespace ev = veloxquant::eval;

struct BenchFlags : apps::ModelFlags {  // --model, --tokenizer, --threads, --kv-dtype (model_loading.h)
  std::string text;
  std::string methods;  // comma list; empty = every servable method (unless --presets is given)
  std::string presets;  // comma list of presets/kv_presets.h names
  // Each "NAME FIELD=VALUE ..." (NAME a method or a preset) runs as one setting of its own, so
  // several configurations of one method share the windows and the baseline.
  std::vector<std::string> configs;
  std::vector<std::string> bits{"2", "4"};
  std::vector<std::string> sets;
  int64_t seed = 42;
  int64_t ctx = 512;
  int64_t stride = 0;
  int64_t max_tokens = 0;
  std::string chunking = "sliding";
  int64_t chunks = 0;
  double tail = 0.25;
  int64_t batch = 512;
  std::string kv_dtypes;  // comma list of the host's cache types to measure beside the native one
  std::string out;
};

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

// The flags rendered back as a command line: committed next to the numbers it produced.
std::string command_line(const BenchFlags& f) {
  std::ostringstream cmd;
  cmd << "veloxquant bench-methods --model " << f.model << " --text " << f.text;
  if (!f.tokenizer.empty()) cmd << " --tokenizer " << f.tokenizer;
  if (!f.methods.empty()) cmd << " --methods " << f.methods;
  if (!f.presets.empty()) cmd << " --presets " << f.presets;
  for (const auto& c : f.configs) cmd << " --config '" << c << "'";
  cmd << " --bits";
  for (const auto& b : f.bits) cmd << ' ' << b;
  for (const auto& s : f.sets) cmd << " --set " << s;
  cmd << " --seed " << f.seed << " --ctx " << f.ctx;
  if (f.stride) cmd << " --stride " << f.stride;
  if (f.max_tokens) cmd << " --max-tokens " << f.max_tokens;
  cmd << " --chunking " << f.chunking;
  if (f.chunks) cmd << " --chunks " << f.chunks;
  cmd << " --tail " << f.tail << " --batch " << f.batch << " --kv-dtype " << f.kv_dtype;
  if (!f.kv_dtypes.empty()) cmd << " --kv-dtypes " << f.kv_dtypes;
  if (f.thread_count() != 0) cmd << " --threads " << f.thread_count();
  cmd << " --out " << f.out;
  return cmd.str();
}

std::string host_description() {
  utsname name{};
  std::string machine = uname(&name) == 0 ? name.machine : "unknown";
  return std::to_string(std::thread::hardware_concurrency()) + " hardware threads, " + machine;
}

struct Setting {
  std::string method;
  std::string bits;
  std::string settings;
  veloxquant::KVCacheConfig config;
};

// Every (method, bits) to run; refusals (standalone methods, bits out of range) go to skipped.
std::vector<Setting> plan_settings(const BenchFlags& f, std::vector<ev::SkippedSetting>& skipped) {
  // Presets first (unknown name -> error listing the known ones); with --presets alone, only they run.
  std::vector<Setting> preset_settings;
  for (const auto& name : split_commas(f.presets)) {
    const veloxquant::KvPreset& preset = veloxquant::require_kv_preset(name);
    Setting s{preset.method, "", "preset=" + preset.name, veloxquant::kv_preset_config(preset, f.seed)};
    for (const auto& set : preset.sets) s.settings += "," + set;
    const veloxquant::MethodDescriptor& method = veloxquant::require_method(preset.method);
    for (const auto& set : f.sets) {
      if (!veloxquant::field_relevant_to(method, set.substr(0, set.find('=')))) continue;
      veloxquant::apply_field_assignment(s.config, set);
      s.settings += "," + set;
    }
    veloxquant::validate_per_layer_config(s.config);
    preset_settings.push_back(std::move(s));
  }
  for (const auto& text : f.configs) {
    std::istringstream words(text);
    std::string name;
    words >> name;
    if (name.empty()) throw veloxquant::QuantizerConfigError("--config needs a method or preset name, got ''");
    const bool is_preset = std::any_of(veloxquant::kv_presets().begin(), veloxquant::kv_presets().end(),
                                       [&](const veloxquant::KvPreset& p) { return p.name == name; });
    Setting s{"", "", "", {}};
    if (is_preset) {
      const veloxquant::KvPreset& preset = veloxquant::require_kv_preset(name);
      s.method = preset.method;
      s.settings = "preset=" + preset.name;
      s.config = veloxquant::kv_preset_config(preset, f.seed);
      for (const auto& set : preset.sets) s.settings += "," + set;
    } else {
      veloxquant::require_method(name);  // unknown -> error naming valid ones
      s.method = name;
      s.config.method = name;
      s.config.seed = f.seed;
    }
    for (std::string set; words >> set;) {
      veloxquant::apply_field_assignment(s.config, set);
      s.settings += (s.settings.empty() ? "" : ",") + set;
    }
    veloxquant::validate_per_layer_config(s.config);
    s.settings = "config=" + s.settings;
    preset_settings.push_back(std::move(s));
  }
  if ((!preset_settings.empty() || !f.kv_dtypes.empty()) && f.methods.empty()) return preset_settings;
  std::vector<std::string> names = f.methods.empty() ? veloxquant::servable_method_names() : split_commas(f.methods);
  for (const auto& name : names) veloxquant::require_method(name);  // unknown -> error naming valid ones
  for (const auto& set : f.sets) {
    const auto eq = set.find('=');
    if (eq == std::string::npos || !veloxquant::find_field(set.substr(0, eq))) {
      throw veloxquant::QuantizerConfigError("--set expects FIELD=VALUE with a declared field, got '" + set + "'");
    }
  }
  std::vector<Setting> settings = std::move(preset_settings);
  for (const auto& name : names) {
    const veloxquant::MethodDescriptor& method = veloxquant::require_method(name);
    if (!method.is_servable) {
      skipped.push_back({name, "", "standalone method: refused by for_model, it cannot serve a model"});
      continue;
    }
    // The --set fields decide whether bits matter (an eviction method storing dtype rows
    // ignores them): one row per --bits only then.
    veloxquant::KVCacheConfig probe;
    probe.method = name;
    try {
      for (const auto& set : f.sets) {
        if (veloxquant::field_relevant_to(method, set.substr(0, set.find('=')))) {
          veloxquant::apply_field_assignment(probe, set);
        }
      }
    } catch (const std::exception&) {
      // A bad value is reported per setting below, where it is applied again.
    }
    const std::vector<std::string> bit_settings =
        veloxquant::method_reads_bit_width(method, probe) ? f.bits : std::vector<std::string>{""};
    for (const auto& bits : bit_settings) {
      Setting s{name, bits, "", {}};
      s.config.method = name;
      s.config.seed = f.seed;
      try {
        if (!bits.empty()) {
          const veloxquant::FieldSpec* spec = veloxquant::find_generic_field("bit_width_inlier");
          spec->set(s.config, veloxquant::parse_field_value(*spec, bits));
        }
        for (const auto& set : f.sets) {
          if (!veloxquant::field_relevant_to(method, set.substr(0, set.find('=')))) continue;
          veloxquant::apply_field_assignment(s.config, set);
          s.settings += (s.settings.empty() ? "" : ",") + set;
        }
        veloxquant::validate_per_layer_config(s.config);
        settings.push_back(std::move(s));
      } catch (const std::exception& e) {
        skipped.push_back({name, bits, e.what()});
      }
    }
  }
  return settings;
}

void run_bench(const BenchFlags& f) {
  apps::require_float_baseline(f.kv_dtype, "bench-methods");
  const std::vector<lm::KVCacheType> kv_types = apps::parse_kv_type_list(f.kv_dtypes);
  std::vector<ev::SkippedSetting> skipped;
  std::vector<Setting> settings = plan_settings(f, skipped);
  ev::EvalOptions options;
  options.chunking = ev::parse_chunking(f.chunking);
  options.ctx = f.ctx;
  options.stride = f.stride;
  options.max_chunks = f.chunks;
  options.tail = f.tail;
  options.batch = f.batch;
  const std::string text = ev::read_text_file(f.text);

  const lm::LoadedModel loaded = apps::load_model_from_flags(f.model, f.tokenizer, f.kv_dtype, f.thread_count());
  const lm::Model& model = *loaded.model;
  ev::TokenizedText tokens = ev::tokenize_text(*loaded.tokenizer, text);
  ev::truncate_tokens(tokens, f.max_tokens);

  // A setting the model cannot take (head_dim, bit list length) is skipped, not fatal.
  std::vector<ev::MethodUnderTest> methods;
  std::vector<Setting> kept;
  for (auto& s : settings) {
    try {
      veloxquant::KVCacheBuilder::for_model(model, s.config);
    } catch (const std::exception& e) {
      skipped.push_back({s.method, s.bits, e.what()});
      continue;
    }
    const bool preset = s.settings.rfind("preset=", 0) == 0;
    const bool config = s.settings.rfind("config=", 0) == 0;
    const std::string label = preset   ? s.settings.substr(7, s.settings.find(',') - 7) + " " + s.method
                              : config ? "config " + std::to_string(methods.size() + 1) + " " + s.method
                                       : s.method;
    methods.push_back({label + (s.bits.empty() ? "" : " b=" + s.bits),
                       [&model, cfg = s.config] { return veloxquant::KVCacheBuilder::for_model(model, cfg); }});
    kept.push_back(s);
  }
  // The host's own cache in llama.cpp's types, beside the presets in the same windows.
  for (const lm::KVCacheType type : kv_types) {
    const std::string name(lm::kv_cache_type_name(type));
    lm::make_kv_type_caches(model, type);  // a head dim the type cannot take fails here
    methods.push_back({"kv-dtype " + name, [&model, type] { return lm::make_kv_type_caches(model, type); }});
    kept.push_back({"kv-dtype " + name, "", "kv_dtype=" + name, {}});
  }
  if (methods.empty()) throw base::InvalidArgument("no method setting could be evaluated on this model");
  std::fprintf(stderr, "bench-methods: %zu setting(s), %zu skipped\n", methods.size(), skipped.size());

  apps::ProgressBar bar(stderr, "bench", apps::is_terminal(stderr));
  options.on_window = [&bar](int64_t done, int64_t total) {
    bar.update(done, total);
    if (!apps::is_terminal(stderr))
      std::fprintf(stderr, "bench-methods: window %lld/%lld\n", static_cast<long long>(done),
                   static_cast<long long>(total));
  };
  const ev::EvalRun run = ev::run_evaluation(model, tokens.tokens, tokens.bos, methods, options);
  bar.finish();

  ev::BenchReport report;
  report.command = command_line(f);
  report.model = f.model;
  report.text = f.text;
  report.host = host_description();
  report.skipped = skipped;
  report.peak_rss_bytes = run.peak_rss_bytes;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    report.records.push_back(
        ev::make_record(run, i, options, {f.model, kept[i].method, kept[i].bits, kept[i].settings}));
  }
  report.references.push_back({"native cache (measured)", run.baseline.kv_bytes_per_token});
  const auto elements = static_cast<int64_t>(apps::full_precision_kv_bytes(model, 1, lm::DType::F32) / 4);
  for (const auto& format : ev::llama_cpp_kv_formats()) {
    if (format.name == "f16") continue;  // the native cache line is the f16 reference
    report.references.push_back({"llama.cpp " + format.name + " (size only)",
                                 ev::reference_bytes_per_token(format.bits_per_element, elements)});
  }
  ev::write_bench_report(report, f.out);
  std::printf("%s", ev::bench_report_markdown(report, "results.svg").c_str());
  std::fprintf(stderr, "bench-methods: wrote %s/results.json, results.md, results.svg\n", f.out.c_str());
}

apps::CommandRegistration registration{
    "bench-methods", [](CLI::App& root) {
      auto flags = std::make_shared<BenchFlags>();
      auto* cmd = root.add_subcommand("bench-methods",
                                      "Evaluate every servable method (or --methods) at each --bits against the native "
                                      "cache; write results.json, results.md and results.svg");
      apps::add_model_flags(*cmd, *flags);
      cmd->add_option("--text", flags->text, "Text file to evaluate on")->required();
      cmd->add_option("--methods", flags->methods, "Comma-separated methods (default: every servable method)");
      cmd->add_option("--presets", flags->presets,
                      "Comma-separated presets (q8,q5,q4,q3; see `veloxquant methods`); alone, only they run");
      cmd->add_option("--config", flags->configs,
                      "'NAME FIELD=VALUE ...' (NAME a method or a preset): one more setting of its own, beside the "
                      "others in the same windows; --set does not apply to it (repeatable)");
      cmd->add_option("--bits", flags->bits, "Bit settings to run for methods that read bit_width_inlier")
          ->capture_default_str();
      cmd->add_option("--set", flags->sets, "FIELD=VALUE applied to every method that reads FIELD (repeatable)");
      cmd->add_option("--seed", flags->seed, "Cache seed")->capture_default_str();
      cmd->add_option("--ctx", flags->ctx, "Tokens per window")->capture_default_str();
      cmd->add_option("--stride", flags->stride, "Sliding windows start every N tokens (0 = ctx)")
          ->capture_default_str();
      cmd->add_option("--max-tokens", flags->max_tokens, "Use only the first N tokens of the text (0 = all)")
          ->capture_default_str();
      cmd->add_option("--chunking", flags->chunking, "sliding or llama")->capture_default_str();
      cmd->add_option("--chunks", flags->chunks, "llama chunking: at most N chunks (0 = all)")->capture_default_str();
      cmd->add_option("--tail", flags->tail, "KL/top-1 over the last fraction of each window")->capture_default_str();
      cmd->add_option("--batch", flags->batch, "Tokens per forward call")->capture_default_str();
      cmd->add_option("--kv-dtypes", flags->kv_dtypes,
                      "Comma-separated host cache types measured beside the native cache, e.g. q8_0,q5_0,q4_0 "
                      "(llama.cpp's block formats); with --presets and no --methods, only these and the presets run");
      cmd->add_option("--out", flags->out, "Output directory")->required();
      cmd->callback([flags] { run_bench(*flags); });
    }};

}  // namespace
