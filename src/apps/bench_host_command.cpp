// `veloxquant bench-host`: the host's prefill and decode tokens/s at several context lengths
// (veloxquant/eval/host_bench.h says exactly what one row times), peak RSS, as a table or as
// one JSON record — the record tools/bench_llama_cpp.py sets beside llama.cpp's numbers.
// With --methods, several caches in one process, alternating rounds, each beside the native
// cache of the same run, with a streaming-read probe to say how close decode runs to memory
// speed (veloxquant/eval/host_bench_methods.h), and an SVG plot (--plot).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/command_registry.h"
#include "apps/kv_method_flags.h"
#include "apps/model_loading.h"
#include "base/error.h"
#include "base/read_bandwidth.h"
#include "base/thread_pool.h"
#include "lm/cache/kv_type_caches.h"
#include "lm/load.h"
#include "veloxquant/core/simd_kernels.h"
#include "veloxquant/errors.h"
#include "veloxquant/eval/decode_traffic.h"
#include "veloxquant/eval/host_bench.h"
#include "veloxquant/eval/host_bench_methods.h"
#include "veloxquant/eval/host_bench_methods_report.h"
#include "veloxquant/eval/host_bench_report.h"
#include "veloxquant/eval/method_list.h"
#include "veloxquant/eval/process_memory.h"
#include "veloxquant/eval/speed_plot_svg.h"
#include "veloxquant/eval/text_source.h"
#include "veloxquant/version.h"

#ifndef VQ_BUILD_TYPE
#define VQ_BUILD_TYPE "unknown"
#endif

