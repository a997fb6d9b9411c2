#include "lm/tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <initializer_list>

#include "lm/tokenizer/jinja/error.h"
#include "lm/tokenizer/jinja/pystring.h"

namespace lm::jinja {

void check_string_size(size_t bytes) {
  if (bytes > kMaxStringBytes) {
    throw EvalError("a string of " + std::to_string(bytes) + " bytes is past the limit of " +
                    std::to_string(kMaxStringBytes));
  }
}

void check_list_size(size_t items) {
  if (items > kMaxListItems) {
    throw EvalError("a list of " + std::to_string(items) + " items is past the limit of " +
                    std::to_string(kMaxListItems));
  }
}

std::string undefined_message(const Value& v) {
  return v.as_string().empty() ? std::string("a value is undefined") : v.as_string();
}

namespace {

[[noreturn]] void fail_undefined(const Value& v) { throw EvalError(undefined_message(v)); }

[[noreturn]] void fail_keyword(const std::string& fn, const char* problem, const std::string& key) {
  throw EvalError(fn + "() " + problem + " '" + key + "'");
}

// Python-style binding of call arguments to parameter names. Absent ones are nullopt.
using Bound = std::vector<std::optional<Value>>;
Bound bind(const std::string& fn, const Args& args, std::initializer_list<const char*> names) {
  Bound out(names.size());
  if (args.positional.size() > names.size()) {
    throw EvalError(fn + "() takes at most " + std::to_string(names.size()) + " arguments (" +
                    std::to_string(args.positional.size()) + " given)");
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (const auto& [key, value] : args.named) {
    size_t i = 0;
    for (const char* n : names) {
      if (key == n) break;
      ++i;
    }
    if (i == names.size()) fail_keyword(fn, "got an unexpected keyword argument", key);
    if (out[i]) fail_keyword(fn, "got multiple values for argument", key);
    out[i] = value;
  }
  return out;
}

const Value& required(const Bound& b, size_t i, const std::string& fn, const char* name) {
  if (!b[i]) throw EvalError(fn + "() missing required argument '" + name + "'");
  return *b[i];
}

const std::string& need_string(const Value& v, const std::string& what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) throw EvalError(what + " must be a string, not '" + v.type_name() + "'");
  return v.as_string();
}

int64_t need_int(const Value& v, const std::string& what) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_int() && !v.is_bool()) throw EvalError(what + " must be an integer, not '" + v.type_name() + "'");
  return v.as_int();
}

std::optional<std::string> optional_string(const std::optional<Value>& v, const std::string& what) {
  if (!v || v->is_none()) return std::nullopt;
  return need_string(*v, what);
}

Value make_list(std::vector<Value> items) {
  check_list_size(items.size());
  return Value::list(std::move(items));
}

Value string_list(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.push_back(Value::string(p));
  return make_list(std::move(items));
}

// A dotted attribute path as selectattr/map/join take it ("function.name", "0").
Value lookup_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    const bool numeric =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = get_item(v, numeric ? Value::integer(std::strtoll(part.c_str(), nullptr, 10)) : Value::string(part));
    if (dot == std::string::npos) return v;
    pos = dot + 1;
  }
}

// ---------------------------------------------------------------- tests

using TestFn = bool (*)(const Value&, const Args&);

const Value& test_arg(const Args& a, const char* test) {
  if (a.positional.size() != 1 || !a.named.empty()) {
    throw EvalError(std::string("the test '") + test + "' takes exactly one argument");
  }
  return a.positional[0];
}

bool is_lower_or_upper(const Value& v, bool upper) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (char c : v.as_string()) {
    if (c >= 'a' && c <= 'z') {
      if (upper) return false;
      cased = true;
    } else if (c >= 'A' && c <= 'Z') {
      if (!upper) return false;
      cased = true;
    }
  }
  return cased;
}

struct TestEntry {
  const char* name;
  TestFn fn;
};

