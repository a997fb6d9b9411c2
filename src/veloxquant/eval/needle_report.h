#pragma once
// eval-needle's output: a Markdown table (one row per method, one column per depth, exact-match
// accuracy) and the same cells as JSON with the generated answers.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "veloxquant/eval/needle.h"

namespace veloxquant::eval {

// Rows in first-seen method order, columns in first-seen depth order, plus a mean column.
// Throws base::InvalidArgument on no cells.
std::string needle_markdown_table(const std::vector<NeedleCell>& cells);
nlohmann::json needle_json(const std::vector<NeedleCell>& cells);

}  // namespace veloxquant::eval