namespace {

namespace ev = veloxquant::eval;

struct BenchHostFlags : apps::ModelFlags {  // --model, --tokenizer, --threads, --kv-dtype (model_loading.h)
  std::string text;
  std::vector<int64_t> contexts{128, 1024, 4096, 8192};
  int64_t decode_tokens = 32;
  int64_t prefill_tokens = 512;
  int64_t batch = 512;
  int repeat = 1;
  std::string decode_stat = "total";  // --decode-stat: total | median
  apps::KvMethodFlags kv;
  std::string methods;      // --methods: "" = the single-method run of --method
  std::string kv_dtypes;    // --kv-dtypes (with --methods): host cache types timed beside the native one
  int64_t probe_mib = 512;  // the bandwidth probe's buffer (0 = no probe)
  int probe_passes = 3;
  std::string plot;      // --plot FILE (with --methods)
  std::string json_out;  // --json-out FILE (with --methods): the record, beside the printed table
  bool json = false;
};

template <typename T>
std::string join(const std::vector<T>& parts) {
  std::ostringstream out;
  for (std::size_t i = 0; i < parts.size(); ++i) out << (i ? "," : "") << parts[i];
  return out.str();
}

// The flags rendered back as a command line: it travels with the numbers it produced.
std::string command_line(const BenchHostFlags& f) {
  std::ostringstream cmd;
  cmd << "veloxquant bench-host --model " << f.model;
  if (!f.tokenizer.empty()) cmd << " --tokenizer " << f.tokenizer;
  if (!f.text.empty()) cmd << " --text " << f.text;
  cmd << " --ctx " << join(f.contexts) << " --decode-tokens " << f.decode_tokens << " --prefill " << f.prefill_tokens
      << " --batch " << f.batch << " --repeat " << f.repeat << " --decode-stat " << f.decode_stat << " --threads "
      << f.threads << " --kv-dtype " << f.kv_dtype;
  if (f.kv.method != "none") cmd << " --method " << f.kv.method;
  if (!f.kv.bits.empty()) cmd << " --bits " << f.kv.bits;
  if (!f.kv.preset.empty()) cmd << " --preset " << f.kv.preset;
  for (const auto& s : f.kv.sets) cmd << " --set " << s;
  if (!f.methods.empty()) {
    if (!f.kv_dtypes.empty()) cmd << " --kv-dtypes " << f.kv_dtypes;
    cmd << " --methods \"" << f.methods << "\" --probe-mib " << f.probe_mib << " --probe-passes " << f.probe_passes;
    if (!f.plot.empty()) cmd << " --plot " << f.plot;
    if (!f.json_out.empty()) cmd << " --json-out " << f.json_out;
  }
  if (f.json) cmd << " --json";
  return cmd.str();
}

ev::HostBenchOptions bench_options(const BenchHostFlags& f) {
  ev::HostBenchOptions options;
  options.contexts = f.contexts;
  options.decode_tokens = f.decode_tokens;
  options.prefill_tokens = f.prefill_tokens;
  options.batch = f.batch;
  options.repeat = f.repeat;
  options.decode_statistic = ev::parse_decode_statistic(f.decode_stat);
  return options;
}

// The prompt both modes time: --text tokenized and repeated, or the fixed token pattern.
std::vector<int32_t> bench_prompt(const lm::LoadedModel& loaded, const std::string& text,
                                  const ev::HostBenchOptions& options) {
  int64_t needed = options.prefill_tokens;
  for (const int64_t ctx : options.contexts) needed = std::max(needed, ctx);
  if (text.empty()) {
    return ev::pattern_tokens(needed, loaded.model->config().vocab_size, loaded.tokenizer->bos_id());
  }
  const ev::TokenizedText tokens = ev::tokenize_text(*loaded.tokenizer, text);
  return ev::cycle_tokens(tokens.tokens, needed, tokens.bos);
}

// The facts every report carries (which machine, which build, which model, which counts).
ev::HostBenchReport run_facts(const BenchHostFlags& f, const lm::Model& model) {
  ev::HostBenchReport report;
  report.command = command_line(f);
  report.version = veloxquant::version();
  report.model = f.model;
  report.model_name = model.config().name;
  report.architecture = model.config().architecture;
  report.context_length = model.config().context_length;
  report.threads = f.thread_count() > 0 ? f.thread_count() : static_cast<int>(std::thread::hardware_concurrency());
  report.build_type = VQ_BUILD_TYPE;
  report.cpu = ev::cpu_description();
  report.simd_target = veloxquant::core::simd::target_name();
  report.kv_dtype = f.kv_dtype;
  report.prompt = f.text.empty() ? "pattern" : f.text;
  report.decode_tokens = f.decode_tokens;
  report.batch = f.batch;
  report.repeat = f.repeat;
  // The name the library gives the parsed statistic, so the record never carries a spelling it refuses.
  report.decode_statistic = ev::decode_statistic_name(ev::parse_decode_statistic(f.decode_stat));
  return report;
}

void print_progress(const std::string& label, int repeat, int of) {
  std::fprintf(stderr, "bench-host: %s (run %d/%d)\n", label.c_str(), repeat + 1, of);
}

void run_bench_host(const BenchHostFlags& f) {
  // Everything checkable without the model fails before the (slow) load.
  const auto kv_config = apps::kv_config_from_flags(f.kv);
  ev::HostBenchOptions options = bench_options(f);
  ev::validate_host_bench(options, 0);
  const std::string text = f.text.empty() ? std::string() : ev::read_text_file(f.text);

  const lm::LoadedModel loaded = apps::load_model_from_flags(f.model, f.tokenizer, f.kv_dtype, f.thread_count());
  lm::Model& model = *loaded.model;
  ev::validate_host_bench(options, model.config().context_length);  // now against the context length
  const std::string method = apps::apply_kv_method(model, kv_config);
  const std::vector<int32_t> prompt = bench_prompt(loaded, text, options);

  options.on_run = [&f](const std::string& label, int repeat) { print_progress(label, repeat, f.repeat); };
  ev::reset_peak_rss();
  const std::vector<ev::HostBenchRow> rows = ev::run_host_bench(model, prompt, options);

  ev::HostBenchReport report = run_facts(f, model);
  report.method = method;
  report.bits = f.kv.bits;
  report.settings = apps::kv_settings_text(f.kv);
  report.peak_rss_bytes = ev::peak_rss_bytes();
  report.rows = rows;
  if (f.json) {
    std::printf("%s\n", ev::host_bench_json(report).dump(2).c_str());
  } else {
    std::printf("%s", ev::host_bench_table(report).c_str());
  }
}

// An output path that cannot be written fails before the minutes of measuring, not after.
void check_writable(const char* flag, const std::string& path) {
  if (!path.empty() && !std::ofstream(path, std::ios::app)) {
    throw base::InvalidArgument(std::string(flag) + ": cannot write '" + path + "'");
  }
}

void write_file(const char* flag, const std::string& path, const std::string& content) {
  std::ofstream out(path);
  out << content;
  if (!out.flush()) throw base::InvalidArgument(std::string(flag) + ": writing '" + path + "' failed");
}

// One --methods entry as the single-method flags, so it is validated exactly like --method.
apps::KvMethodFlags entry_flags(const ev::MethodEntry& entry) {
  apps::KvMethodFlags flags;
  flags.method = entry.preset.empty() ? entry.method : "none";
  flags.preset = entry.preset;
  flags.bits = entry.bits;
  if (entry.seed) flags.seed = *entry.seed;
  flags.sets = entry.sets;
  return flags;
}

// Runs `body`, re-throwing a configuration error with the entry it came from in front.
template <typename Body>
auto for_entry(std::size_t index, const ev::MethodEntry& entry, Body&& body) {
  try {
    return body();
  } catch (const veloxquant::QuantizerConfigError& e) {
    throw veloxquant::QuantizerConfigError("--methods entry " + std::to_string(index + 1) + " ('" + entry.label +
                                           "'): " + e.what());
  }
}

void run_bench_host_methods(const BenchHostFlags& f) {
  // Every entry is validated before the model is loaded: a typo in the fifth entry must not
  // cost the minutes the first four take to measure.
  if (f.kv.method != "none" || !f.kv.bits.empty() || !f.kv.sets.empty()) {
    throw base::InvalidArgument(
        "--methods and --method/--bits/--set exclude each other: give each method's "
        "--bits/--set inside its --methods entry");
  }
  if (f.probe_mib < 0) throw base::InvalidArgument("--probe-mib must be >= 0, got " + std::to_string(f.probe_mib));
  if (f.probe_passes < 1) {
    throw base::InvalidArgument("--probe-passes must be >= 1, got " + std::to_string(f.probe_passes));
  }
  apps::require_float_baseline(f.kv_dtype, "bench-host --methods");
  const std::vector<lm::KVCacheType> kv_types = apps::parse_kv_type_list(f.kv_dtypes);
  std::vector<ev::MethodEntry> entries = ev::parse_method_list(f.methods);
  // The ratios need the native cache measured in the same rounds: it is added, first, when
  // the list does not name it.
  if (std::none_of(entries.begin(), entries.end(), [](const ev::MethodEntry& e) { return e.method == "none"; })) {
    ev::MethodEntry native;
    native.method = "none";
    native.label = "none";
    entries.insert(entries.begin(), native);
    std::fprintf(stderr, "bench-host: --methods has no 'none'; timing the native cache too, for the ratios\n");
  }
  std::vector<std::optional<veloxquant::KVCacheConfig>> configs;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].method == "none" && entries[i].label != "none") {
      throw veloxquant::QuantizerConfigError("--methods entry " + std::to_string(i + 1) + " ('" + entries[i].label +
                                             "'): 'none' is the native cache and takes no --bits/--set/--seed");
    }
    configs.push_back(for_entry(i, entries[i], [&] { return apps::kv_config_from_flags(entry_flags(entries[i])); }));
  }
  ev::HostBenchOptions options = bench_options(f);
  ev::validate_host_bench(options, 0);
  const std::string text = f.text.empty() ? std::string() : ev::read_text_file(f.text);
  check_writable("--plot", f.plot);
  check_writable("--json-out", f.json_out);

  const lm::LoadedModel loaded = apps::load_model_from_flags(f.model, f.tokenizer, f.kv_dtype, f.thread_count());
  lm::Model& model = *loaded.model;
  ev::validate_host_bench(options, model.config().context_length);
  std::vector<ev::BenchCache> caches;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (!configs[i]) {
      caches.push_back({entries[i].label, [&model] { return model.native_make_cache(); }});
      continue;
    }
    // patch_model_kv_cache checks the per-layer facts (head_dim, a bit list's length) and
    // installs a hook that builds fresh caches; the hook is kept and the model left unpatched.
    for_entry(i, entries[i], [&] { return apps::apply_kv_method(model, configs[i]); });
    caches.push_back({entries[i].label, model.make_cache});
    model.make_cache = nullptr;
  }
  for (const lm::KVCacheType type : kv_types) {
    ev::MethodEntry entry;
    entry.method = "kv-dtype";
    entry.label = "kv-dtype " + std::string(lm::kv_cache_type_name(type));
    lm::make_kv_type_caches(model, type);  // a head dim the type cannot take fails before timing
    caches.push_back({entry.label, [&model, type] { return lm::make_kv_type_caches(model, type); }});
    entries.push_back(entry);
  }
  const std::vector<int32_t> prompt = bench_prompt(loaded, text, options);
  const std::size_t weight_bytes = ev::decode_weight_bytes_of_file(f.model, model.config());

  ev::HostBenchMethodsReport report;
  report.run = run_facts(f, model);
  report.methods = entries;
  report.weight_bytes_per_token = weight_bytes;
  if (f.probe_mib > 0) {
    // Same thread count as the model's pool; before the peak-RSS reset, so its buffer does
    // not count as the bench's memory.
    std::fprintf(stderr, "bench-host: streaming-read probe, %lld MiB x %d passes\n",
                 static_cast<long long>(f.probe_mib), f.probe_passes);
    base::ThreadPool pool(report.run.threads);
    report.probe = base::measure_read_bandwidth(pool, static_cast<std::size_t>(f.probe_mib) << 20, f.probe_passes);
  }
  const int rounds = f.repeat;
  options.on_run = [rounds](const std::string& label, int repeat) { print_progress(label, repeat, rounds); };
  ev::reset_peak_rss();
  report.rows = ev::run_host_bench_methods(model, prompt, options, caches);
  ev::fill_traffic(report.rows, weight_bytes, report.probe ? report.probe->best_bytes_per_s : 0.0);
  report.run.peak_rss_bytes = ev::peak_rss_bytes();

  if (!f.plot.empty()) {
    const std::string model_name = std::filesystem::path(f.model).filename().string();
    write_file("--plot", f.plot,
               ev::decode_speed_plot_svg(report.rows, "decode tokens/s by KV cache: " + model_name + ", " +
                                                          std::to_string(report.run.threads) + " thread(s), best of " +
                                                          std::to_string(f.repeat)));
  }
  if (!f.json_out.empty()) write_file("--json-out", f.json_out, ev::host_bench_methods_json(report).dump(2) + "\n");
  if (f.json) {
    std::printf("%s\n", ev::host_bench_methods_json(report).dump(2).c_str());
  } else {
    std::printf("%s", ev::host_bench_methods_table(report).c_str());
  }
}