const TestEntry kTests[] = {
    {"defined", [](const Value& v, const Args&) { return !v.is_undefined(); }},
    {"undefined", [](const Value& v, const Args&) { return v.is_undefined(); }},
    {"none", [](const Value& v, const Args&) { return v.is_none(); }},
    {"boolean", [](const Value& v, const Args&) { return v.is_bool(); }},
    {"true", [](const Value& v, const Args&) { return v.is_bool() && v.as_bool(); }},
    {"false", [](const Value& v, const Args&) { return v.is_bool() && !v.as_bool(); }},
    {"integer", [](const Value& v, const Args&) { return v.is_int(); }},
    {"float", [](const Value& v, const Args&) { return v.is_float(); }},
    {"number", [](const Value& v, const Args&) { return v.is_number(); }},
    {"string", [](const Value& v, const Args&) { return v.is_string(); }},
    {"mapping", [](const Value& v, const Args&) { return v.is_dict(); }},
    {"iterable",
     [](const Value& v, const Args&) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }},
    {"sequence",
     [](const Value& v, const Args&) { return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined(); }},
    {"callable", [](const Value& v, const Args&) { return v.is_function(); }},
    {"odd", [](const Value& v, const Args&) { return need_int(v, "odd") % 2 != 0; }},
    {"even", [](const Value& v, const Args&) { return need_int(v, "even") % 2 == 0; }},
    {"divisibleby",
     [](const Value& v, const Args& a) {
       const int64_t d = need_int(test_arg(a, "divisibleby"), "divisibleby");
       if (d == 0) throw EvalError("integer division or modulo by zero");
       return need_int(v, "divisibleby") % d == 0;
     }},
    {"eq", [](const Value& v, const Args& a) { return equals(v, test_arg(a, "eq")); }},
    {"equalto", [](const Value& v, const Args& a) { return equals(v, test_arg(a, "equalto")); }},
    {"==", [](const Value& v, const Args& a) { return equals(v, test_arg(a, "==")); }},
    {"ne", [](const Value& v, const Args& a) { return !equals(v, test_arg(a, "ne")); }},
    {"!=", [](const Value& v, const Args& a) { return !equals(v, test_arg(a, "!=")); }},
    {"lt", [](const Value& v, const Args& a) { return compare(v, test_arg(a, "lt")) < 0; }},
    {"lessthan", [](const Value& v, const Args& a) { return compare(v, test_arg(a, "lessthan")) < 0; }},
    {"<", [](const Value& v, const Args& a) { return compare(v, test_arg(a, "<")) < 0; }},
    {"le", [](const Value& v, const Args& a) { return compare(v, test_arg(a, "le")) <= 0; }},
    {"<=", [](const Value& v, const Args& a) { return compare(v, test_arg(a, "<=")) <= 0; }},
    {"gt", [](const Value& v, const Args& a) { return compare(v, test_arg(a, "gt")) > 0; }},
    {"greaterthan", [](const Value& v, const Args& a) { return compare(v, test_arg(a, "greaterthan")) > 0; }},
    {">", [](const Value& v, const Args& a) { return compare(v, test_arg(a, ">")) > 0; }},
    {"ge", [](const Value& v, const Args& a) { return compare(v, test_arg(a, "ge")) >= 0; }},
    {">=", [](const Value& v, const Args& a) { return compare(v, test_arg(a, ">=")) >= 0; }},
    {"in", [](const Value& v, const Args& a) { return contains(test_arg(a, "in"), v); }},
    {"sameas",
     [](const Value& v, const Args& a) {
       const Value& o = test_arg(a, "sameas");
       if (v.kind() != o.kind()) return false;
       switch (v.kind()) {
         case Value::Kind::kNone:
         case Value::Kind::kUndefined:
           return true;
         case Value::Kind::kBool:
           return v.as_bool() == o.as_bool();
         case Value::Kind::kInt:
           return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
         case Value::Kind::kList:
           return &v.list_data() == &o.list_data();
         case Value::Kind::kDict:
         case Value::Kind::kNamespace:
           return &v.dict_data() == &o.dict_data();
         default:
           return false;
       }
     }},
    {"lower", [](const Value& v, const Args&) { return is_lower_or_upper(v, false); }},
    {"upper", [](const Value& v, const Args&) { return is_lower_or_upper(v, true); }},
    {"escaped", [](const Value&, const Args&) { return false; }},
    {"filter", [](const Value& v, const Args&) { return v.is_string() && has_filter(v.as_string()); }},
    {"test", [](const Value& v, const Args&) { return v.is_string() && has_test(v.as_string()); }},
};

const TestEntry* find_test(std::string_view name) {
  for (const auto& t : kTests) {
    if (name == t.name) return &t;
  }
  return nullptr;
}

// ---------------------------------------------------------------- filters

using FilterFn = Value (*)(const Value&, const Args&);

Value select_or_reject(const Value& seq, const Args& a, bool by_attribute, bool select, const char* fn) {
  size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (a.positional.empty()) throw EvalError(std::string(fn) + "() missing the attribute argument");
    attribute = need_string(a.positional[0], std::string(fn) + " attribute");
    next = 1;
  }
  std::string test;
  Args test_args;
  if (a.positional.size() > next) {
    test = need_string(a.positional[next], std::string(fn) + " test name");
    if (!find_test(test)) throw EvalUnsupported("the test '" + test + "'");
    test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next) + 1, a.positional.end());
    test_args.named = a.named;
  } else if (!a.named.empty()) {
    throw EvalError(std::string(fn) + "() got keyword arguments without a test");
  }
  std::vector<Value> out;
  if (!seq.truthy()) return make_list({});  // Jinja2 selects from a falsy value (none) nothing
  for (const Value& item : iterate(seq)) {
    const Value subject = by_attribute ? lookup_path(item, attribute) : item;
    const bool pass = test.empty() ? subject.truthy() : find_test(test)->fn(subject, test_args);
    if (pass == select) out.push_back(item);
  }
  return make_list(std::move(out));
}

