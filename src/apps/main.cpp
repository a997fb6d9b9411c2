// The `veloxquant` CLI: parse, call the library, print. Subcommands register themselves
// (command_registry.h); errors from the library become one clear line and exit code 1/2.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "apps/command_registry.h"
#include "base/error.h"

namespace apps {
std::vector<CommandEntry>& command_registry() {
  static std::vector<CommandEntry> registry;
  return registry;
}
}  // namespace apps

int main(int argc, char** argv) {
  CLI::App app{"veloxquant — KV-cache compression for LLM inference, and the lm CPU host"};
  app.require_subcommand(1);
  auto& registry = apps::command_registry();
  std::sort(registry.begin(), registry.end(),
            [](const apps::CommandEntry& a, const apps::CommandEntry& b) { return a.name < b.name; });
  for (const auto& entry : registry) entry.setup(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const base::InvalidArgument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  // Results go to stdout: a full disk or a closed pipe must not pass for success.
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  if (!flushed || std::ferror(stdout)) {
    std::fprintf(stderr, "error: writing standard output failed%s%s\n", !flushed && errno ? ": " : "",
                 !flushed && errno ? std::strerror(errno) : " (a full disk or a closed pipe?)");
    return 1;
  }
  return 0;
}
