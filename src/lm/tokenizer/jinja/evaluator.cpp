#include "lm/tokenizer/jinja/evaluator.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "lm/tokenizer/jinja/builtins.h"
#include "lm/tokenizer/jinja/error.h"

namespace lm::jinja {

namespace {

using Scope = std::unordered_map<std::string, Value>;

enum class Flow { kNormal, kBreak, kContinue };

std::string join_position(const Position& at, const std::string& what) {
  return "chat template, " + where(at) + ": " + what;
}

class Evaluator {
 public:
  Evaluator(std::vector<std::pair<std::string, Value>> variables, const RenderLimits& limits) : limits_(limits) {
    scopes_.emplace_back();
    for (auto& variable : variables) scopes_.back()[variable.first] = std::move(variable.second);
  }

  // Namespaces are the one mutable container, so an attribute assignment is the one way to
  // build a reference cycle (`{% set ns.me = ns %}`) that shared ownership would never free:
  // every namespace assigned to is emptied when the render ends.
  ~Evaluator() {
    for (const Value& ns : assigned_namespaces_) ns.dict_data().items.clear();
  }

  std::string run(const std::vector<Node>& program) {
    execute(program);
    return std::move(out_);
  }

 private:
  // ---- statements

  Flow execute(const std::vector<Node>& body) {
    for (const Node& n : body) {
      const Flow f = execute(n);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow execute(const Node& n) {
    // Value operations outside an expression (printing a value, unpacking it) fail here.
    try {
      return execute_node(n);
    } catch (const EvalError& err) {
      throw base::FormatError(join_position(n.at, err.what()));
    } catch (const EvalUnsupported& err) {
      throw base::Unsupported(join_position(n.at, std::string(err.what()) + " is not supported by this interpreter"));
    }
  }

  Flow execute_node(const Node& n) {
    switch (n.kind) {
      case Node::Kind::kText:
        write(n.text, n.at);
        return Flow::kNormal;
      case Node::Kind::kOutput: {
        const Value v = eval(*n.expr);
        write(to_output(v), n.at);
        return Flow::kNormal;
      }
      case Node::Kind::kIf:
        for (size_t i = 0; i < n.conditions.size(); ++i) {
          if (eval(*n.conditions[i]).truthy()) return execute(n.bodies[i]);
        }
        return execute(n.else_body);
      case Node::Kind::kFor:
        return execute_for(n);
      case Node::Kind::kSet: {
        Value v = eval(*n.expr);
        if (!n.attribute.empty()) {
          const Value target = lookup(n.targets[0]);
          if (!target.is_namespace()) {
            throw base::FormatError(join_position(n.at, "cannot assign the attribute '" + n.attribute + "' of '" +
                                                            n.targets[0] + "': it is not a namespace() object"));
          }
          if (seen_namespaces_.insert(&target.dict_data()).second) assigned_namespaces_.push_back(target);
          try {
            target.set_attribute(n.attribute, std::move(v));
          } catch (const EvalError& e) {
            throw base::FormatError(join_position(n.at, e.what()));
          }
        } else {
          assign(n.targets, v, n.at);
        }
        return Flow::kNormal;
      }
      case Node::Kind::kSetBlock: {
        std::string saved = std::move(out_);
        out_.clear();
        const size_t saved_total = total_;
        execute(n.body);
        std::string captured = std::move(out_);
        out_ = std::move(saved);
        total_ = saved_total;
        scopes_.back()[n.targets[0]] = Value::string(std::move(captured));
        return Flow::kNormal;
      }
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kScope:
        return execute(n.body);
      case Node::Kind::kFilterBlock: {
        std::string saved = std::move(out_);
        out_.clear();
        const Flow f = execute(n.body);
        Value v = Value::string(std::move(out_));
        out_ = std::move(saved);
        for (const auto& filter : n.conditions) {
          try {
            v = apply_filter(filter->name, v, eval_args(*filter, 1));
          } catch (const EvalError& err) {
            throw base::FormatError(join_position(filter->at, err.what()));
          }
        }
        out_ += to_output(v);  // the body's bytes were counted as they were written
        return f;
      }
      case Node::Kind::kMacro:
        scopes_.back()[n.text] = Value::function(n.text, [this, &n](const Args& a) { return call_macro(n, a); });
        return Flow::kNormal;
    }
    return Flow::kNormal;
  }

  void assign(const std::vector<std::string>& targets, const Value& v, const Position& at) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = v;
      return;
    }
    std::vector<Value> items;
    try {
      items = iterate(v);
    } catch (const EvalError& e) {
      throw base::FormatError(join_position(at, std::string("cannot unpack: ") + e.what()));
    }
    if (items.size() != targets.size()) {
      throw base::FormatError(join_position(at, "cannot unpack " + std::to_string(items.size()) + " values into " +
                                                    std::to_string(targets.size()) + " names"));
    }
    for (size_t i = 0; i < targets.size(); ++i) scopes_.back()[targets[i]] = items[i];
  }

