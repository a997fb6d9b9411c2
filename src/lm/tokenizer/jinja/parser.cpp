#include "lm/tokenizer/jinja/parser.h"

#include <algorithm>
#include <initializer_list>

#include "lm/tokenizer/jinja/builtins.h"
#include "lm/tokenizer/jinja/lexer.h"

namespace lm::jinja {

namespace {

using ExprPtr = std::unique_ptr<Expr>;

ExprPtr make(Expr::Kind kind, Position at) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->at = at;
  return e;
}

Node make_node(Node::Kind kind, Position at) {
  Node n;
  n.kind = kind;
  n.at = at;
  return n;
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case Token::Kind::kText:
      return "template text";
    case Token::Kind::kVarBegin:
      return "'{{'";
    case Token::Kind::kVarEnd:
      return "'}}'";
    case Token::Kind::kBlockBegin:
      return "'{%'";
    case Token::Kind::kBlockEnd:
      return "'%}'";
    case Token::Kind::kName:
      return "'" + t.text + "'";
    case Token::Kind::kString:
      return "a string";
    case Token::Kind::kInt:
    case Token::Kind::kFloat:
      return "a number";
    case Token::Kind::kOperator:
      return "'" + t.text + "'";
    case Token::Kind::kEnd:
      return "the end of the template";
  }
  return "?";
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  std::vector<Node> parse_template() {
    std::vector<Node> body = subparse({});
    return body;
  }

