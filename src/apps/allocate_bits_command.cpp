// `veloxquant allocate-bits`: per-layer bit widths from measured sensitivity (the original's
// RateQuant allocator, issue 17; docs/allocate_bits.md). Measures, on a calibration text, the KL
// when each attention layer's keys (and values) alone are quantized at each candidate width,
// solves for the lists of least summed KL whose resident bytes per token stay within the budget,
// prints them, then measures the allocation against the uniform configuration it started from.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "apps/command_registry.h"
#include "apps/kv_method_flags.h"
#include "apps/model_loading.h"
#include "apps/progress_bar.h"
#include "base/error.h"
#include "lm/load.h"
#include "veloxquant/allocators/layer_allocation.h"
#include "veloxquant/allocators/layer_sensitivity.h"
#include "veloxquant/builder/kv_cache_builder.h"
#include "veloxquant/config/field_spec.h"
#include "veloxquant/eval/eval_record.h"
#include "veloxquant/eval/eval_runner.h"
#include "veloxquant/eval/text_source.h"

namespace {

namespace ev = veloxquant::eval;
namespace al = veloxquant::allocators;

struct AllocateFlags : apps::ModelFlags {  // --model, --tokenizer, --threads (model_loading.h)
  std::string text;
  std::string eval_text;
  apps::KvMethodFlags kv;
  double avg_bits = 0.0;  // 0 = the bytes of the configuration given (same-size comparison)
  std::string candidate_bits = "2,3,4,5";
  std::string measure_bits;  // "" = every candidate
  int reference_bits = 8;
  int64_t budget_rows = 256;
  int64_t ctx = 1024;
  int64_t chunks = 1;
  int64_t eval_chunks = 0;  // 0 = --chunks
  std::string chunking = "llama";
  double tail = 1.0;
  int64_t batch = 512;
  int methods_per_run = 16;
  bool skip_check = false;
};

std::vector<int> parse_candidates(const std::string& flag, const std::string& text) {
  veloxquant::FieldSpec spec;
  spec.name = flag;
  spec.type = veloxquant::FieldType::kBitWidth;
  const veloxquant::BitWidth bits =
      std::get<veloxquant::BitWidth>(veloxquant::parse_field_value(spec, "[" + text + "]"));
  std::vector<int> out = bits.list();
  for (int b : out) {
    if (b < 1 || b > 8) {
      throw base::InvalidArgument(flag + " entries must lie in [1, 8], got " + std::to_string(b));
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string join(const std::vector<int>& v) {
  std::string out;
  for (int b : v) out += (out.empty() ? "" : ",") + std::to_string(b);
  return out;
}

// Total KV elements per token (keys + values of every attention layer): --avg-bits times this / 8
// is the budget in bytes per token.
int64_t elements_per_token(const lm::Model& model) {
  int64_t total = 0;
  const lm::ModelConfig& mc = model.config();
  for (std::size_t raw : al::attention_layer_indices(model)) {
    const lm::LayerInfo& layer = model.layers()[raw];
    const int64_t dim = layer.head_dim > 0 ? layer.head_dim : mc.head_dim > 0 ? mc.head_dim : mc.dim / mc.n_heads;
    const int64_t heads = layer.n_kv_heads > 0 ? layer.n_kv_heads : mc.n_kv_heads;
    total += 2 * heads * dim;
  }
  return total;
}

void print_table(const al::SensitivityTable& t) {
  std::printf(
      "sensitivity: mean KL(native || one layer's part alone quantized), %lld positions "
      "(* = predicted from the nearest measured width by the coding's distortion ratio)\n",
      static_cast<long long>(t.n_compared));
  std::printf("layer");
  for (const al::LayerPart& part : t.parts) {
    for (int b : t.candidate_bits) std::printf("  %9s@%d", part.name.c_str(), b);
  }
  std::printf("\n");
  for (std::size_t l = 0; l < t.kl.size(); ++l) {
    std::printf("%5zu", l);
    for (std::size_t p = 0; p < t.parts.size(); ++p) {
      for (std::size_t b = 0; b < t.candidate_bits.size(); ++b) {
        std::printf("  %10.5f%s", t.kl[l][p][b], t.measured[b] ? " " : "*");
      }
    }
    std::printf("\n");
  }
  std::printf("coding distortion (relative squared error on Gaussian rows):");
  for (std::size_t p = 0; p < t.parts.size(); ++p) {
    for (std::size_t b = 0; b < t.candidate_bits.size(); ++b) {
      std::printf(" %s@%d %.5f", t.parts[p].name.c_str(), t.candidate_bits[b], t.distortion[p][b]);
    }
  }
  std::printf("\n");
}

void run_allocate(const AllocateFlags& f) {
  std::optional<veloxquant::KVCacheConfig> given = apps::kv_config_from_flags(f.kv);
  if (!given) throw base::InvalidArgument("allocate-bits needs --method (e.g. turboquant_block) or --preset");
  const std::vector<int> candidates = parse_candidates("--candidate-bits", f.candidate_bits);
  const std::vector<int> measured =
      f.measure_bits.empty() ? std::vector<int>{} : parse_candidates("--measure-bits", f.measure_bits);
  if (f.reference_bits < 1 || f.reference_bits > 8) {
    throw base::InvalidArgument("--reference-bits must lie in [1, 8], got " + std::to_string(f.reference_bits));
  }
  if (f.avg_bits < 0.0 || !std::isfinite(f.avg_bits)) {
    throw base::InvalidArgument(
        "--avg-bits must be a positive number of bits per element (or 0 = the given "
        "configuration's size), got " +
        std::to_string(f.avg_bits));
  }
  if (f.budget_rows < 1 || f.budget_rows > (int64_t{1} << 20)) {
    throw base::InvalidArgument("--budget-rows must lie in [1, 1048576], got " + std::to_string(f.budget_rows));
  }
  if (f.methods_per_run < 1) throw base::InvalidArgument("--methods-per-run must be >= 1");
  ev::EvalOptions options;
  options.chunking = ev::parse_chunking(f.chunking);
  options.ctx = f.ctx;
  options.max_chunks = f.chunks;
  options.tail = f.tail;
  options.batch = f.batch;
  const std::string text = ev::read_text_file(f.text);
  const std::string check_text = f.eval_text.empty() ? text : ev::read_text_file(f.eval_text);

  const lm::LoadedModel loaded = apps::load_model_from_flags(f.model, f.tokenizer, "f16", f.thread_count());
  const lm::Model& model = *loaded.model;
  const veloxquant::KVCacheConfig& base = *given;
  veloxquant::KVCacheBuilder::for_model(model, base);  // a config the model cannot take fails now

  const double base_bytes = al::model_bytes_per_token(model, base, f.budget_rows);
  const double budget =
      f.avg_bits > 0.0 ? f.avg_bits * static_cast<double>(elements_per_token(model)) / 8.0 : base_bytes;

  // A budget the cheapest widths cannot meet fails before the (slow) measurement.
  const std::vector<al::LayerPart> parts = al::allocation_parts(base);
  const int cheapest = candidates.front();  // sorted
  std::vector<std::vector<int>> floor_lists(parts.size(),
                                            std::vector<int>(al::attention_layer_indices(model).size(), cheapest));
  const double floor_bytes =
      al::model_bytes_per_token(model, al::config_with_allocation(base, parts, floor_lists), f.budget_rows);
  if (floor_bytes > budget) {
    throw base::InvalidArgument("every part at " + std::to_string(cheapest) + " bits takes " +
                                std::to_string(floor_bytes) + " bytes/token at " + std::to_string(f.budget_rows) +
                                " rows, above the budget of " + std::to_string(budget));
  }

  ev::TokenizedText tokens = ev::tokenize_text(*loaded.tokenizer, text);
  apps::ProgressBar bar(stderr, "sensitivity", apps::is_terminal(stderr));
  al::SensitivityOptions so;
  so.candidate_bits = candidates;
  so.measured_bits = measured;
  so.reference_bits = f.reference_bits;
  so.methods_per_run = f.methods_per_run;
  so.on_progress = [&bar](int64_t done, int64_t total) { bar.update(done, total); };
  const al::SensitivityTable table = al::measure_layer_sensitivity(model, tokens.tokens, tokens.bos, base, so, options);
  bar.finish();
  print_table(table);

  const al::LayerAllocation allocation = al::allocate_layer_bits(model, table, base, budget, f.budget_rows);
  const veloxquant::KVCacheConfig allocated = al::config_with_allocation(base, table.parts, allocation.bits);
  std::printf(
      "\nbudget %.1f bytes/token at %lld rows (%s); uniform configuration %.1f\n", budget,
      static_cast<long long>(f.budget_rows),
      f.avg_bits > 0.0 ? ("--avg-bits " + std::to_string(f.avg_bits)).c_str() : "the given configuration's size",
      base_bytes);
  std::printf("allocation: %.1f bytes/token at %lld rows, predicted KL (sum of measured items) %.5f\n",
              allocation.bytes_per_token, static_cast<long long>(f.budget_rows), allocation.predicted_kl);
  std::string sets;
  for (std::size_t p = 0; p < table.parts.size(); ++p) {
    std::printf("%s=%s\n", table.parts[p].field.c_str(), join(allocation.bits[p]).c_str());
    sets += " --set " + table.parts[p].field + "=" + join(allocation.bits[p]);
  }
  std::printf("use: --method %s%s (with the options given here)\n", base.method.c_str(), sets.c_str());
  if (f.skip_check) return;

  // The check: uniform against allocation on the same windows (another text when --eval-text).
  ev::TokenizedText check = f.eval_text.empty() ? tokens : ev::tokenize_text(*loaded.tokenizer, check_text);
  ev::EvalOptions check_options = options;
  if (f.eval_chunks > 0) check_options.max_chunks = f.eval_chunks;
  apps::ProgressBar check_bar(stderr, "check", apps::is_terminal(stderr));
  check_options.on_window = [&check_bar](int64_t done, int64_t total) { check_bar.update(done, total); };
  const ev::EvalRun run = ev::run_evaluation(
      model, check.tokens, check.bos,
      {{"uniform", [&model, base] { return veloxquant::KVCacheBuilder::for_model(model, base); }},
       {"allocation", [&model, allocated] { return veloxquant::KVCacheBuilder::for_model(model, allocated); }}},
      check_options);
  check_bar.finish();
  std::printf("\nmeasured on %s: %lld windows x %lld tokens (%s), %lld positions compared\n",
              f.eval_text.empty() ? f.text.c_str() : f.eval_text.c_str(), static_cast<long long>(run.n_windows),
              static_cast<long long>(run.ctx), f.chunking.c_str(), static_cast<long long>(run.n_compared));
  std::printf("%-12s %12s %10s %8s %10s\n", "", "bytes/token", "KL mean", "top-1 %", "PPL");
  for (const ev::SideResult& r : run.methods) {
    std::printf("%-12s %12.1f %10.5f %8.2f %10.3f\n", r.name.c_str(), r.kv_bytes_per_token, r.kld, r.top1_agreement,
                r.ppl);
  }
  std::printf("%-12s %12.1f %10s %8s %10.3f\n", "native", run.baseline.kv_bytes_per_token, "", "", run.baseline.ppl);
}

apps::CommandRegistration registration{
    "allocate-bits", [](CLI::App& root) {
      auto flags = std::make_shared<AllocateFlags>();
      auto* cmd = root.add_subcommand(
          "allocate-bits",
          "Per-layer bit widths from measured sensitivity (RateQuant): KL of each layer's keys/values alone at each "
          "candidate width, the lists of least summed KL within a bytes-per-token budget, and their measured KL "
          "against the uniform configuration");
      apps::add_model_flags(*cmd, *flags, {.kv_dtype = false});
      cmd->add_option("--text", flags->text, "Calibration text (read byte for byte)")->required();
      cmd->add_option("--eval-text", flags->eval_text, "Text for the final check (default: the calibration text)");
      apps::add_kv_method_flags(*cmd, flags->kv);
      cmd->add_option("--avg-bits", flags->avg_bits,
                      "Budget in bits per cached element (keys and values, codes + scales + any fixed rows, counted as "
                      "nbytes() at --budget-rows rows); 0 = the size of the configuration given")
          ->capture_default_str();
      cmd->add_option("--candidate-bits", flags->candidate_bits, "Bit widths measured and allocated, comma list")
          ->capture_default_str();
      cmd->add_option("--measure-bits", flags->measure_bits,
                      "Widths run through the model (subset of --candidate-bits; default all); the others are "
                      "predicted from the nearest measured one by the coding's own distortion ratio");
      cmd->add_option("--reference-bits", flags->reference_bits,
                      "Bits of the other part (values while keys are measured, and the other way round)")
          ->capture_default_str();
      cmd->add_option("--budget-rows", flags->budget_rows,
                      "Rows at which bytes per token are counted (256 = the first growth step: the budget then holds "
                      "at every length)")
          ->capture_default_str();
      cmd->add_option("--ctx", flags->ctx, "Tokens per window")->capture_default_str();
      cmd->add_option("--chunking", flags->chunking, "sliding or llama (llama-perplexity chunks)")
          ->capture_default_str();
      cmd->add_option("--chunks", flags->chunks, "Windows of the calibration text (llama chunking; 0 = all)")
          ->capture_default_str();
      cmd->add_option("--eval-chunks", flags->eval_chunks, "Windows of the final check (0 = --chunks)")
          ->capture_default_str();
      cmd->add_option("--tail", flags->tail, "KL over the last fraction of each window")->capture_default_str();
      cmd->add_option("--batch", flags->batch, "Tokens per forward call")->capture_default_str();
      cmd->add_option("--methods-per-run", flags->methods_per_run,
                      "Candidates evaluated per pass over the windows (each holds one set of caches)")
          ->capture_default_str();
      cmd->add_flag("--no-check", flags->skip_check, "Print the allocation without measuring it");
      cmd->callback([flags] { run_allocate(*flags); });
    }};

}  // namespace