Value filter_map(const Value& seq, const Args& a) {
  std::vector<Value> out;
  if (!seq.truthy()) return make_list({});  // as Jinja2: mapping over none gives nothing
  if (a.positional.empty()) {
    std::optional<std::string> attribute;
    std::optional<Value> fallback;
    for (const auto& [k, v] : a.named) {
      if (k == "attribute") {
        attribute = need_string(v, "map attribute");
      } else if (k == "default") {
        fallback = v;
      } else {
        throw EvalError("map() got an unexpected keyword argument '" + k + "'");
      }
    }
    if (!attribute) throw EvalError("map() needs a filter name or attribute=");
    for (const Value& item : iterate(seq)) {
      Value v = lookup_path(item, *attribute);
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return make_list(std::move(out));
  }
  const std::string filter = need_string(a.positional[0], "map filter name");
  if (!has_filter(filter)) throw EvalUnsupported("the filter '" + filter + "'");
  Args rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.named = a.named;
  for (const Value& item : iterate(seq)) out.push_back(apply_filter(filter, item, rest));
  return make_list(std::move(out));
}

// join/sort/map's attribute=: a dotted path, or an integer index.
Value lookup_attribute(const Value& item, const Value& attribute) {
  if (attribute.is_int()) return get_item(item, attribute);
  return lookup_path(item, need_string(attribute, "attribute"));
}

std::string join_strings(const Value& seq, const std::string& sep, const std::optional<Value>& attribute) {
  std::string out;
  bool first = true;
  for (const Value& item : iterate(seq)) {
    if (!first) out += sep;
    first = false;
    out += to_output(attribute ? lookup_attribute(item, *attribute) : item);
    check_string_size(out.size());
  }
  return out;
}

Value filter_tojson(const Value& v, const Args& a) {
  const Bound b = bind("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
  if (b[0] && b[0]->truthy()) throw EvalUnsupported("tojson(ensure_ascii=True)");
  JsonOptions o;
  if (b[1] && !b[1]->is_none()) {
    if (b[1]->is_string()) {
      o.indent_text = b[1]->as_string();
      if (o.indent_text.empty()) o.indent = 0;
    } else {
      o.indent = static_cast<int>(std::clamp<int64_t>(need_int(*b[1], "tojson indent"), 0, 64));
    }
  }
  if (b[2] && !b[2]->is_none()) {
    const auto items = iterate(*b[2]);
    if (items.size() != 2) throw EvalError("tojson separators must be a pair of strings");
    o.item_separator = need_string(items[0], "tojson separator");
    o.key_separator = need_string(items[1], "tojson separator");
    // An empty separator is a legal choice; mark it so the default does not replace it.
    if (o.item_separator.empty() || o.key_separator.empty()) {
      throw EvalUnsupported("tojson with an empty separator");
    }
  }
  o.sort_keys = b[3] && b[3]->truthy();
  std::string json = to_json(v, o);
  check_string_size(json.size());
  return Value::string(std::move(json));
}

Value filter_int(const Value& v, const Args& a) {
  const Bound b = bind("int", a, {"default", "base"});
  Value fallback = b[0] ? *b[0] : Value::integer(0);
  if (b[1] && need_int(*b[1], "int base") != 10) throw EvalUnsupported("int(base=...) other than 10");
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    const double d = v.as_double();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (!v.is_string()) return fallback;
  std::string s = pystr::strip(v.as_string(), std::nullopt, true, true);
  std::string digits;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) digits += s[i++];
  bool ok = i < s.size();
  for (; i < s.size(); ++i) {
    if (s[i] >= '0' && s[i] <= '9') {
      digits += s[i];
    } else if (!(s[i] == '_' && i > 0 && i + 1 < s.size() && s[i - 1] >= '0' && s[i + 1] >= '0' && s[i + 1] <= '9')) {
      ok = false;
      break;
    }
  }
  if (ok) {
    errno = 0;
    const long long n = std::strtoll(digits.c_str(), nullptr, 10);
    if (errno != ERANGE) return Value::integer(n);
    return fallback;
  }
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (!s.empty() && end == s.c_str() + s.size() && std::isfinite(d) && std::fabs(d) < 9.2e18) {
    return Value::integer(static_cast<int64_t>(d));
  }
  return fallback;
}

Value filter_float(const Value& v, const Args& a) {
  const Bound b = bind("float", a, {"default"});
  Value fallback = b[0] ? *b[0] : Value::number(0.0);
  if (v.is_number()) return Value::number(v.as_double());
  if (!v.is_string()) return fallback;
  const std::string s = pystr::strip(v.as_string(), std::nullopt, true, true);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) return fallback;
  return Value::number(d);
}

