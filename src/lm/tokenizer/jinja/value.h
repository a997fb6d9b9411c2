#pragma once
// The values a chat template computes with, modelled on the Python objects Jinja2 hands a
// template: None, bool, int, float, str, list/tuple, dict, Jinja's Undefined and namespace
// objects, and callables (globals such as range(), bound methods such as str.startswith).
// Lists, dicts and namespaces are shared by reference, as in Python, so that
// `{% set ns.x = ... %}` inside a loop is seen after it.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lm::jinja {

class Value;

// Containers record how deeply they nest (1 + their deepest item) so that a template cannot
// build a chain deep enough to overflow the stack when printed, compared or destroyed.
inline constexpr int kMaxValueDepth = 256;

struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // printed as (a, b); never equal to a list, as in Python
  int depth = 1;
};

// A dict key: a str, or an int (templates use ints as lookup tables, e.g. Seed-OSS's
// thinking budgets). Other Python key types are refused where a dict is built.
struct DictKey {
  DictKey(std::string s) : text(std::move(s)) {}  // NOLINT: a str key converts implicitly
  DictKey(const char* s) : text(s) {}             // NOLINT
  static DictKey integer(int64_t i);
  std::string text;  // the str, or the int in decimal (which is also how json.dumps writes it)
  bool is_int = false;
  int64_t int_value = 0;
};

// A dict keeps insertion order (Python 3.7+).
struct DictData {
  std::vector<std::pair<DictKey, Value>> items;
  int depth = 1;
  const Value* find(std::string_view key) const;  // a str key
  const Value* find_key(const DictKey& key) const;
  const Value* find_value(const Value& key) const;  // a str, int or bool key; null for other types
  void set(DictKey key, Value value);
};

// Arguments of a call: positional, then keyword.
struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> named;
};

using Function = std::function<Value(const Args&)>;

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // Undefined
  static Value undefined(std::string name = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  static Value list(std::vector<Value> items = {}, bool tuple = false);
  static Value dict(std::vector<std::pair<DictKey, Value>> items = {});
  static Value namespace_object(std::vector<std::pair<DictKey, Value>> items = {});
  static Value function(std::string name, Function f);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }  // bool is an int in Python
  double as_double() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& as_string() const { return s_; }  // also the name of an Undefined
  ListData& list_data() const { return *list_; }
  DictData& dict_data() const { return *dict_; }  // dicts and namespaces
  const Function& as_function() const { return *fn_; }
  const std::string& function_name() const { return s_; }

  int depth() const;  // 0 for scalars
  // Sets an attribute of a namespace object (raising its recorded depth as needed).
  void set_attribute(const std::string& name, Value v) const;

  bool truthy() const;
  // Python's type name, for error messages: 'str', 'int', 'list', 'Undefined', ...
  std::string type_name() const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<Function> fn_;
};

// A dict key as the value a template sees (str or int).
Value key_value(const DictKey& key);

// str(value) as Jinja2 prints it: '' for Undefined, 'None', 'True', Python repr inside lists.
std::string to_output(const Value& v);
// repr(value): strings quoted as Python quotes them.
std::string repr(const Value& v);
// Python's repr of a float: shortest round-trip digits, '1.0', '1e+100', 'inf'.
std::string float_repr(double d);

// json.dumps(v, ensure_ascii=False, indent=..., separators=..., sort_keys=...), which is what
// transformers installs as the tojson filter. indent < 0 means None.
struct JsonOptions {
  int indent = -1;
  std::string indent_text;     // used when indent is given as a string
  std::string item_separator;  // empty: Python's default for the indent
  std::string key_separator;   // empty: ": "
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& options);

// Python ==, and <, <=, >, >= (throws EvalError where Python raises TypeError).
bool equals(const Value& a, const Value& b);
int compare(const Value& a, const Value& b);  // -1, 0, 1

}  // namespace lm::jinja
