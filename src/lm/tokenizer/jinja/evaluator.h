#pragma once
// Renders a parsed template. Scopes follow Jinja2: the template's top level writes the
// context, each iteration of a for loop gets its own scope (so `set` inside a loop is gone
// after it, which is why templates use namespace() objects), if blocks open none.
// Rendering is bounded: output size, loop iterations and call nesting have limits, past
// which it fails with base::FormatError instead of exhausting the machine.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "lm/tokenizer/jinja/ast.h"
#include "lm/tokenizer/jinja/value.h"

namespace lm::jinja {

struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;
  int64_t max_loop_iterations = 1'000'000;  // all loops of one render together
};

// Variables are looked up in `variables` (the context and the globals).
std::string render(const std::vector<Node>& program, std::vector<std::pair<std::string, Value>> variables,
                   const RenderLimits& limits = {});

}  // namespace lm::jinja
