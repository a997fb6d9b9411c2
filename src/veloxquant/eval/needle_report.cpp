#include "veloxquant/eval/needle_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "base/error.h"

namespace veloxquant::eval {

namespace {

template <class T>
void add_unique(std::vector<T>& list, const T& value) {
  if (std::find(list.begin(), list.end(), value) == list.end()) list.push_back(value);
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100.0 * fraction);
  return buf;
}

}  // namespace

std::string needle_markdown_table(const std::vector<NeedleCell>& cells) {
  if (cells.empty()) throw base::InvalidArgument("needle table: no result");
  std::vector<std::string> methods;
  std::vector<double> depths;
  for (const auto& c : cells) {
    add_unique(methods, c.method);
    add_unique(depths, c.depth);
  }
  std::ostringstream md;
  md << "| method |";
  for (double d : depths) md << " depth " << percent(d) << " |";
  md << " mean |\n|---|";
  for (std::size_t i = 0; i <= depths.size(); ++i) md << "---:|";
  md << "\n";
  for (const auto& m : methods) {
    md << "| " << m << " |";
    int correct = 0, trials = 0;
    for (double d : depths) {
      const auto it =
          std::find_if(cells.begin(), cells.end(), [&](const NeedleCell& c) { return c.method == m && c.depth == d; });
      if (it == cells.end()) {
        md << " - |";
        continue;
      }
      md << ' ' << it->correct << '/' << it->trials << " |";
      correct += it->correct;
      trials += it->trials;
    }
    md << ' ' << percent(trials ? static_cast<double>(correct) / trials : 0.0) << " |\n";
  }
  return md.str();
}

nlohmann::json needle_json(const std::vector<NeedleCell>& cells) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : cells) {
    out.push_back({{"method", c.method},
                   {"depth", c.depth},
                   {"correct", c.correct},
                   {"trials", c.trials},
                   {"accuracy", c.accuracy()},
                   {"answers", c.answers}});
  }
  return out;
}

}  // namespace veloxquant::eval
