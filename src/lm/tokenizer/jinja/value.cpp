#include "lm/tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "lm/tokenizer/jinja/error.h"

namespace lm::jinja {

DictKey DictKey::integer(int64_t i) {
  DictKey k(std::to_string(i));
  k.is_int = true;
  k.int_value = i;
  return k;
}

Value key_value(const DictKey& key) { return key.is_int ? Value::integer(key.int_value) : Value::string(key.text); }

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (!k.is_int && k.text == key) return &v;
  }
  return nullptr;
}

const Value* DictData::find_key(const DictKey& key) const {
  for (const auto& [k, v] : items) {
    if (k.is_int == key.is_int && (k.is_int ? k.int_value == key.int_value : k.text == key.text)) return &v;
  }
  return nullptr;
}

const Value* DictData::find_value(const Value& key) const {
  if (key.is_string()) return find(key.as_string());
  if (key.is_int() || key.is_bool()) return find_key(DictKey::integer(key.as_int()));
  if (key.is_float() && key.as_double() == static_cast<double>(static_cast<int64_t>(key.as_double()))) {
    return find_key(DictKey::integer(static_cast<int64_t>(key.as_double())));  // 1.0 finds the key 1
  }
  return nullptr;
}

namespace {

int nested_depth(int deepest_item) {
  if (deepest_item + 1 > kMaxValueDepth) {
    throw EvalError("a value nested more than " + std::to_string(kMaxValueDepth) + " levels deep");
  }
  return deepest_item + 1;
}

// Guards the recursive walks (repr, ==, <, json) against cycles made through namespaces.
struct WalkGuard {
  explicit WalkGuard(int& depth) : d(depth) {
    if (++d > kMaxValueDepth + 8) {
      --d;
      throw EvalError("a value nested too deeply to print or compare (does a namespace contain itself?)");
    }
  }
  ~WalkGuard() { --d; }
  int& d;
};
thread_local int walk_depth = 0;

}  // namespace

void DictData::set(DictKey key, Value value) {
  for (auto& [k, v] : items) {
    if (k.is_int == key.is_int && (k.is_int ? k.int_value == key.int_value : k.text == key.text)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string name) {
  Value v;
  v.s_ = std::move(name);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.f_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::move(s);
  return v;
}

Value Value::list(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  int deepest = 0;
  for (const Value& item : items) deepest = std::max(deepest, item.depth());
  v.list_ = std::make_shared<ListData>(ListData{std::move(items), tuple, nested_depth(deepest)});
  return v;
}

Value Value::dict(std::vector<std::pair<DictKey, Value>> items) {
  Value v;
  v.kind_ = Kind::kDict;
  int deepest = 0;
  for (const auto& item : items) deepest = std::max(deepest, item.second.depth());
  v.dict_ = std::make_shared<DictData>(DictData{std::move(items), nested_depth(deepest)});
  return v;
}

Value Value::namespace_object(std::vector<std::pair<DictKey, Value>> items) {
  Value v = dict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::function(std::string name, Function f) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.s_ = std::move(name);
  v.fn_ = std::make_shared<Function>(std::move(f));
  return v;
}

int Value::depth() const {
  if (kind_ == Kind::kList) return list_->depth;
  if (kind_ == Kind::kDict || kind_ == Kind::kNamespace) return dict_->depth;
  return 0;
}

void Value::set_attribute(const std::string& name, Value v) const {
  dict_->depth = std::max(dict_->depth, nested_depth(v.depth()));
  dict_->set(name, std::move(v));
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !s_.empty();
    case Kind::kList:
      return !list_->items.empty();
    case Kind::kDict:
      return !dict_->items.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return list_->tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "?";
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then Python's layout: positional when -4 <= exponent < 16.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    const int point = exponent + 1;  // digits before the decimal point
    if (point <= 0) {
      out = "0." + std::string(static_cast<size_t>(-point), '0') + digits;
    } else if (point >= static_cast<int>(digits.size())) {
      out = digits + std::string(static_cast<size_t>(point) - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(point)) + "." + digits.substr(static_cast<size_t>(point));
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  }
  return negative ? "-" + out : out;
}

namespace {

std::string repr_string(const std::string& s) {
  // Python prefers single quotes, and switches to double quotes when the text has a single
  // quote and no double quote.
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == static_cast<unsigned char>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

std::string repr_items(const Value& v) {
  WalkGuard guard(walk_depth);
  std::string out;
  if (v.is_list()) {
    const ListData& l = v.list_data();
    out += l.tuple ? "(" : "[";
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += ", ";
      out += repr(l.items[i]);
    }
    if (l.tuple && l.items.size() == 1) out += ",";
    out += l.tuple ? ")" : "]";
    return out;
  }
  out += "{";
  bool first = true;
  for (const auto& [k, item] : v.dict_data().items) {
    if (!first) out += ", ";
    first = false;
    out += (k.is_int ? k.text : repr_string(k.text)) + ": " + repr(item);
  }
  out += "}";
  return out;
}

}  // namespace

std::string repr(const Value& v) {
  if (v.is_string()) return repr_string(v.as_string());
  if (v.is_undefined()) return "Undefined";
  return to_output(v);
}

std::string to_output(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.as_int());
    case Value::Kind::kFloat:
      return float_repr(v.as_double());
    case Value::Kind::kString:
      return v.as_string();
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return repr_items(v);
    case Value::Kind::kNamespace:
      return "<Namespace " + repr_items(Value::dict(v.dict_data().items)) + ">";
    case Value::Kind::kFunction:
      return "<function " + v.function_name() + ">";
  }
  return {};
}

