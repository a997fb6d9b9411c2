// `veloxquant bench-host`: the host's prefill and decode tokens/s at several context lengths
// (veloxquant/eval/host_bench.h says exactly what one row times), peak RSS, as a table or as
// one JSON record — the record tools/bench_llama_cpp.py sets beside llama.cpp's numbers.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "apps/command_registry.h"
#include "apps/kv_method_flags.h"
#include "apps/model_loading.h"
#include "lm/load.h"
#include "veloxquant/core/simd_kernels.h"
#include "veloxquant/eval/host_bench.h"
#include "veloxquant/eval/host_bench_report.h"
#include "veloxquant/eval/process_memory.h"
#include "veloxquant/eval/text_source.h"
#include "veloxquant/version.h"

#ifndef VQ_BUILD_TYPE
#define VQ_BUILD_TYPE "unknown"
#endif

namespace {

namespace ev = veloxquant::eval;

struct BenchHostFlags {
  std::string model;
  std::string tokenizer;
  std::string text;
  std::vector<int64_t> contexts{128, 1024, 4096, 8192};
  int64_t decode_tokens = 32;
  int64_t prefill_tokens = 512;
  int64_t batch = 512;
  int repeat = 1;
  int threads = 0;
  std::string kv_dtype = "f16";
  apps::KvMethodFlags kv;
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
  cmd << " --ctx " << join(f.contexts) << " --decode-tokens " << f.decode_tokens << " --prefill "
      << f.prefill_tokens << " --batch " << f.batch << " --repeat " << f.repeat << " --threads " << f.threads
      << " --kv-dtype " << f.kv_dtype;
  if (f.kv.method != "none") cmd << " --method " << f.kv.method;
  if (!f.kv.bits.empty()) cmd << " --bits " << f.kv.bits;
  if (!f.kv.preset.empty()) cmd << " --preset " << f.kv.preset;
  for (const auto& s : f.kv.sets) cmd << " --set " << s;
  if (f.json) cmd << " --json";
  return cmd.str();
}

void run_bench_host(const BenchHostFlags& f) {
  // Everything checkable without the model fails before the (slow) load.
  const auto kv_config = apps::kv_config_from_flags(f.kv);
  ev::HostBenchOptions options;
  options.contexts = f.contexts;
  options.decode_tokens = f.decode_tokens;
  options.prefill_tokens = f.prefill_tokens;
  options.batch = f.batch;
  options.repeat = f.repeat;
  ev::validate_host_bench(options, 0);
  const std::string text = f.text.empty() ? std::string() : ev::read_text_file(f.text);

  const lm::LoadedModel loaded = apps::load_model_from_flags(f.model, f.tokenizer, f.kv_dtype, f.threads);
  lm::Model& model = *loaded.model;
  ev::validate_host_bench(options, model.config().context_length);  // now against the context length
  const std::string method = apps::apply_kv_method(model, kv_config);

  int64_t needed = options.prefill_tokens;
  for (const int64_t ctx : options.contexts) needed = std::max(needed, ctx);
  const std::optional<int32_t> bos = loaded.tokenizer->bos_id();
  std::vector<int32_t> prompt;
  if (text.empty()) {
    prompt = ev::pattern_tokens(needed, model.config().vocab_size, bos);
  } else {
    const ev::TokenizedText tokens = ev::tokenize_text(*loaded.tokenizer, text);
    prompt = ev::cycle_tokens(tokens.tokens, needed, tokens.bos);
  }

  options.on_run = [&f](const std::string& label, int repeat) {
    std::fprintf(stderr, "bench-host: %s (run %d/%d)\n", label.c_str(), repeat + 1, f.repeat);
  };
  ev::reset_peak_rss();
  const std::vector<ev::HostBenchRow> rows = ev::run_host_bench(model, prompt, options);

  ev::HostBenchReport report;
  report.command = command_line(f);
  report.version = veloxquant::version();
  report.model = f.model;
  report.model_name = model.config().name;
  report.architecture = model.config().architecture;
  report.context_length = model.config().context_length;
  report.threads = f.threads > 0 ? f.threads : static_cast<int>(std::thread::hardware_concurrency());
  report.build_type = VQ_BUILD_TYPE;
  report.cpu = ev::cpu_description();
  report.simd_target = veloxquant::core::simd::target_name();
  report.method = method;
  report.bits = f.kv.bits;
  report.settings = apps::kv_settings_text(f.kv);
  report.kv_dtype = f.kv_dtype;
  report.prompt = f.text.empty() ? "pattern" : f.text;
  report.decode_tokens = f.decode_tokens;
  report.batch = f.batch;
  report.repeat = f.repeat;
  report.peak_rss_bytes = ev::peak_rss_bytes();
  report.rows = rows;
  if (f.json) {
    std::printf("%s\n", ev::host_bench_json(report).dump(2).c_str());
  } else {
    std::printf("%s", ev::host_bench_table(report).c_str());
  }
}

apps::CommandRegistration registration{"bench-host", [](CLI::App& root) {
  auto flags = std::make_shared<BenchHostFlags>();
  auto* cmd = root.add_subcommand(
      "bench-host", "Prefill and decode tokens/s of the host at each --ctx (a row ends with ctx tokens cached: "
                    "prefill ctx - N tokens, then N greedy decode steps), a fixed prefill row, and peak RSS");
  cmd->add_option("--model,-m", flags->model, "Model file: GGUF or llama2.c checkpoint")->required();
  cmd->add_option("--tokenizer", flags->tokenizer, "Tokenizer file (llama2.c tokenizer or a GGUF)");
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
  cmd->add_option("--threads,-t", flags->threads, "Worker threads (0 = all cores)")->capture_default_str();
  cmd->add_option("--kv-dtype", flags->kv_dtype, "Native cache element type: f16, bf16 or f32")
      ->capture_default_str();
  apps::add_kv_method_flags(*cmd, flags->kv);
  cmd->add_flag("--json", flags->json, "Print one JSON record instead of the table");
  cmd->callback([flags] { run_bench_host(*flags); });
}};

}  // namespace