apps::CommandRegistration registration{
    "bench-host", [](CLI::App& root) {
      auto flags = std::make_shared<BenchHostFlags>();
      auto* cmd = root.add_subcommand(
          "bench-host",
          "Prefill and decode tokens/s of the host at each --ctx (a row ends with ctx tokens cached: "
          "prefill ctx - N tokens, then N greedy decode steps), a fixed prefill row, and peak RSS");
      apps::add_model_flags(*cmd, *flags);
      cmd->add_option("--text", flags->text,
                      "Prompt text, tokenized and repeated to length (default: a fixed token pattern, "
                      "bos then (7919*i+11) mod vocab)");
      cmd->add_option("--ctx", flags->contexts, "Comma-separated context lengths")
          ->delimiter(',')
          ->capture_default_str();
      cmd->add_option("--decode-tokens", flags->decode_tokens, "Greedy decode steps per context (N)")
          ->capture_default_str();
      cmd->add_option("--prefill", flags->prefill_tokens, "Tokens of the fixed prefill row (0 = no such row)")
          ->capture_default_str();
      cmd->add_option("--batch", flags->batch, "Tokens per prefill forward call (llama.cpp's n_batch)")
          ->capture_default_str();
      cmd->add_option("--repeat", flags->repeat, "Runs per row; the best (fastest) is reported")->capture_default_str();
      cmd->add_option("--decode-stat", flags->decode_stat,
                      "How a decode row is timed: 'total' (all steps on one clock, as llama-bench) or 'median' "
                      "(the median step x steps: robust to a few steps stalled by other work on a shared machine)")
          ->capture_default_str();
      apps::add_kv_method_flags(*cmd, flags->kv);
      CLI::Option* methods =
          cmd->add_option("--methods", flags->methods,
                          "Several caches in one run, ';'-separated, each 'METHOD [--bits B] [--set FIELD=VALUE]... "
                          "[--seed S]', e.g. \"none;kivi --bits 4;h2o --set h2o_budget=512\"; timed in alternating "
                          "rounds, each beside the native cache ('none', added when missing)");
      cmd->add_option("--kv-dtypes", flags->kv_dtypes,
                      "With --methods: host cache types timed beside the native cache too, e.g. q8_0,q5_0,q4_0 "
                      "(llama.cpp's block formats)");
      cmd->add_option("--probe-mib", flags->probe_mib,
                      "With --methods: MiB the streaming-read bandwidth probe reads (0 = no probe; keep it far "
                      "above the L3 cache)")
          ->capture_default_str();
      cmd->add_option("--probe-passes", flags->probe_passes, "With --methods: probe passes, the best is kept")
          ->capture_default_str();
      cmd->add_option("--plot", flags->plot, "With --methods: write an SVG plot of decode tok/s against context here");
      cmd->add_option("--json-out", flags->json_out,
                      "With --methods: also write the JSON record here (the table still prints)");
      cmd->add_flag("--json", flags->json, "Print one JSON record instead of the table");
      cmd->callback([flags, methods] {
        if (methods->count() > 0) {
          run_bench_host_methods(*flags);
          return;
        }
        if (!flags->plot.empty()) throw base::InvalidArgument("--plot needs --methods (it plots one line per method)");
        if (!flags->json_out.empty())
          throw base::InvalidArgument("--json-out needs --methods (without it, use --json)");
        if (!flags->kv_dtypes.empty()) {
          throw base::InvalidArgument("--kv-dtypes needs --methods (without it, time one type with --kv-dtype)");
        }
        run_bench_host(*flags);
      });
    }};

}  // namespace
