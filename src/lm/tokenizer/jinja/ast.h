#pragma once
// The syntax tree of a template: statements (Node) holding expressions (Expr).
#include <memory>
#include <string>
#include <vector>

#include "lm/tokenizer/jinja/error.h"
#include "lm/tokenizer/jinja/value.h"

namespace lm::jinja {

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // children: items
    kTuple,      // children: items
    kDict,       // children: key, value, key, value, ...
    kGetAttr,    // children[0] . name
    kGetItem,    // children[0] [ children[1] ]
    kSlice,      // children[0] [ children[1] : children[2] : children[3] ] (null where absent)
    kCall,       // children[0] ( children[1..] ), arg_names parallel to the arguments ("" positional)
    kFilter,     // children[0] | name ( children[1..] )
    kTest,       // children[0] is [not] name ( children[1..] )
    kNot,        // not children[0]
    kNegate,     // -children[0]
    kPlus,       // +children[0]
    kBinary,     // children[0] name children[1]: + - * / // % ** ~ and or
    kCompare,    // children[0] op[0] children[1] op[1] children[2] ... (ops in arg_names)
    kCondition,  // children[1] if children[0] else children[2] (children[2] may be null)
  };
  Kind kind = Kind::kLiteral;
  Position at;
  Value literal;
  std::string name;
  std::vector<std::unique_ptr<Expr>> children;
  std::vector<std::string> arg_names;
  bool negated = false;
};

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conditions[i] -> bodies[i]; else_body
    kFor,       // for targets in expr [if filter]: body; else_body
    kSet,       // set targets = expr   (attribute set: targets = {namespace}, attribute)
    kSetBlock,  // set targets[0] %} body {% endset
    kBreak,
    kContinue,
    kScope,        // body rendered as is ({% generation %})
    kMacro,        // macro text(targets = parameters, conditions = their defaults or null): body
    kFilterBlock,  // filter conditions[0] | conditions[1] ... (kFilter exprs, no value): body
  };
  Kind kind = Kind::kText;
  Position at;
  std::string text;
  std::unique_ptr<Expr> expr;
  std::unique_ptr<Expr> filter;
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<std::unique_ptr<Expr>> conditions;
  std::vector<std::vector<Node>> bodies;
  std::vector<Node> body;
  std::vector<Node> else_body;
};

}  // namespace lm::jinja
