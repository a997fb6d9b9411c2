#include "veloxquant/eval/method_list.h"

#include <sstream>

#include "base/error.h"

namespace veloxquant::eval {

namespace {

constexpr const char* kSyntax = "an entry is METHOD or --preset P, then [--bits B] [--set FIELD=VALUE]... [--seed S]";

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

[[noreturn]] void bad_entry(std::size_t index, const std::string& text, const std::string& problem) {
  throw base::InvalidArgument("--methods entry " + std::to_string(index) + " ('" + text + "'): " + problem + " (" +
                              kSyntax + ", entries separated by ';')");
}

MethodEntry parse_entry(std::size_t index, const std::string& text) {
  std::istringstream words(text);
  std::vector<std::string> tokens;
  for (std::string w; words >> w;) tokens.push_back(w);
  MethodEntry entry;
  std::size_t first_flag = 1;
  if (tokens.front() == "--preset") {
    if (tokens.size() < 2 || tokens[1].rfind("--", 0) == 0) bad_entry(index, text, "--preset needs a value");
    entry.preset = tokens[1];
    first_flag = 2;
  } else {
    entry.method = tokens.front();
    if (entry.method.rfind("--", 0) == 0)
      bad_entry(index, text, "starts with the flag '" + entry.method + "', not a method name");
  }
  for (std::size_t i = first_flag; i < tokens.size(); ++i) {
    const std::string& flag = tokens[i];
    if (flag != "--bits" && flag != "--set" && flag != "--seed") {
      bad_entry(index, text, "unknown flag '" + flag + "'");
    }
    if (i + 1 == tokens.size() || tokens[i + 1].rfind("--", 0) == 0) bad_entry(index, text, flag + " needs a value");
    const std::string& value = tokens[++i];
    if (flag == "--bits") {
      if (!entry.bits.empty()) bad_entry(index, text, "--bits given twice");
      entry.bits = value;
    } else if (flag == "--seed") {
      if (entry.seed) bad_entry(index, text, "--seed given twice");
      try {
        std::size_t used = 0;
        entry.seed = std::stoll(value, &used);
        if (used != value.size()) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        bad_entry(index, text, "--seed must be an integer, got '" + value + "'");
      }
    } else {
      if (value.find('=') == std::string::npos || value.front() == '=') {
        bad_entry(index, text, "--set needs FIELD=VALUE, got '" + value + "'");
      }
      entry.sets.push_back(value);
    }
  }
  entry.label = method_entry_label(entry);
  return entry;
}

}  // namespace

std::string method_entry_label(const MethodEntry& entry) {
  std::string label = entry.preset.empty() ? entry.method : "--preset " + entry.preset;
  if (!entry.bits.empty()) label += " --bits " + entry.bits;
  for (const auto& s : entry.sets) label += " --set " + s;
  if (entry.seed) label += " --seed " + std::to_string(*entry.seed);
  return label;
}

std::vector<MethodEntry> parse_method_list(const std::string& text) {
  if (trim(text).empty()) throw base::InvalidArgument(std::string("--methods is empty (") + kSyntax + ")");
  std::vector<MethodEntry> entries;
  std::size_t start = 0;
  for (std::size_t index = 1;; ++index) {
    const std::size_t end = text.find(';', start);
    const std::string entry_text = trim(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (entry_text.empty()) bad_entry(index, entry_text, "is empty (two ';' in a row, or one at an end)");
    MethodEntry entry = parse_entry(index, entry_text);
    for (std::size_t j = 0; j < entries.size(); ++j) {
      if (entries[j].label == entry.label) {
        bad_entry(index, entry_text, "repeats entry " + std::to_string(j + 1) + "; each configuration is timed once");
      }
    }
    entries.push_back(std::move(entry));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return entries;
}

}  // namespace veloxquant::eval
