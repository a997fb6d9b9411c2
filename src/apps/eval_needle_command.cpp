// `veloxquant eval-needle`: needle-in-a-haystack exact-match accuracy per method and depth,
// the native cache always included as the reference. Parse, call veloxquant::eval, print.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "apps/command_registry.h"
#include "apps/model_loading.h"
#include "apps/progress_bar.h"
#include "base/error.h"
#include "lm/cache/kv_type_caches.h"
#include "lm/load.h"
#include "veloxquant/builder/kv_cache_builder.h"
#include "veloxquant/config/config_validation.h"
#include "veloxquant/config/field_spec.h"
#include "veloxquant/config/per_layer_lists.h"
#include "veloxquant/errors.h"
#include "veloxquant/eval/needle.h"
#include "veloxquant/eval/needle_report.h"
#include "veloxquant/eval/text_source.h"
#include "veloxquant/registry/field_assignment.h"
#include "veloxquant/presets/kv_presets.h"
#include "veloxquant/registry/method_registry.h"

namespace {

namespace ev = veloxquant::eval;

struct NeedleFlags : apps::ModelFlags {  // --model, --tokenizer, --threads, --kv-dtype (model_loading.h)
  std::string text;
  std::string methods;  // comma list of servable methods; the native cache is always run
  std::string bits;
  std::vector<std::string> sets;
  int64_t seed = 42;
  int64_t ctx = 1024;
  std::string depths = "0,0.25,0.5,0.75,1";
  int trials = 3;
  int max_new_tokens = 8;
  int64_t batch = 512;
  std::string presets;    // comma list of presets/kv_presets.h names
  std::string kv_dtypes;  // comma list of the host's cache types (q8_0, ...)
  bool json = false;
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

std::vector<double> parse_depths(const std::string& text) {
  std::vector<double> depths;
  for (const auto& part : split_commas(text)) {
    std::size_t used = 0;
    double d = 0.0;
    try {
      d = std::stod(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != part.size() || !(d >= 0.0 && d <= 1.0)) {
      throw base::InvalidArgument("--depths takes fractions in [0, 1], got '" + part + "'");
    }
    depths.push_back(d);
  }
  if (depths.empty()) throw base::InvalidArgument("--depths is empty");
  return depths;
}

veloxquant::KVCacheConfig method_config(const NeedleFlags& f, const std::string& name) {
  const veloxquant::MethodDescriptor& method = veloxquant::require_method(name);
  if (!method.is_servable) {
    throw veloxquant::QuantizerConfigError("method '" + name + "' is standalone and cannot serve a model");
  }
  veloxquant::KVCacheConfig config;
  config.method = name;
  config.seed = f.seed;
  if (!f.bits.empty()) {
    const veloxquant::FieldSpec* spec = veloxquant::find_generic_field("bit_width_inlier");
    spec->set(config, veloxquant::parse_field_value(*spec, f.bits));
  }
  for (const auto& set : f.sets) {
    if (auto warning = veloxquant::apply_field_assignment(config, set)) {
      std::fprintf(stderr, "warning: %s\n", warning->c_str());
    }
  }
  veloxquant::validate_per_layer_config(config);  // list lengths are checked by for_model
  return config;
}

void run_needle_command(const NeedleFlags& f) {
  std::vector<veloxquant::KVCacheConfig> configs;
  std::vector<std::string> labels;
  for (const auto& name : split_commas(f.methods)) {
    configs.push_back(method_config(f, name));
    labels.push_back(name + (f.bits.empty() ? "" : " b=" + f.bits));
  }
  // Presets take the cache seed, not --bits / --set: they are named, fixed configurations.
  for (const auto& name : split_commas(f.presets)) {
    const veloxquant::KvPreset& preset = veloxquant::require_kv_preset(name);
    configs.push_back(veloxquant::kv_preset_config(preset, f.seed));
    labels.push_back("preset " + preset.name);
  }
  apps::require_float_baseline(f.kv_dtype, "eval-needle");
  const std::vector<lm::KVCacheType> kv_types = apps::parse_kv_type_list(f.kv_dtypes);
  ev::NeedleOptions options;
  options.prompt_tokens = f.ctx;
  options.depths = parse_depths(f.depths);
  options.trials = f.trials;
  options.seed = static_cast<uint64_t>(f.seed);
  options.max_new_tokens = f.max_new_tokens;
  options.batch = f.batch;
  const std::string filler = ev::read_text_file(f.text);

  const lm::LoadedModel loaded = apps::load_model_from_flags(f.model, f.tokenizer, f.kv_dtype, f.thread_count());
  const lm::Model& model = *loaded.model;

  std::vector<ev::NeedleMethod> methods{{"native cache", [&model] { return model.native_make_cache(); }}};
  for (std::size_t i = 0; i < configs.size(); ++i) {
    veloxquant::KVCacheBuilder::for_model(model, configs[i]);  // fail before the first prompt
    methods.push_back(
        {labels[i], [&model, config = configs[i]] { return veloxquant::KVCacheBuilder::for_model(model, config); }});
  }
  for (const lm::KVCacheType type : kv_types) {
    lm::make_kv_type_caches(model, type);
    methods.push_back({"kv-dtype " + std::string(lm::kv_cache_type_name(type)),
                       [&model, type] { return lm::make_kv_type_caches(model, type); }});
  }
  apps::ProgressBar bar(stderr, "needle", apps::is_terminal(stderr));
  options.on_prompt = [&bar](int64_t done, int64_t total) { bar.update(done, total); };
  const auto cells = ev::run_needle(model, *loaded.tokenizer, filler, methods, options);
  bar.finish();
  if (f.json) {
    nlohmann::json out;
    out["model"] = f.model;
    out["text"] = f.text;
    out["ctx"] = f.ctx;
    out["trials"] = f.trials;
    out["bits"] = f.bits;
    out["cells"] = ev::needle_json(cells);
    std::printf("%s\n", out.dump(2).c_str());
  } else {
    std::printf("needle in a haystack: %lld-token prompts, %d trial(s) per depth, exact match of a 5-digit number\n\n",
                static_cast<long long>(f.ctx), f.trials);
    std::printf("%s", ev::needle_markdown_table(cells).c_str());
  }
}

apps::CommandRegistration registration{
    "eval-needle", [](CLI::App& root) {
      auto flags = std::make_shared<NeedleFlags>();
      auto* cmd = root.add_subcommand("eval-needle",
                                      "Needle in a haystack: exact-match accuracy per method and depth (native cache "
                                      "always included)");
      apps::add_model_flags(*cmd, *flags);
      cmd->add_option("--text", flags->text, "Filler text (the haystack)")->required();
      cmd->add_option("--methods", flags->methods, "Comma-separated servable methods to test besides the native cache");
      cmd->add_option("--presets", flags->presets,
                      "Comma-separated presets (q8,q5,q4,q3) to test besides the native cache");
      cmd->add_option("--kv-dtypes", flags->kv_dtypes,
                      "Comma-separated host cache types (llama.cpp's q8_0,q5_0,q4_0) to test besides the native cache");
      cmd->add_option("--bits", flags->bits, "bit_width_inlier for every method (default: the method's)");
      cmd->add_option("--set", flags->sets, "FIELD=VALUE for every method (repeatable)");
      cmd->add_option("--seed", flags->seed, "Seed of the caches and of the secret numbers")->capture_default_str();
      cmd->add_option("--ctx", flags->ctx, "Prompt length in tokens")->capture_default_str();
      cmd->add_option("--depths", flags->depths, "Comma-separated needle depths in [0, 1]")->capture_default_str();
      cmd->add_option("--trials", flags->trials, "Prompts (different secrets) per depth")->capture_default_str();
      cmd->add_option("--max-new-tokens", flags->max_new_tokens, "Greedy tokens generated for the answer")
          ->capture_default_str();
      cmd->add_option("--batch", flags->batch, "Prompt tokens per forward call")->capture_default_str();
      cmd->add_flag("--json", flags->json, "Print JSON instead of a table");
      cmd->callback([flags] { run_needle_command(*flags); });
    }};

}  // namespace
