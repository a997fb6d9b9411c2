#pragma once
// Errors of the Jinja interpreter. A chat template is untrusted input read from a model file,
// so everything it can get wrong becomes one of the project's errors naming the line and
// column: a syntax error or an evaluation error (a type mismatch, an undefined value used,
// a limit exceeded) is base::FormatError; a construct this interpreter does not implement
// is base::Unsupported; the template's own raise_exception(msg) is TemplateRaised.
#include <stdexcept>
#include <string>

#include "base/error.h"

namespace lm::jinja {

struct Position {
  int line = 1;
  int column = 1;
};

std::string where(const Position& at);  // "line 3, column 7"

// The template called raise_exception(message): it refuses this conversation (e.g. a system
// message where the model has no system role). what() reads
// "the chat template refused the conversation: <message>"; message() is the template's text.
class TemplateRaised : public base::Unsupported {
 public:
  explicit TemplateRaised(std::string message);
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// Thrown by value operations and builtins, which do not know where in the template they run;
// the evaluator turns it into base::FormatError at the innermost expression being evaluated.
class EvalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Like EvalError, for something the interpreter does not implement (an unknown filter, a
// method of str it lacks); becomes base::Unsupported.
class EvalUnsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void syntax_error(const Position& at, const std::string& what);
[[noreturn]] void unsupported(const Position& at, const std::string& what);

}  // namespace lm::jinja