Value filter_sort(const Value& v, const Args& a) {
  const Bound b = bind("sort", a, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = b[0] && b[0]->truthy();
  const bool case_sensitive = b[1] && b[1]->truthy();
  const std::optional<std::string> attribute = optional_string(b[2], "sort attribute");
  std::vector<Value> items = iterate(v);
  auto key = [&](const Value& item) {
    Value k = attribute ? lookup_path(item, *attribute) : item;
    if (!case_sensitive && k.is_string()) k = Value::string(pystr::lower(k.as_string()));
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? compare(key(y), key(x)) < 0 : compare(key(x), key(y)) < 0;
  });
  return make_list(std::move(items));
}

Value filter_dictsort(const Value& v, const Args& a) {
  const Bound b = bind("dictsort", a, {"case_sensitive", "by", "reverse"});
  const bool case_sensitive = b[0] && b[0]->truthy();
  const std::string by = b[1] ? need_string(*b[1], "dictsort by") : "key";
  if (by != "key" && by != "value") throw EvalError("dictsort: you can only sort by either \"key\" or \"value\"");
  const bool reverse = b[2] && b[2]->truthy();
  if (v.is_undefined()) throw EvalError(undefined_message(v));
  if (!v.is_dict()) throw EvalError("dictsort needs a mapping, not '" + v.type_name() + "'");
  std::vector<Value> items;
  for (const auto& [k, item] : v.dict_data().items) items.push_back(Value::list({key_value(k), item}, true));
  auto key = [&](const Value& pair) {
    Value k = pair.list_data().items[by == "key" ? 0 : 1];
    if (!case_sensitive && k.is_string()) k = Value::string(pystr::lower(k.as_string()));
    return k;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? compare(key(y), key(x)) < 0 : compare(key(x), key(y)) < 0;
  });
  return make_list(std::move(items));
}

Value filter_indent(const Value& v, const Args& a) {
  const Bound b = bind("indent", a, {"width", "first", "blank"});
  const std::string& s = need_string(v, "indent's value");
  std::string indention(4, ' ');
  if (b[0]) {
    indention =
        b[0]->is_string()
            ? b[0]->as_string()
            : std::string(static_cast<size_t>(std::clamp<int64_t>(need_int(*b[0], "indent width"), 0, 4096)), ' ');
  }
  const bool first = b[1] && b[1]->truthy();
  const bool blank = b[2] && b[2]->truthy();
  // Jinja2 appends a newline before splitting, so a trailing newline is dropped.
  const std::vector<std::string> lines = pystr::splitlines(s + "\n");
  std::string rv;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      rv += '\n';
      if (blank || !lines[i].empty()) rv += indention;
    }
    rv += lines[i];
    check_string_size(rv.size());
  }
  return Value::string(first ? indention + rv : rv);
}