  Flow execute_for(const Node& n) {
    const Value seq = eval(*n.expr);
    std::vector<Value> items;
    try {
      items = iterate(seq);
    } catch (const EvalError& e) {
      throw base::FormatError(join_position(n.expr->at, e.what()));
    }
    if (n.filter) {
      // `for x in xs if cond`: the filter sees only the loop variables, and loop.* counts the
      // items that pass.
      std::vector<Value> kept;
      for (const Value& item : items) {
        count_iteration(n.at);
        scopes_.emplace_back();
        assign(n.targets, item, n.at);
        const bool pass = eval(*n.filter).truthy();
        scopes_.pop_back();
        if (pass) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return execute(n.else_body);
    const int64_t length = static_cast<int64_t>(items.size());
    // One loop object for the whole loop, advanced in place each iteration, as Jinja2's
    // LoopContext is (and cheaper than building it anew).
    auto index = std::make_shared<int64_t>(0);
    const Value loop = Value::dict({
        {"index", Value()},
        {"index0", Value()},
        {"revindex", Value()},
        {"revindex0", Value()},
        {"first", Value()},
        {"last", Value()},
        {"length", Value::integer(length)},
        {"depth", Value::integer(1)},
        {"depth0", Value::integer(0)},
        {"previtem", Value()},
        {"nextitem", Value()},
        {"cycle", Value::function("loop.cycle",
                                  [index](const Args& a) {
                                    if (a.positional.empty())
                                      throw EvalError("loop.cycle() needs at least one argument");
                                    return a.positional[static_cast<size_t>(*index) % a.positional.size()];
                                  })},
    });
    auto& fields = loop.dict_data().items;
    for (int64_t i = 0; i < length; ++i) {
      count_iteration(n.at);
      *index = i;
      fields[0].second = Value::integer(i + 1);
      fields[1].second = Value::integer(i);
      fields[2].second = Value::integer(length - i);
      fields[3].second = Value::integer(length - i - 1);
      fields[4].second = Value::boolean(i == 0);
      fields[5].second = Value::boolean(i == length - 1);
      fields[9].second = i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item");
      fields[10].second =
          i + 1 < length ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item");
      scopes_.emplace_back();
      assign(n.targets, items[static_cast<size_t>(i)], n.at);
      scopes_.back()["loop"] = loop;
      const Flow f = execute(n.body);
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  // A macro call renders its body in a scope of its own that sees its parameters and the
  // template's top level (not the caller's loop variables), and returns the text.
  Value call_macro(const Node& macro, const Args& a) {
    if (macro_depth_ >= kMaxMacroDepth) {
      throw EvalError("macro calls nested more than " + std::to_string(kMaxMacroDepth) + " deep");
    }
    if (a.positional.size() > macro.targets.size()) {
      throw EvalError("macro '" + macro.text + "' takes " + std::to_string(macro.targets.size()) + " arguments (" +
                      std::to_string(a.positional.size()) + " given)");
    }
    Scope params;
    for (size_t i = 0; i < a.positional.size(); ++i) params[macro.targets[i]] = a.positional[i];
    for (const auto& [name, value] : a.named) {
      if (std::find(macro.targets.begin(), macro.targets.end(), name) == macro.targets.end()) {
        throw EvalError("macro '" + macro.text + "' has no parameter '" + name + "'");
      }
      if (params.count(name)) throw EvalError("macro '" + macro.text + "' got two values for '" + name + "'");
      params[name] = value;
    }
    const size_t saved_floor = floor_;
    scopes_.push_back(std::move(params));
    floor_ = scopes_.size() - 1;
    ++macro_depth_;
    for (size_t i = 0; i < macro.targets.size(); ++i) {
      if (scopes_.back().count(macro.targets[i])) continue;
      scopes_.back()[macro.targets[i]] = macro.conditions[i]
                                             ? eval(*macro.conditions[i])
                                             : Value::undefined("'" + macro.targets[i] + "' is undefined");
    }
    std::string saved = std::move(out_);
    out_.clear();
    execute(macro.body);
    std::string rendered = std::move(out_);
    out_ = std::move(saved);
    --macro_depth_;
    floor_ = saved_floor;
    scopes_.pop_back();
    return Value::string(std::move(rendered));
  }

  void count_iteration(const Position& at) {
    if (++iterations_ > limits_.max_loop_iterations) {
      throw base::FormatError(join_position(
          at, "more than " + std::to_string(limits_.max_loop_iterations) + " loop iterations in one render"));
    }
  }

  void write(const std::string& s, const Position& at) {
    total_ += s.size();
    if (total_ > limits_.max_output_bytes) {
      throw base::FormatError(join_position(
          at, "the rendered text passes the limit of " + std::to_string(limits_.max_output_bytes) + " bytes"));
    }
    out_ += s;
  }

  Value lookup(const std::string& name) const {
    for (size_t i = scopes_.size(); i-- > floor_;) {
      const auto found = scopes_[i].find(name);
      if (found != scopes_[i].end()) return found->second;
    }
    if (floor_ > 0) {  // inside a macro: its own scopes, then the template's top level
      const auto found = scopes_[0].find(name);
      if (found != scopes_[0].end()) return found->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  // ---- expressions

  Value eval(const Expr& e) {
    // Errors from values and builtins get the position of the innermost expression.
    try {
      return eval_inner(e);
    } catch (const EvalError& err) {
      throw base::FormatError(join_position(e.at, err.what()));
    } catch (const EvalUnsupported& err) {
      throw base::Unsupported(join_position(e.at, std::string(err.what()) + " is not supported by this interpreter"));
    }
  }

  std::optional<int64_t> slice_index(const Expr* e) {
    if (!e) return std::nullopt;
    const Value v = eval(*e);
    if (v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) throw EvalError("slice indices must be integers or None, not " + v.type_name());
    return v.as_int();
  }

  Args eval_args(const Expr& e, size_t first) {
    Args a;
    for (size_t i = first; i < e.children.size(); ++i) {
      const std::string& name = e.arg_names[i - first];
      if (name.empty()) {
        a.positional.push_back(eval(*e.children[i]));
      } else {
        a.named.emplace_back(name, eval(*e.children[i]));
      }
    }
    return a;
  }

  Value eval_inner(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return lookup(e.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        for (const auto& c : e.children) items.push_back(eval(*c));
        return Value::list(std::move(items), e.kind == Expr::Kind::kTuple);
      }
      case Expr::Kind::kDict: {
        DictData d;
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          const Value key = eval(*e.children[i]);
          if (key.is_string()) {
            d.set(key.as_string(), eval(*e.children[i + 1]));
          } else if (key.is_int()) {
            d.set(DictKey::integer(key.as_int()), eval(*e.children[i + 1]));
          } else {
            throw EvalUnsupported("a dict key of type '" + key.type_name() + "'");
          }
        }
        return Value::dict(std::move(d.items));
      }
      case Expr::Kind::kGetAttr:
        return get_attr(eval(*e.children[0]), e.name);
      case Expr::Kind::kGetItem: {
        const Value object = eval(*e.children[0]);
        return get_item(object, eval(*e.children[1]));
      }
      case Expr::Kind::kSlice: {
        const Value object = eval(*e.children[0]);
        const auto start = slice_index(e.children[1].get());
        const auto stop = slice_index(e.children[2].get());
        const auto step = slice_index(e.children[3].get());
        return slice(object, start, stop, step);
      }
      case Expr::Kind::kCall: {
        const Value callee = eval(*e.children[0]);
        const Args args = eval_args(e, 1);
        if (callee.is_undefined()) throw EvalError(undefined_message(callee));
        if (!callee.is_function()) throw EvalError("'" + callee.type_name() + "' object is not callable");
        return callee.as_function()(args);
      }
      case Expr::Kind::kFilter: {
        const Value v = eval(*e.children[0]);
        return apply_filter(e.name, v, eval_args(e, 1));
      }
      case Expr::Kind::kTest: {
        const Value v = eval(*e.children[0]);
        const bool r = apply_test(e.name, v, eval_args(e, 1));
        return Value::boolean(r != e.negated);
      }
      case Expr::Kind::kNot:
        return Value::boolean(!eval(*e.children[0]).truthy());
      case Expr::Kind::kNegate:
      case Expr::Kind::kPlus: {
        const Value v = eval(*e.children[0]);
        if (v.is_undefined()) throw EvalError(undefined_message(v));
        if (!v.is_number())
          throw EvalError("bad operand type for unary " + std::string(e.kind == Expr::Kind::kNegate ? "-" : "+") +
                          ": '" + v.type_name() + "'");
        if (e.kind == Expr::Kind::kPlus) return v.is_float() ? v : Value::integer(v.as_int());
        return v.is_float() ? Value::number(-v.as_double()) : Value::integer(-v.as_int());
      }
      case Expr::Kind::kBinary:
        return eval_binary(e);
      case Expr::Kind::kCompare: {
        Value left = eval(*e.children[0]);
        for (size_t i = 0; i < e.arg_names.size(); ++i) {
          Value right = eval(*e.children[i + 1]);
          const std::string& op = e.arg_names[i];
          bool r;
          if (op == "==") {
            r = equals(left, right);
          } else if (op == "!=") {
            r = !equals(left, right);
          } else if (op == "in") {
            r = contains(right, left);
          } else if (op == "not in") {
            r = !contains(right, left);
          } else {
            const int c = compare(left, right);
            r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!r) return Value::boolean(false);
          left = std::move(right);
        }
        return Value::boolean(true);
      }
      case Expr::Kind::kCondition: {
        if (eval(*e.children[0]).truthy()) return eval(*e.children[1]);
        if (e.children[2]) return eval(*e.children[2]);
        return Value::undefined("the inline if expression has no else");
      }
    }
    return Value();
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value l = eval(*e.children[0]);
      return l.truthy() ? eval(*e.children[1]) : l;
    }
    if (op == "or") {
      Value l = eval(*e.children[0]);
      return l.truthy() ? l : eval(*e.children[1]);
    }
    const Value l = eval(*e.children[0]);
    const Value r = eval(*e.children[1]);
    if (op == "~") {
      std::string s = to_output(l) + to_output(r);
      check_string_size(s.size());
      return Value::string(std::move(s));
    }
    if (l.is_undefined()) throw EvalError(undefined_message(l));
    if (r.is_undefined()) throw EvalError(undefined_message(r));
    auto type_error = [&]() -> Value {
      throw EvalError("unsupported operand type(s) for " + op + ": '" + l.type_name() + "' and '" + r.type_name() +
                      "'");
    };
    if (op == "+") {
      if (l.is_number() && r.is_number()) {
        if (l.is_float() || r.is_float()) return Value::number(l.as_double() + r.as_double());
        return Value::integer(l.as_int() + r.as_int());
      }
      if (l.is_string() && r.is_string()) {
        check_string_size(l.as_string().size() + r.as_string().size());
        return Value::string(l.as_string() + r.as_string());
      }
      if (l.is_list() && r.is_list() && l.list_data().tuple == r.list_data().tuple) {
        check_list_size(l.list_data().items.size() + r.list_data().items.size());
        std::vector<Value> items = l.list_data().items;
        items.insert(items.end(), r.list_data().items.begin(), r.list_data().items.end());
        return Value::list(std::move(items), l.list_data().tuple);
      }
      if (l.is_string() || r.is_string()) {
        throw EvalError("can only concatenate str (not \"" + (l.is_string() ? r : l).type_name() + "\") to str");
      }
      return type_error();
    }
    if (op == "*") {
      const bool lseq = l.is_string() || l.is_list();
      const bool rseq = r.is_string() || r.is_list();
      if ((lseq && (r.is_int() || r.is_bool())) || (rseq && (l.is_int() || l.is_bool()))) {
        const Value& seq = lseq ? l : r;
        const int64_t times = std::max<int64_t>(0, (lseq ? r : l).as_int());
        if (seq.is_string()) {
          check_string_size(static_cast<size_t>(times) * seq.as_string().size());
          std::string s;
          for (int64_t i = 0; i < times; ++i) s += seq.as_string();
          return Value::string(std::move(s));
        }
        check_list_size(static_cast<size_t>(times) * seq.list_data().items.size());
        std::vector<Value> items;
        for (int64_t i = 0; i < times; ++i) {
          items.insert(items.end(), seq.list_data().items.begin(), seq.list_data().items.end());
        }
        return Value::list(std::move(items), seq.list_data().tuple);
      }
    }
    if (!l.is_number() || !r.is_number()) return type_error();
    const bool floating = l.is_float() || r.is_float();
    if (op == "-")
      return floating ? Value::number(l.as_double() - r.as_double()) : Value::integer(l.as_int() - r.as_int());
    if (op == "*")
      return floating ? Value::number(l.as_double() * r.as_double()) : Value::integer(l.as_int() * r.as_int());
    if (op == "/") {
      if (r.as_double() == 0) throw EvalError("division by zero");
      return Value::number(l.as_double() / r.as_double());
    }
    if (op == "//" || op == "%") {
      if (r.as_double() == 0) throw EvalError("integer division or modulo by zero");
      if (floating) {
        const double a = l.as_double(), b = r.as_double();
        const double q = std::floor(a / b);
        return op == "//" ? Value::number(q) : Value::number(a - q * b);
      }
      const int64_t a = l.as_int(), b = r.as_int();
      int64_t q = a / b;
      if ((a % b != 0) && ((a < 0) != (b < 0))) --q;  // Python floors
      return op == "//" ? Value::integer(q) : Value::integer(a - q * b);
    }
    if (op == "**") {
      if (!floating && r.as_int() >= 0) {
        const int64_t base = l.as_int(), exponent = r.as_int();
        if (base == 0 || base == 1) return Value::integer(exponent == 0 ? 1 : base);
        if (base == -1) return Value::integer(exponent % 2 == 0 ? 1 : -1);
        int64_t result = 1;
        for (int64_t i = 0; i < exponent; ++i) {  // |base| >= 2: at most 63 steps before the check fails
          if (std::abs(static_cast<double>(result) * static_cast<double>(base)) > 9.2e18) {
            throw EvalUnsupported("an integer power past 64 bits");
          }
          result *= base;
        }
        return Value::integer(result);
      }
      return Value::number(std::pow(l.as_double(), r.as_double()));
    }
    return type_error();
  }

  static constexpr int kMaxMacroDepth = 64;

  const RenderLimits limits_;
  std::vector<Scope> scopes_;
  std::vector<Value> assigned_namespaces_;
  std::unordered_set<const void*> seen_namespaces_;
  size_t floor_ = 0;  // the lowest scope lookups see besides the top level (a macro's own)
  int macro_depth_ = 0;
  std::string out_;
  size_t total_ = 0;
  int64_t iterations_ = 0;
};

}  // namespace

std::string render(const std::vector<Node>& program, std::vector<std::pair<std::string, Value>> variables,
                   const RenderLimits& limits) {
  return Evaluator(std::move(variables), limits).run(program);
}

}  // namespace lm::jinja
