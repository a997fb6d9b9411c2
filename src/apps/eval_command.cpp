// `veloxquant eval`: teacher-forced quality, memory and speed of one KV-cache method against
// the host's native cache, computed on the same windows in the same run (docs/evaluation.md
// says how every number is computed). Parse, call veloxquant::eval, print.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

#include "apps/command_registry.h"
#include "apps/model_loading.h"
#include "apps/kv_method_flags.h"
#include "apps/progress_bar.h"
#include "base/error.h"
#include "lm/cache/kv_type_caches.h"
#include "lm/load.h"
#include "veloxquant/builder/kv_cache_builder.h"
#include "veloxquant/eval/eval_record.h"
#include "veloxquant/eval/eval_runner.h"
#include "veloxquant/eval/text_source.h"

namespace {

namespace ev = veloxquant::eval;

struct EvalFlags : apps::ModelFlags {  // --model, --tokenizer, --threads, --kv-dtype (model_loading.h)
  std::string text;
  apps::KvMethodFlags kv;
  int64_t ctx = 512;
  int64_t stride = 0;
  int64_t max_tokens = 0;
  std::string chunking = "sliding";
  int64_t chunks = 0;
  double tail = 1.0;
  int64_t batch = 512;
  bool json = false;
};

void print_human(const ev::EvalRecord& r) {
  std::printf("model      %s\n", r.model.c_str());
  std::printf("method     %s%s%s%s%s\n", r.method.c_str(), r.bits.empty() ? "" : "  bits=", r.bits.c_str(),
              r.settings.empty() ? "" : "  ", r.settings.c_str());
  std::printf(
      "windows    %lld x %lld tokens (%s, stride %lld, batch %lld); %lld targets scored, %lld compared "
      "(tail %.3g)\n",
      static_cast<long long>(r.n_windows), static_cast<long long>(r.ctx), r.chunking.c_str(),
      static_cast<long long>(r.stride), static_cast<long long>(r.batch), static_cast<long long>(r.n_tokens),
      static_cast<long long>(r.n_compared), r.tail);
  std::printf("perplexity method %.4f +/- %.4f   baseline %.4f +/- %.4f   (%+.3f%%)\n", r.ppl, r.ppl_stderr,
              r.ppl_baseline, r.ppl_baseline_stderr, 100.0 * (r.ppl / r.ppl_baseline - 1.0));
  std::printf("KL(baseline||method) mean %.6g  max %.6g nats   top-1 agreement %.2f%%\n", r.kld, r.kld_max,
              r.top1_agreement);
  std::printf("KV bytes/token    method %.1f   baseline %.1f   (%.2fx smaller)\n", r.kv_bytes_per_token,
              r.kv_bytes_per_token_baseline,
              r.kv_bytes_per_token > 0 ? r.kv_bytes_per_token_baseline / r.kv_bytes_per_token : 0.0);
  std::printf("tokens/s          method %.1f   baseline %.1f\n", r.tok_per_s, r.tok_per_s_baseline);
  std::printf("peak RSS          %.1f MiB\n", static_cast<double>(r.peak_rss_bytes) / (1024.0 * 1024.0));
}

void run_eval(const EvalFlags& f) {
  // Everything that can be checked without the model fails before the (slow) load.
  const auto config = apps::kv_config_from_flags(f.kv);
  const std::optional<lm::KVCacheType> block_type = apps::block_kv_type_under_test(f.kv_dtype, config.has_value());
  ev::EvalOptions options;
  options.chunking = ev::parse_chunking(f.chunking);
  if (options.chunking == ev::Chunking::kLlama && f.stride != 0) {
    throw base::InvalidArgument("--stride applies to --chunking sliding only (llama chunks never overlap), got " +
                                std::to_string(f.stride));
  }
  options.ctx = f.ctx;
  options.stride = f.stride;
  options.max_chunks = f.chunks;
  options.tail = f.tail;
  options.batch = f.batch;
  const std::string text = ev::read_text_file(f.text);

  const lm::LoadedModel loaded =
      apps::load_model_from_flags(f.model, f.tokenizer, block_type ? "f16" : f.kv_dtype, f.thread_count());
  const lm::Model& model = *loaded.model;
  ev::TokenizedText tokens = ev::tokenize_text(*loaded.tokenizer, text);
  ev::truncate_tokens(tokens, f.max_tokens);

  ev::MethodUnderTest method;
  if (config) {
    // Builds one list now so a config the model cannot take (bit list length, head_dim) fails
    // before the first window.
    veloxquant::KVCacheBuilder::for_model(model, *config);
    method = {config->method, [&model, cfg = *config] { return veloxquant::KVCacheBuilder::for_model(model, cfg); }};
  } else if (block_type) {
    lm::make_kv_type_caches(model, *block_type);  // a head dim the type cannot take fails here
    method = {"kv-dtype " + f.kv_dtype, [&model, type = *block_type] { return lm::make_kv_type_caches(model, type); }};
  } else {
    method = {"none", [&model] { return model.native_make_cache(); }};
  }
  apps::ProgressBar bar(stderr, "eval", apps::is_terminal(stderr));
  options.on_window = [&bar](int64_t done, int64_t total) { bar.update(done, total); };
  const ev::EvalRun run = ev::run_evaluation(model, tokens.tokens, tokens.bos, {method}, options);
  bar.finish();
  const ev::EvalRecord record =
      ev::make_record(run, 0, options, {f.model, method.name, f.kv.bits, apps::kv_settings_text(f.kv)});
  if (f.json) {
    std::printf("%s\n", ev::to_json(record).dump(2).c_str());
  } else {
    print_human(record);
  }
}

apps::CommandRegistration registration{
    "eval", [](CLI::App& root) {
      auto flags = std::make_shared<EvalFlags>();
      auto* cmd = root.add_subcommand(
          "eval",
          "Perplexity, KL(baseline||method), top-1 agreement, KV bytes/token, tokens/s and peak RSS of a "
          "KV method against the native cache, on the same windows of a text");
      apps::add_model_flags(*cmd, *flags);
      cmd->add_option("--text", flags->text, "Text file to evaluate on (read byte for byte)")->required();
      apps::add_kv_method_flags(*cmd, flags->kv);
      cmd->add_option("--ctx", flags->ctx, "Tokens per window")->capture_default_str();
      cmd->add_option("--stride", flags->stride, "Sliding windows start every N tokens (0 = ctx, no overlap)")
          ->capture_default_str();
      cmd->add_option("--max-tokens", flags->max_tokens, "Use only the first N tokens of the text (0 = all)")
          ->capture_default_str();
      cmd->add_option("--chunking", flags->chunking,
                      "sliding, or llama = llama.cpp llama-perplexity chunks (BOS first, second half scored)")
          ->capture_default_str();
      cmd->add_option("--chunks", flags->chunks, "llama chunking: at most N chunks (0 = all)")->capture_default_str();
      cmd->add_option("--tail", flags->tail,
                      "Long-context mode: KL/top-1 over the last fraction of each window (1 = every scored target)")
          ->capture_default_str();
      cmd->add_option("--batch", flags->batch, "Tokens per forward call (prefill chunk; 1 = decode-like)")
          ->capture_default_str();
      cmd->add_flag("--json", flags->json, "Print one JSON object instead of text");
      cmd->callback([flags] { run_eval(*flags); });
    }};

}  // namespace