namespace {

void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);  // ensure_ascii=False: UTF-8 passes through
        }
    }
  }
  out += '"';
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  WalkGuard guard(walk_depth);
  const bool pretty = o.indent >= 0 || !o.indent_text.empty();
  const std::string item_sep = !o.item_separator.empty() ? o.item_separator : (pretty ? "," : ", ");
  const std::string key_sep = !o.key_separator.empty() ? o.key_separator : ": ";
  auto newline = [&](int level) {
    if (!pretty) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += !o.indent_text.empty() ? o.indent_text : std::string(o.indent, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : float_repr(d);
      return;
    }
    case Value::Kind::kString:
      json_string(out, v.as_string());
      return;
    case Value::Kind::kList: {
      const auto& items = v.list_data().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_value(out, items[i], o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      auto items = v.dict_data().items;
      if (items.empty()) {
        out += "{}";
        return;
      }
      if (o.sort_keys) {
        const bool has_int = std::any_of(items.begin(), items.end(), [](const auto& kv) { return kv.first.is_int; });
        const bool has_str = std::any_of(items.begin(), items.end(), [](const auto& kv) { return !kv.first.is_int; });
        if (has_int && has_str)
          throw EvalError("tojson(sort_keys=true): '<' not supported between 'str' and 'int' keys");
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
          return a.first.is_int ? a.first.int_value < b.first.int_value : a.first.text < b.first.text;
        });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        newline(depth + 1);
        json_string(out, items[i].first.text);
        out += key_sep;
        json_value(out, items[i].second, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      throw EvalError("tojson: object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  json_value(out, v, options, 0);
  return out;
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  WalkGuard guard(walk_depth);
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const ListData& x = a.list_data();
      const ListData& y = b.list_data();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = a.dict_data();
      const DictData& y = b.dict_data();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.find_key(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.dict_data() == &b.dict_data();
    case Value::Kind::kFunction:
      return &a.as_function() == &b.as_function();
    default:
      return false;
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order, which is how Python compares str.
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.list_data().tuple == b.list_data().tuple) {
    WalkGuard guard(walk_depth);
    const auto& x = a.list_data().items;
    const auto& y = b.list_data().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined() || b.is_undefined()) {
    const std::string& message = (a.is_undefined() ? a : b).as_string();
    throw EvalError(message.empty() ? "a value is undefined" : message);
  }
  throw EvalError("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace lm::jinja
