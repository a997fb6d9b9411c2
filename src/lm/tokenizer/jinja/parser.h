#pragma once
// Parses a template's tokens into statements, with Jinja2's grammar and operator precedence
// (the subset chat templates use: if/elif/else, for with loop filters and else, set with
// namespace attributes and set blocks, break/continue, transformers' generation block).
// Tags Jinja2 knows but this interpreter does not run (macro, call, include, ...) and
// filters or tests it lacks throw base::Unsupported naming them and where they are;
// malformed templates throw base::FormatError. Nesting deeper than kMaxNesting is refused.
#include <string_view>
#include <vector>

#include "lm/tokenizer/jinja/ast.h"

namespace lm::jinja {

inline constexpr int kMaxNesting = 128;

std::vector<Node> parse(std::string_view source);

}  // namespace lm::jinja
