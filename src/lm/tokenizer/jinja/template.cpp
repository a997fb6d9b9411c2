#include "lm/tokenizer/jinja/template.h"

#include "lm/tokenizer/jinja/parser.h"

namespace lm::jinja {

Template::Template(std::string_view source) : program_(std::make_shared<const std::vector<Node>>(parse(source))) {}

std::string Template::render(std::vector<std::pair<std::string, Value>> variables, const RenderLimits& limits) const {
  return jinja::render(*program_, std::move(variables), limits);
}

}  // namespace lm::jinja
