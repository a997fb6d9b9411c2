// `veloxquant version`: prints the library version.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "apps/command_registry.h"
#include "veloxquant/version.h"

namespace {
apps::CommandRegistration registration{"version", [](CLI::App& root) {
                                         auto* cmd = root.add_subcommand("version", "Print the veloxquant version");
                                         cmd->callback([] { std::printf("veloxquant %s\n", veloxquant::version()); });
                                       }};
}  // namespace
