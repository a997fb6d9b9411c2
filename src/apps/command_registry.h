#pragma once
// Each subcommand lives in its own file and registers itself here with a static
// CommandRegistration, so adding a command touches one new file and nothing else.
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace apps {

// Adds the subcommand (its flags and its callback) to the root app.
using CommandSetup = std::function<void(CLI::App& root)>;

struct CommandEntry {
  std::string name;
  CommandSetup setup;
};

std::vector<CommandEntry>& command_registry();

struct CommandRegistration {
  CommandRegistration(std::string name, CommandSetup setup) {
    command_registry().push_back({std::move(name), std::move(setup)});
  }
};

}  // namespace apps