Value filter_sum(const Value& v, const Args& a) {
  const Bound b = bind("sum", a, {"attribute", "start"});
  Value total = b[1] ? *b[1] : Value::integer(0);
  for (const Value& item : iterate(v)) {
    const Value x = b[0] && !b[0]->is_none() ? lookup_attribute(item, *b[0]) : item;
    if (!total.is_number() || !x.is_number()) {
      throw EvalError("sum: unsupported operand types '" + total.type_name() + "' and '" + x.type_name() + "'");
    }
    total = total.is_float() || x.is_float() ? Value::number(total.as_double() + x.as_double())
                                             : Value::integer(total.as_int() + x.as_int());
  }
  return total;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

struct FilterEntry {
  const char* name;
  FilterFn fn;
};

const FilterEntry kFilters[] = {
    {"trim",
     [](const Value& v, const Args& a) {
       const Bound b = bind("trim", a, {"chars"});
       return Value::string(pystr::strip(to_output(v), optional_string(b[0], "trim chars"), true, true));
     }},
    {"length",
     [](const Value& v, const Args& a) {
       bind("length", a, {});
       if (v.is_string()) return Value::integer(pystr::length(v.as_string()));
       if (v.is_list()) return Value::integer(static_cast<int64_t>(v.list_data().items.size()));
       if (v.is_dict()) return Value::integer(static_cast<int64_t>(v.dict_data().items.size()));
       if (v.is_undefined()) return Value::integer(0);
       throw EvalError("object of type '" + v.type_name() + "' has no len()");
     }},
    {"count", nullptr},  // alias of length, filled in by lookup
    {"upper", [](const Value& v, const Args&) { return Value::string(pystr::upper(to_output(v))); }},
    {"lower", [](const Value& v, const Args&) { return Value::string(pystr::lower(to_output(v))); }},
    {"capitalize", [](const Value& v, const Args&) { return Value::string(pystr::capitalize(to_output(v))); }},
    {"title", [](const Value& v, const Args&) { return Value::string(pystr::jinja_title(to_output(v))); }},
    {"tojson", filter_tojson},
    {"items",
     [](const Value& v, const Args&) {
       if (v.is_undefined()) return Value::list();
       if (!v.is_dict())
         throw EvalError("items filter: can only get item pairs from a mapping, not '" + v.type_name() + "'");
       std::vector<Value> out;
       for (const auto& [k, item] : v.dict_data().items) out.push_back(Value::list({key_value(k), item}, true));
       return make_list(std::move(out));
     }},
    {"default",
     [](const Value& v, const Args& a) {
       const Bound b = bind("default", a, {"default_value", "boolean"});
       const bool boolean = b[1] && b[1]->truthy();
       if (v.is_undefined() || (boolean && !v.truthy())) return b[0] ? *b[0] : Value::string("");
       return v;
     }},
    {"d", nullptr},  // alias of default
    {"first",
     [](const Value& v, const Args&) {
       if (v.is_list()) {
         const auto& items = v.list_data().items;
         return items.empty() ? Value::undefined("no first item, the sequence was empty") : items.front();
       }
       const auto items = iterate(v);
       return items.empty() ? Value::undefined("no first item, the sequence was empty") : items.front();
     }},
    {"last",
     [](const Value& v, const Args&) {
       const auto items = iterate(v);
       return items.empty() ? Value::undefined("no last item, the sequence was empty") : items.back();
     }},
    {"join",
     [](const Value& v, const Args& a) {
       const Bound b = bind("join", a, {"d", "attribute"});
       const std::string sep = b[0] ? to_output(*b[0]) : std::string();
       const std::optional<Value> attribute = b[1] && !b[1]->is_none() ? b[1] : std::nullopt;
       return Value::string(join_strings(v, sep, attribute));
     }},
    {"replace",
     [](const Value& v, const Args& a) {
       const Bound b = bind("replace", a, {"old", "new", "count"});
       const std::string& old = need_string(required(b, 0, "replace", "old"), "replace old");
       const std::string& with = need_string(required(b, 1, "replace", "new"), "replace new");
       const int64_t count = b[2] && !b[2]->is_none() ? need_int(*b[2], "replace count") : -1;
       std::string out = pystr::replace(to_output(v), old, with, count);
       check_string_size(out.size());
       return Value::string(std::move(out));
     }},
    {"string", [](const Value& v, const Args&) { return Value::string(to_output(v)); }},
    {"int", filter_int},
    {"float", filter_float},
    {"list", [](const Value& v, const Args&) { return make_list(iterate(v)); }},
    {"abs",
     [](const Value& v, const Args&) {
       if (v.is_float()) return Value::number(std::fabs(v.as_double()));
       const int64_t i = need_int(v, "abs");
       return Value::integer(i < 0 ? -i : i);
     }},
    {"selectattr", [](const Value& v, const Args& a) { return select_or_reject(v, a, true, true, "selectattr"); }},
    {"rejectattr", [](const Value& v, const Args& a) { return select_or_reject(v, a, true, false, "rejectattr"); }},
    {"select", [](const Value& v, const Args& a) { return select_or_reject(v, a, false, true, "select"); }},
    {"reject", [](const Value& v, const Args& a) { return select_or_reject(v, a, false, false, "reject"); }},
    {"map", filter_map},
    {"reverse",
     [](const Value& v, const Args&) {
       if (v.is_string()) {
         auto cps = pystr::code_points(v.as_string());
         std::string out;
         for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
         return Value::string(std::move(out));
       }
       auto items = iterate(v);
       std::reverse(items.begin(), items.end());
       return make_list(std::move(items));
     }},
    {"sort", filter_sort},
    {"dictsort", filter_dictsort},
    {"indent", filter_indent},
    {"sum", filter_sum},
    {"unique",
     [](const Value& v, const Args&) {
       std::vector<Value> out;
       for (const Value& item : iterate(v)) {
         if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return equals(o, item); })) out.push_back(item);
       }
       return make_list(std::move(out));
     }},
    {"safe", [](const Value& v, const Args&) { return v; }},
    {"escape", [](const Value& v, const Args&) { return Value::string(html_escape(to_output(v))); }},
    {"e", [](const Value& v, const Args&) { return Value::string(html_escape(to_output(v))); }},
};

const FilterEntry* find_filter(std::string_view name) {
  if (name == "count") name = "length";
  if (name == "d") name = "default";
  for (const auto& f : kFilters) {
    if (name == f.name && f.fn) return &f;
  }
  return nullptr;
}

// ---------------------------------------------------------------- methods

Value bound(const Value& object, const std::string& name, Value (*fn)(const Value&, const Args&)) {
  return Value::function(object.type_name() + "." + name, [object, fn](const Args& a) { return fn(object, a); });
}