 private:
  // Counts nesting of statements and expressions; a template is untrusted input and the
  // parser and evaluator recurse on it.
  struct Depth {
    explicit Depth(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) {
        syntax_error(p_.cur().at, "template nested more than " + std::to_string(kMaxNesting) + " levels deep");
      }
    }
    ~Depth() { --p_.depth_; }
    Parser& p_;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t ahead = 1) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  void advance() {
    if (i_ + 1 < t_.size()) ++i_;
  }
  bool is_op(const char* op) const { return cur().kind == Token::Kind::kOperator && cur().text == op; }
  bool is_name(const char* name) const { return cur().kind == Token::Kind::kName && cur().text == name; }
  void expect_op(const char* op) {
    if (!is_op(op)) syntax_error(cur().at, std::string("expected '") + op + "', found " + describe(cur()));
    advance();
  }
  void expect(Token::Kind kind, const char* what) {
    if (cur().kind != kind) syntax_error(cur().at, std::string("expected ") + what + ", found " + describe(cur()));
    advance();
  }
  std::string expect_name() {
    if (cur().kind != Token::Kind::kName) syntax_error(cur().at, "expected a name, found " + describe(cur()));
    std::string n = cur().text;
    advance();
    return n;
  }

  static bool names_one_of(const Token& name, std::initializer_list<const char*> tags) {
    if (name.kind != Token::Kind::kName) return false;
    for (const char* tag : tags) {
      if (name.text == tag) return true;
    }
    return false;
  }

  // Statements up to (not including) a block tag named in `end`; leaves cur() at that name.
  std::vector<Node> subparse(std::initializer_list<const char*> end) {
    Depth depth(*this);
    std::vector<Node> body;
    while (true) {
      const Token& t = cur();
      if (t.kind == Token::Kind::kEnd) {
        if (end.size() == 0) return body;
        std::string expected;
        for (const char* e : end) expected += std::string(expected.empty() ? "" : " or ") + "'" + e + "'";
        syntax_error(t.at, "unexpected end of template, expected " + expected);
      }
      if (t.kind == Token::Kind::kText) {
        Node n = make_node(Node::Kind::kText, t.at);
        n.text = t.text;
        body.push_back(std::move(n));
        advance();
      } else if (t.kind == Token::Kind::kVarBegin) {
        Node n = make_node(Node::Kind::kOutput, t.at);
        advance();
        n.expr = parse_tuple(true, false);
        expect(Token::Kind::kVarEnd, "'}}'");
        body.push_back(std::move(n));
      } else if (t.kind == Token::Kind::kBlockBegin) {
        if (names_one_of(peek(), end)) {
          advance();
          return body;
        }
        advance();
        body.push_back(parse_statement());
      } else {
        syntax_error(t.at, "unexpected " + describe(t));
      }
    }
  }

  Node parse_statement() {
    const Token& t = cur();
    if (t.kind != Token::Kind::kName) syntax_error(t.at, "expected a tag name after '{%', found " + describe(t));
    const std::string tag = t.text;
    const Position at = t.at;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "break" || tag == "continue") {
      advance();
      expect(Token::Kind::kBlockEnd, "'%}'");
      if (loop_depth_ == 0) syntax_error(at, "'" + tag + "' outside of a loop");
      return make_node(tag == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, at);
    }
    if (tag == "macro") return parse_macro();
    if (tag == "filter") return parse_filter_block();
    if (tag == "generation") {
      advance();
      expect(Token::Kind::kBlockEnd, "'%}'");
      Node n = make_node(Node::Kind::kScope, at);
      n.body = subparse({"endgeneration"});
      advance();
      expect(Token::Kind::kBlockEnd, "'%}'");
      return n;
    }
    if (tag == "print") {
      advance();
      Node n = make_node(Node::Kind::kOutput, at);
      n.expr = parse_tuple(true, false);
      expect(Token::Kind::kBlockEnd, "'%}'");
      return n;
    }
    static const char* kKnownToJinja[] = {"call",  "include", "import", "from",       "extends",
                                          "block", "with",    "raw",    "autoescape", "do"};
    for (const char* k : kKnownToJinja) {
      if (tag == k) unsupported(at, "the {% " + tag + " %} tag");
    }
    syntax_error(at, "unknown tag '" + tag + "'");
  }

  Node parse_macro() {
    Node n = make_node(Node::Kind::kMacro, cur().at);
    advance();
    n.text = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!n.targets.empty()) {
        expect_op(",");
        if (is_op(")")) break;
      }
      n.targets.push_back(expect_name());
      if (is_op("=")) {
        advance();
        n.conditions.push_back(parse_expression());
      } else {
        if (!n.conditions.empty() && n.conditions.back()) {
          syntax_error(cur().at, "a macro parameter without a default after one with a default");
        }
        n.conditions.push_back(nullptr);
      }
    }
    expect_op(")");
    expect(Token::Kind::kBlockEnd, "'%}'");
    const int saved_loops = loop_depth_;
    loop_depth_ = 0;  // break/continue do not cross a macro
    n.body = subparse({"endmacro"});
    loop_depth_ = saved_loops;
    advance();
    expect(Token::Kind::kBlockEnd, "'%}'");
    return n;
  }

  // {% filter f(args) | g %}body{% endfilter %}: the rendered body through the filters.
  Node parse_filter_block() {
    Node n = make_node(Node::Kind::kFilterBlock, cur().at);
    advance();
    while (true) {
      auto f = make(Expr::Kind::kFilter, cur().at);
      const Position at = cur().at;
      f->name = dotted_name();
      if (!has_filter(f->name)) unsupported(at, "the filter '" + f->name + "'");
      f->children.push_back(nullptr);  // the value: the rendered body
      if (is_op("(")) parse_args(*f);
      n.conditions.push_back(std::move(f));
      if (!is_op("|")) break;
      advance();
    }
    expect(Token::Kind::kBlockEnd, "'%}'");
    n.body = subparse({"endfilter"});
    advance();
    expect(Token::Kind::kBlockEnd, "'%}'");
    return n;
  }

  Node parse_if() {
    Node n = make_node(Node::Kind::kIf, cur().at);
    advance();
    while (true) {
      n.conditions.push_back(parse_tuple(false, false));
      expect(Token::Kind::kBlockEnd, "'%}'");
      n.bodies.push_back(subparse({"elif", "else", "endif"}));
      const std::string which = cur().text;
      advance();
      if (which == "elif") continue;
      if (which == "else") {
        expect(Token::Kind::kBlockEnd, "'%}'");
        n.else_body = subparse({"endif"});
        advance();
      }
      break;
    }
    expect(Token::Kind::kBlockEnd, "'%}'");
    return n;
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = is_op("(");
    if (paren) advance();
    names.push_back(expect_name());
    while (is_op(",")) {
      advance();
      if (cur().kind != Token::Kind::kName) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  Node parse_for() {
    Node n = make_node(Node::Kind::kFor, cur().at);
    advance();
    n.targets = parse_targets();
    if (!is_name("in")) syntax_error(cur().at, "expected 'in' in the for loop, found " + describe(cur()));
    advance();
    n.expr = parse_tuple(false, false, "recursive");
    if (is_name("if")) {
      advance();
      n.filter = parse_expression(true);
    }
    if (is_name("recursive")) unsupported(cur().at, "a recursive for loop");
    expect(Token::Kind::kBlockEnd, "'%}'");
    ++loop_depth_;
    n.body = subparse({"endfor", "else"});
    --loop_depth_;
    if (cur().text == "else") {
      advance();
      expect(Token::Kind::kBlockEnd, "'%}'");
      n.else_body = subparse({"endfor"});
    }
    advance();
    expect(Token::Kind::kBlockEnd, "'%}'");
    return n;
  }

  Node parse_set() {
    Node n = make_node(Node::Kind::kSet, cur().at);
    advance();
    if (cur().kind == Token::Kind::kName && peek().kind == Token::Kind::kOperator && peek().text == ".") {
      n.targets.push_back(expect_name());
      advance();
      n.attribute = expect_name();
    } else {
      n.targets = parse_targets();
    }
    if (is_op("=")) {
      advance();
      n.expr = parse_tuple(true, false);
      expect(Token::Kind::kBlockEnd, "'%}'");
      return n;
    }
    if (!n.attribute.empty() || n.targets.size() != 1) syntax_error(cur().at, "expected '=' in the set tag");
    if (is_op("|")) unsupported(cur().at, "a filter on a {% set %} block");
    expect(Token::Kind::kBlockEnd, "'%}'");
    n.kind = Node::Kind::kSetBlock;
    n.body = subparse({"endset"});
    advance();
    expect(Token::Kind::kBlockEnd, "'%}'");
    return n;
  }

  // ---- expressions, by increasing precedence as in jinja2/parser.py ----

  bool at_tuple_end(const char* extra_end) const {
    const Token& t = cur();
    if (t.kind == Token::Kind::kVarEnd || t.kind == Token::Kind::kBlockEnd || t.kind == Token::Kind::kEnd) return true;
    if (t.kind == Token::Kind::kOperator && t.text == ")") return true;
    return extra_end && t.kind == Token::Kind::kName && t.text == extra_end;
  }

  // Comma-separated expressions: one alone is itself, several make a tuple.
  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parentheses, const char* extra_end = nullptr) {
    const Position at = cur().at;
    std::vector<ExprPtr> items;
    bool saw_comma = false;
    while (true) {
      if (!items.empty()) {
        if (!is_op(",")) break;
        advance();
        saw_comma = true;
      }
      if (at_tuple_end(extra_end)) break;
      items.push_back(parse_expression(with_condexpr));
    }
    if (items.empty() && !explicit_parentheses) syntax_error(at, "expected an expression, found " + describe(cur()));
    if (items.size() == 1 && !saw_comma) return std::move(items[0]);
    auto e = make(Expr::Kind::kTuple, at);
    e->children = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr = true) {
    Depth depth(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const Position at = cur().at;
      advance();
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (is_name("else")) {
        advance();
        otherwise = parse_condexpr();
      }
      auto c = make(Expr::Kind::kCondition, at);
      c->children.push_back(std::move(test));
      c->children.push_back(std::move(expr));
      c->children.push_back(std::move(otherwise));
      expr = std::move(c);
    }
    return expr;
  }

  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, Position at) {
    auto e = make(Expr::Kind::kBinary, at);
    e->name = op;
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Position at = cur().at;
      advance();
      left = binary("or", std::move(left), parse_and(), at);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Position at = cur().at;
      advance();
      left = binary("and", std::move(left), parse_not(), at);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Depth depth(*this);
      auto e = make(Expr::Kind::kNot, cur().at);
      advance();
      e->children.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Position at = cur().at;
    ExprPtr first = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      std::string op;
      if (cur().kind == Token::Kind::kOperator && (cur().text == "==" || cur().text == "!=" || cur().text == "<" ||
                                                   cur().text == "<=" || cur().text == ">" || cur().text == ">=")) {
        op = cur().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == Token::Kind::kName && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return first;
    auto e = make(Expr::Kind::kCompare, at);
    e->children.push_back(std::move(first));
    for (auto& o : operands) e->children.push_back(std::move(o));
    e->arg_names = std::move(ops);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Position at = cur().at;
      const std::string op = cur().text;
      advance();
      left = binary(op, std::move(left), parse_concat(), at);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Position at = cur().at;
      advance();
      left = binary("~", std::move(left), parse_math2(), at);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Position at = cur().at;
      const std::string op = cur().text;
      advance();
      left = binary(op, std::move(left), parse_pow(), at);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Position at = cur().at;
      advance();
      left = binary("**", std::move(left), parse_unary(true), at);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    Depth depth(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      node = make(is_op("-") ? Expr::Kind::kNegate : Expr::Kind::kPlus, cur().at);
      advance();
      node->children.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    switch (t.kind) {
      case Token::Kind::kName: {
        auto e = make(Expr::Kind::kLiteral, t.at);
        if (t.text == "true" || t.text == "True") {
          e->literal = Value::boolean(true);
        } else if (t.text == "false" || t.text == "False") {
          e->literal = Value::boolean(false);
        } else if (t.text == "none" || t.text == "None") {
          e->literal = Value::none();
        } else {
          e->kind = Expr::Kind::kName;
          e->name = t.text;
        }
        advance();
        return e;
      }
      case Token::Kind::kString: {
        auto e = make(Expr::Kind::kLiteral, t.at);
        std::string s;
        while (cur().kind == Token::Kind::kString) {  // adjacent literals concatenate
          s += cur().text;
          advance();
        }
        e->literal = Value::string(std::move(s));
        return e;
      }
      case Token::Kind::kInt: {
        auto e = make(Expr::Kind::kLiteral, t.at);
        e->literal = Value::integer(t.int_value);
        advance();
        return e;
      }
      case Token::Kind::kFloat: {
        auto e = make(Expr::Kind::kLiteral, t.at);
        e->literal = Value::number(t.float_value);
        advance();
        return e;
      }
      case Token::Kind::kOperator:
        if (t.text == "(") {
          advance();
          ExprPtr inner = parse_tuple(true, true);
          expect_op(")");
          return inner;
        }
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default:
        break;
    }
    syntax_error(t.at, "unexpected " + describe(t));
  }

  ExprPtr parse_list() {
    auto e = make(Expr::Kind::kList, cur().at);
    expect_op("[");
    while (!is_op("]")) {
      if (!e->children.empty()) {
        expect_op(",");
        if (is_op("]")) break;
      }
      e->children.push_back(parse_expression());
    }
    expect_op("]");
    return e;
  }

  ExprPtr parse_dict() {
    auto e = make(Expr::Kind::kDict, cur().at);
    expect_op("{");
    while (!is_op("}")) {
      if (!e->children.empty()) {
        expect_op(",");
        if (is_op("}")) break;
      }
      e->children.push_back(parse_expression());
      expect_op(":");
      e->children.push_back(parse_expression());
    }
    expect_op("}");
    return e;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Position at = cur().at;
    if (is_op(".")) {
      advance();
      if (cur().kind == Token::Kind::kName) {
        auto e = make(Expr::Kind::kGetAttr, at);
        e->name = expect_name();
        e->children.push_back(std::move(node));
        return e;
      }
      if (cur().kind == Token::Kind::kInt) {  // x.0 is x[0]
        auto e = make(Expr::Kind::kGetItem, at);
        auto index = make(Expr::Kind::kLiteral, cur().at);
        index->literal = Value::integer(cur().int_value);
        advance();
        e->children.push_back(std::move(node));
        e->children.push_back(std::move(index));
        return e;
      }
      syntax_error(cur().at, "expected a name after '.', found " + describe(cur()));
    }
    expect_op("[");
    ExprPtr start, stop, step;
    bool slice = false;
    if (!is_op(":")) start = parse_expression();
    if (is_op(":")) {
      slice = true;
      advance();
      if (!is_op("]") && !is_op(":")) stop = parse_expression();
      if (is_op(":")) {
        advance();
        if (!is_op("]")) step = parse_expression();
      }
    }
    if (is_op(",")) unsupported(cur().at, "a tuple subscript");
    expect_op("]");
    auto e = make(slice ? Expr::Kind::kSlice : Expr::Kind::kGetItem, at);
    e->children.push_back(std::move(node));
    e->children.push_back(std::move(start));
    if (slice) {
      e->children.push_back(std::move(stop));
      e->children.push_back(std::move(step));
    }
    return e;
  }

  // ( args ) appended to e->children with their names in e->arg_names.
  void parse_args(Expr& e) {
    expect_op("(");
    bool named = false;
    while (!is_op(")")) {
      if (e.arg_names.size() > 0) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) unsupported(cur().at, "*args / **kwargs in a call");
      if (cur().kind == Token::Kind::kName && peek().kind == Token::Kind::kOperator && peek().text == "=") {
        e.arg_names.push_back(expect_name());
        advance();
        named = true;
      } else {
        if (named) syntax_error(cur().at, "positional argument after a keyword argument");
        e.arg_names.emplace_back();
      }
      e.children.push_back(parse_expression());
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(Expr::Kind::kCall, cur().at);
    e->children.push_back(std::move(node));
    parse_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".")) {
      advance();
      name += '.';
      name += expect_name();
    }
    return name;
  }

  ExprPtr parse_filter(ExprPtr node) {
    auto e = make(Expr::Kind::kFilter, cur().at);
    expect_op("|");
    const Position at = cur().at;
    e->name = dotted_name();
    if (!has_filter(e->name)) unsupported(at, "the filter '" + e->name + "'");
    e->children.push_back(std::move(node));
    if (is_op("(")) parse_args(*e);
    return e;
  }

  ExprPtr parse_test(ExprPtr node) {
    auto e = make(Expr::Kind::kTest, cur().at);
    advance();  // is
    if (is_name("not")) {
      e->negated = true;
      advance();
    }
    const Position at = cur().at;
    e->name = dotted_name();
    if (!has_test(e->name)) unsupported(at, "the test '" + e->name + "'");
    e->children.push_back(std::move(node));
    if (is_op("(")) {
      parse_args(*e);
    } else {
      const Token& t = cur();
      const bool starts_primary =
          t.kind == Token::Kind::kName || t.kind == Token::Kind::kString || t.kind == Token::Kind::kInt ||
          t.kind == Token::Kind::kFloat ||
          (t.kind == Token::Kind::kOperator && (t.text == "(" || t.text == "[" || t.text == "{"));
      if (starts_primary && !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) syntax_error(t.at, "you cannot chain multiple tests with 'is'");
        e->children.push_back(parse_postfix(parse_primary()));
        e->arg_names.emplace_back();
      }
    }
    return e;
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::vector<Node> parse(std::string_view source) { return Parser(tokenize(source)).parse_template(); }

}  // namespace lm::jinja
