// `veloxquant methods [--json] [--servable-only] [--family F]`: the method registry, as a table
// or as the JSON contract (schema_version 1) the original's apps decode.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "apps/command_registry.h"
#include "veloxquant/registry/method_report.h"

namespace {

struct MethodsArgs {
  bool json = false;
  veloxquant::MethodFilter filter;
  std::string family;
};

apps::CommandRegistration registration{
    "methods", [](CLI::App& root) {
      auto args = std::make_shared<MethodsArgs>();
      auto* cmd = root.add_subcommand("methods", "List the KV-cache compression methods");
      cmd->add_flag("--json", args->json, "Print the registry as JSON (schema_version 1)");
      cmd->add_flag("--servable-only", args->filter.servable_only,
                    "Only methods that can serve a model (not the standalone research caches)");
      cmd->add_option("--family", args->family, "Only one family")
          ->check(CLI::IsMember({"quantization", "eviction", "hybrid"}));
      cmd->callback([args] {
        if (!args->family.empty()) args->filter.family = args->family;
        if (args->json) {
          std::printf("%s\n", veloxquant::methods_json(args->filter).dump(2).c_str());
        } else {
          std::fputs(veloxquant::methods_text(args->filter).c_str(), stdout);
        }
      });
    }};

}  // namespace