bool starts_or_ends(const Value& self, const Args& a, bool ends, const char* fn) {
  const Bound b = bind(fn, a, {"prefix", "start", "end"});
  if (b[1] || b[2]) throw EvalUnsupported(std::string("str.") + fn + " with start/end");
  const std::string& s = self.as_string();
  auto check = [&](const Value& p) {
    const std::string& x = need_string(p, std::string(fn) + " argument");
    if (x.size() > s.size()) return false;
    return ends ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  const Value& prefix = required(b, 0, fn, "prefix");
  if (prefix.is_list() && prefix.list_data().tuple) {
    return std::any_of(prefix.list_data().items.begin(), prefix.list_data().items.end(), check);
  }
  return check(prefix);
}

Value string_method(const Value& self, const std::string& name) {
  if (name == "startswith") {
    return bound(self, name, [](const Value& s, const Args& a) {
      return Value::boolean(starts_or_ends(s, a, false, "startswith"));
    });
  }
  if (name == "endswith") {
    return bound(self, name,
                 [](const Value& s, const Args& a) { return Value::boolean(starts_or_ends(s, a, true, "endswith")); });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    if (name == "strip") {
      return bound(self, name, [](const Value& s, const Args& a) {
        return Value::string(
            pystr::strip(s.as_string(), optional_string(bind("strip", a, {"chars"})[0], "chars"), true, true));
      });
    }
    if (name == "lstrip") {
      return bound(self, name, [](const Value& s, const Args& a) {
        return Value::string(
            pystr::strip(s.as_string(), optional_string(bind("lstrip", a, {"chars"})[0], "chars"), true, false));
      });
    }
    return bound(self, name, [](const Value& s, const Args& a) {
      return Value::string(
          pystr::strip(s.as_string(), optional_string(bind("rstrip", a, {"chars"})[0], "chars"), false, true));
    });
  }
  if (name == "split") {
    return bound(self, name, [](const Value& s, const Args& a) {
      const Bound b = bind("split", a, {"sep", "maxsplit"});
      const auto sep = optional_string(b[0], "split separator");
      if (sep && sep->empty()) throw EvalError("empty separator");
      const int64_t maxsplit = b[1] ? need_int(*b[1], "maxsplit") : -1;
      return string_list(pystr::split(s.as_string(), sep, maxsplit));
    });
  }
  if (name == "upper")
    return bound(self, name, [](const Value& s, const Args&) { return Value::string(pystr::upper(s.as_string())); });
  if (name == "lower")
    return bound(self, name, [](const Value& s, const Args&) { return Value::string(pystr::lower(s.as_string())); });
  if (name == "title")
    return bound(self, name, [](const Value& s, const Args&) { return Value::string(pystr::title(s.as_string())); });
  if (name == "capitalize") {
    return bound(self, name,
                 [](const Value& s, const Args&) { return Value::string(pystr::capitalize(s.as_string())); });
  }
  if (name == "replace") {
    return bound(self, name, [](const Value& s, const Args& a) {
      const Bound b = bind("replace", a, {"old", "new", "count"});
      const int64_t count = b[2] ? need_int(*b[2], "replace count") : -1;
      std::string out = pystr::replace(s.as_string(), need_string(required(b, 0, "replace", "old"), "old"),
                                       need_string(required(b, 1, "replace", "new"), "new"), count);
      check_string_size(out.size());
      return Value::string(std::move(out));
    });
  }
  if (name == "join") {
    return bound(self, name, [](const Value& s, const Args& a) {
      const Bound b = bind("join", a, {"iterable"});
      std::string out;
      bool first = true;
      for (const Value& item : iterate(required(b, 0, "join", "iterable"))) {
        if (!first) out += s.as_string();
        first = false;
        out += need_string(item, "join item");
        check_string_size(out.size());
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "find" || name == "count") {
    if (name == "count") {
      return bound(self, name, [](const Value& s, const Args& a) {
        const std::string sub = need_string(required(bind("count", a, {"sub"}), 0, "count", "sub"), "count argument");
        if (sub.empty()) return Value::integer(pystr::length(s.as_string()) + 1);
        int64_t n = 0;
        for (size_t at = s.as_string().find(sub); at != std::string::npos;
             at = s.as_string().find(sub, at + sub.size()))
          ++n;
        return Value::integer(n);
      });
    }
    return bound(self, name, [](const Value& s, const Args& a) {
      const std::string sub = need_string(required(bind("find", a, {"sub"}), 0, "find", "sub"), "find argument");
      const size_t at = s.as_string().find(sub);
      return Value::integer(at == std::string::npos ? -1
                                                    : pystr::length(std::string_view(s.as_string()).substr(0, at)));
    });
  }
  // Python str methods this interpreter lacks: calling one is unsupported, not undefined.
  static const char* kMissing[] = {"format",  "format_map", "rsplit",       "splitlines",   "partition", "rpartition",
                                   "isdigit", "isalpha",    "isalnum",      "isspace",      "islower",   "isupper",
                                   "istitle", "isnumeric",  "isdecimal",    "zfill",        "center",    "ljust",
                                   "rjust",   "casefold",   "swapcase",     "expandtabs",   "encode",    "index",
                                   "rfind",   "rindex",     "removeprefix", "removesuffix", "translate"};
  for (const char* m : kMissing) {
    if (name == m) {
      return Value::function("str." + name,
                             [name](const Args&) -> Value { throw EvalUnsupported("str." + name + "()"); });
    }
  }
  return Value::undefined("'str object' has no attribute '" + name + "'");
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "items") {
    return bound(self, name, [](const Value& d, const Args& a) {
      bind("items", a, {});
      std::vector<Value> out;
      for (const auto& [k, v] : d.dict_data().items) out.push_back(Value::list({key_value(k), v}, true));
      return make_list(std::move(out));
    });
  }
  if (name == "keys") {
    return bound(self, name, [](const Value& d, const Args& a) {
      bind("keys", a, {});
      std::vector<Value> out;
      for (const auto& kv : d.dict_data().items) out.push_back(key_value(kv.first));
      return make_list(std::move(out));
    });
  }
  if (name == "values") {
    return bound(self, name, [](const Value& d, const Args& a) {
      bind("values", a, {});
      std::vector<Value> out;
      for (const auto& kv : d.dict_data().items) out.push_back(kv.second);
      return make_list(std::move(out));
    });
  }
  if (name == "get") {
    return bound(self, name, [](const Value& d, const Args& a) {
      const Bound b = bind("get", a, {"key", "default"});
      const Value& key = required(b, 0, "get", "key");
      const Value* found = d.dict_data().find_value(key);
      return found ? *found : (b[1] ? *b[1] : Value::none());
    });
  }
  return Value::undefined();
}

}  // namespace

bool has_filter(std::string_view name) { return find_filter(name) != nullptr; }
bool has_test(std::string_view name) { return find_test(name) != nullptr; }

Value apply_filter(std::string_view name, const Value& value, const Args& args) {
  const FilterEntry* f = find_filter(name);
  if (!f) throw EvalUnsupported("the filter '" + std::string(name) + "'");
  return f->fn(value, args);
}

bool apply_test(std::string_view name, const Value& value, const Args& args) {
  const TestEntry* t = find_test(name);
  if (!t) throw EvalUnsupported("the test '" + std::string(name) + "'");
  return t->fn(value, args);
}

Value method(const Value& object, const std::string& name) {
  if (object.is_string()) return string_method(object, name);
  if (object.is_dict()) return dict_method(object, name);
  if (object.is_list()) {
    static const char* kMutating[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"};
    for (const char* m : kMutating) {
      if (name == m) {
        return Value::function("list." + name, [name](const Args&) -> Value {
          throw EvalError("list." + name + "() is not allowed: templates run in an immutable sandbox");
        });
      }
    }
  }
  return Value::undefined();
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.list_data().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict_data().items) keys.push_back(key_value(kv.first));
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (auto& c : pystr::code_points(v.as_string())) chars.push_back(Value::string(std::move(c)));
      return chars;
    }
    default:
      throw EvalError("'" + v.type_name() + "' object is not iterable");
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string()) {
        throw EvalError("'in <string>' requires string as left operand, not " + item.type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      return std::any_of(container.list_data().items.begin(), container.list_data().items.end(),
                         [&](const Value& x) { return equals(x, item); });
    case Value::Kind::kDict:
      return container.dict_data().find_value(item) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      throw EvalError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Value get_attr(const Value& object, const std::string& name) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_namespace()) {
    const Value* v = object.dict_data().find(name);
    return v ? *v : Value::undefined("'Namespace object' has no attribute '" + name + "'");
  }
  Value m = method(object, name);
  if (!m.is_undefined()) return m;
  if (object.is_dict()) {
    const Value* v = object.dict_data().find(name);
    return v ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
  }
  return Value::undefined("'" + object.type_name() + " object' has no attribute '" + name + "'");
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  if (object.is_dict() || object.is_namespace()) {
    const Value* found = object.dict_data().find_value(key);
    if (found) return *found;
    if (key.is_string()) {
      if (object.is_dict()) {
        Value m = method(object, key.as_string());
        if (!m.is_undefined()) return m;
      }
    }
    return Value::undefined("'dict object' has no attribute " + repr(key));
  }
  if ((object.is_list() || object.is_string()) && (key.is_int() || key.is_bool())) {
    const int64_t n =
        object.is_list() ? static_cast<int64_t>(object.list_data().items.size()) : pystr::length(object.as_string());
    int64_t i = key.as_int();
    if (i < 0) i += n;
    if (i < 0 || i >= n) {
      return Value::undefined("'" + object.type_name() + " object' has no element " + std::to_string(key.as_int()));
    }
    if (object.is_list()) return object.list_data().items[static_cast<size_t>(i)];
    return Value::string(pystr::code_points(object.as_string())[static_cast<size_t>(i)]);
  }
  if (key.is_string()) return get_attr(object, key.as_string());
  return Value::undefined("'" + object.type_name() + " object' has no element " + repr(key));
}

Value slice(const Value& v, const std::optional<int64_t>& start, const std::optional<int64_t>& stop,
            const std::optional<int64_t>& step) {
  if (v.is_undefined()) fail_undefined(v);
  const int64_t s = step.value_or(1);
  if (s == 0) throw EvalError("slice step cannot be zero");
  std::vector<std::string> chars;
  const bool is_string = v.is_string();
  if (is_string) {
    chars = pystr::code_points(v.as_string());
  } else if (!v.is_list()) {
    throw EvalError("'" + v.type_name() + "' object is not subscriptable");
  }
  const int64_t n = is_string ? static_cast<int64_t>(chars.size()) : static_cast<int64_t>(v.list_data().items.size());
  // slice.indices(n), as Python computes it.
  auto clamp_index = [&](std::optional<int64_t> x, int64_t fallback) {
    if (!x) return fallback;
    int64_t i = *x;
    if (i < 0) {
      i += n;
      if (i < 0) i = s < 0 ? -1 : 0;
    } else if (i >= n) {
      i = s < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t from = clamp_index(start, s < 0 ? n - 1 : 0);
  const int64_t to = clamp_index(stop, s < 0 ? -1 : n);
  std::vector<Value> items;
  std::string text;
  for (int64_t i = from; s > 0 ? i < to : i > to; i += s) {
    if (is_string) {
      text += chars[static_cast<size_t>(i)];
    } else {
      items.push_back(v.list_data().items[static_cast<size_t>(i)]);
    }
  }
  if (is_string) return Value::string(std::move(text));
  return Value::list(std::move(items), v.list_data().tuple);
}

std::vector<std::pair<std::string, Value>> make_globals(std::function<std::time_t()> now) {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("range", Value::function("range", [](const Args& a) {
                   if (!a.named.empty() || a.positional.empty() || a.positional.size() > 3) {
                     throw EvalError("range() takes 1 to 3 positional arguments");
                   }
                   int64_t start = 0, stop = 0, step = 1;
                   if (a.positional.size() == 1) {
                     stop = need_int(a.positional[0], "range argument");
                   } else {
                     start = need_int(a.positional[0], "range argument");
                     stop = need_int(a.positional[1], "range argument");
                     if (a.positional.size() == 3) step = need_int(a.positional[2], "range argument");
                   }
                   if (step == 0) throw EvalError("range() arg 3 must not be zero");
                   const double count = step > 0 ? std::ceil((static_cast<double>(stop) - start) / step)
                                                 : std::ceil((static_cast<double>(start) - stop) / -step);
                   if (count > static_cast<double>(kMaxListItems)) check_list_size(static_cast<size_t>(count));
                   std::vector<Value> items;
                   for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
                     items.push_back(Value::integer(i));
                   return Value::list(std::move(items));
                 }));
  auto keyword_object = [](const Args& a, const char* fn) {
    std::vector<std::pair<DictKey, Value>> items;
    if (a.positional.size() > 1) throw EvalError(std::string(fn) + "() takes at most one positional argument");
    if (a.positional.size() == 1) {
      const Value& init = a.positional[0];
      if (!init.is_dict()) throw EvalUnsupported(std::string(fn) + "() from a '" + init.type_name() + "'");
      items = init.dict_data().items;
    }
    DictData d{std::move(items)};
    for (const auto& [k, v] : a.named) d.set(k, v);
    return std::move(d.items);
  };
  g.emplace_back(
      "namespace", Value::function("namespace", [keyword_object](const Args& a) {
        auto items = keyword_object(a, "namespace");
        for (const auto& kv : items) {
          if (!kv.first.text.empty() && kv.first.text[0] == '_') {
            throw EvalError("namespace attributes may not start with an underscore: '" + kv.first.text + "'");
          }
        }
        return Value::namespace_object(std::move(items));
      }));
  g.emplace_back("dict", Value::function("dict", [keyword_object](const Args& a) {
                   return Value::dict(keyword_object(a, "dict"));
                 }));
  g.emplace_back("raise_exception", Value::function("raise_exception", [](const Args& a) -> Value {
                   const Bound b = bind("raise_exception", a, {"message"});
                   throw TemplateRaised(b[0] ? to_output(*b[0]) : std::string());
                 }));
  g.emplace_back("strftime_now", Value::function("strftime_now", [now = std::move(now)](const Args& a) {
                   const Bound b = bind("strftime_now", a, {"format"});
                   const std::string& format = need_string(required(b, 0, "strftime_now", "format"), "strftime format");
                   const std::time_t t = now ? now() : std::time(nullptr);
                   std::tm tm{};
                   localtime_r(&t, &tm);
                   std::string out(256 + format.size() * 16, '\0');
                   const size_t n = format.empty() ? 0 : std::strftime(out.data(), out.size(), format.c_str(), &tm);
                   if (n == 0 && !format.empty()) throw EvalError("strftime_now: the format gives no output");
                   out.resize(n);
                   return Value::string(std::move(out));
                 }));
  return g;
}

}  // namespace lm::jinja
