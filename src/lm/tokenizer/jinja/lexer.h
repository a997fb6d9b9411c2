#pragma once
// Splits a template into text and tag tokens as Jinja2's lexer does with the options
// transformers' apply_chat_template sets (trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False): newlines normalised to \n, one trailing newline dropped,
// `{%-`/`-%}` (and the {{ }} and {# #} forms) strip the whitespace beside them, a block or
// comment tag alone on its line takes the line's indentation with it (lstrip_blocks) and the
// newline after it (trim_blocks), `{%+`/`+%}` turn those two off. Comments are dropped.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lm/tokenizer/jinja/error.h"

namespace lm::jinja {

struct Token {
  enum class Kind : uint8_t {
    kText,        // template data, already whitespace-controlled
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,
    kString,  // text holds the unescaped value
    kInt,
    kFloat,
    kOperator,  // text holds the operator: + - * / // % ** ~ ( ) [ ] { } , . : | = == != < <= > >= ;
    kEnd,
  };
  Kind kind = Kind::kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  Position at;
};

std::vector<Token> tokenize(std::string_view source);

}  // namespace lm::jinja
