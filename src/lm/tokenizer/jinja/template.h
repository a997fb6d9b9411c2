#pragma once
// A parsed Jinja template: parse once (throws on syntax errors and unsupported constructs),
// render many times with different variables.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lm/tokenizer/jinja/evaluator.h"
#include "lm/tokenizer/jinja/value.h"

namespace lm::jinja {

struct Node;

class Template {
 public:
  explicit Template(std::string_view source);
  std::string render(std::vector<std::pair<std::string, Value>> variables, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const std::vector<Node>> program_;
};

}  // namespace lm::jinja
