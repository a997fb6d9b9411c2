// `veloxquant auto-config`: the original's rule-based cache choice (memory pressure, then
// context length; kv_memory_planning.h says where this build's methods replace the original's),
// printed as the flags to pass to generate/serve, or as JSON.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/command_registry.h"
#include "apps/int_flag.h"
#include "apps/kv_memory_planning.h"
#include "base/error.h"

namespace apps {
namespace {

struct AutoConfigFlags {
  std::string head_dim = "128", seq_len = "4096", n_layers = "32", kv_heads = "8", batch = "1";
  std::string memory_gb, used_gb;
  bool json = false;
};

double parse_gb(const std::string& flag, const std::string& text) {
  try {
    std::size_t used = 0;
    const double gb = std::stod(text, &used);
    if (used == text.size() && gb >= 0 && gb < 1e6) return gb * 1024 * 1024 * 1024;
  } catch (const std::exception&) {
  }
  throw base::InvalidArgument(flag + " expects a number of GiB >= 0, got '" + text + "'");
}

void run_auto_config(const AutoConfigFlags& f) {
  AutoConfigInput in;
  in.head_dim = static_cast<int>(parse_int_flag("--head-dim", f.head_dim, 1, 4096));
  in.seq_len = parse_int_flag("--seq-len", f.seq_len, 1, int64_t{1} << 24);
  in.n_layers = static_cast<int>(parse_int_flag("--n-layers", f.n_layers, 1, 4096));
  in.n_kv_heads = static_cast<int>(parse_int_flag("--kv-heads", f.kv_heads, 1, 4096));
  in.batch = parse_int_flag("--batch-size", f.batch, 1, 1 << 16);
  const auto [total, used] = machine_memory_bytes();
  in.memory_total_bytes = f.memory_gb.empty() ? total : parse_gb("--memory-gb", f.memory_gb);
  in.memory_used_bytes = f.used_gb.empty() ? (f.memory_gb.empty() ? used : 0.0) : parse_gb("--used-gb", f.used_gb);
  const AutoConfigChoice c = auto_config(in);
  if (f.json) {
    const nlohmann::json j = {{"schema_version", 1},
                              {"method", c.method},
                              {"bits", c.bits},
                              {"set", c.sets},
                              {"flags", c.flags()},
                              {"rule", c.rule},
                              {"fp16_kv_bytes", c.fp16_kv_bytes},
                              {"inputs",
                               {{"head_dim", in.head_dim},
                                {"seq_len", in.seq_len},
                                {"n_layers", in.n_layers},
                                {"kv_heads", in.n_kv_heads},
                                {"batch", in.batch},
                                {"memory_total_bytes", in.memory_total_bytes},
                                {"memory_used_bytes", in.memory_used_bytes}}}};
    std::printf("%s\n", j.dump(1).c_str());
    return;
  }
  std::printf("%s\n  why: %s\n  f16 KV estimate: %.1f MiB\n", c.flags().c_str(), c.rule.c_str(),
              c.fp16_kv_bytes / 1048576);
}

CommandRegistration registration{
    "auto-config", [](CLI::App& root) {
      auto f = std::make_shared<AutoConfigFlags>();
      auto* cmd =
          root.add_subcommand("auto-config", "The original's rule-based cache choice for a geometry and context");
      cmd->add_option("--head-dim", f->head_dim, "Head dimension")->capture_default_str();
      cmd->add_option("--seq-len", f->seq_len, "Tokens per sequence")->capture_default_str();
      cmd->add_option("--n-layers", f->n_layers, "Decoder layers")->capture_default_str();
      cmd->add_option("--kv-heads", f->kv_heads, "Key/value heads")->capture_default_str();
      cmd->add_option("--batch-size", f->batch, "Sequences")->capture_default_str();
      cmd->add_option("--memory-gb", f->memory_gb, "Memory of the machine, GiB (default: this machine's MemTotal)");
      cmd->add_option("--used-gb", f->used_gb, "Memory already in use, GiB (default: MemTotal - MemAvailable)");
      cmd->add_flag("--json", f->json, "One JSON document on stdout");
      cmd->callback([f] { run_auto_config(*f); });
    }};

}  // namespace
}  // namespace apps
