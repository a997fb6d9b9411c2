#pragma once
// Jinja2's filters and tests, the Python str/dict methods templates call, and the globals
// transformers gives a chat template (range, namespace, dict, raise_exception,
// strftime_now), with Python's semantics for the values chat templates see. Builtins throw
// EvalError (as Python raises TypeError/ValueError) and EvalUnsupported (for arguments or
// methods this interpreter does not implement); the evaluator adds the position.
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lm/tokenizer/jinja/value.h"

namespace lm::jinja {

// Bounds on what one value may grow to, so that a hostile template cannot exhaust memory with
// 'x' * 10**9 or a list doubled in a loop; past them evaluation fails with FormatError.
inline constexpr size_t kMaxStringBytes = size_t{16} << 20;
inline constexpr size_t kMaxListItems = size_t{1} << 20;
void check_string_size(size_t bytes);
void check_list_size(size_t items);

bool has_filter(std::string_view name);
bool has_test(std::string_view name);
Value apply_filter(std::string_view name, const Value& value, const Args& args);
bool apply_test(std::string_view name, const Value& value, const Args& args);

// A method of a str/dict/list bound to its object (x.startswith, d.items, ...), or Undefined.
Value method(const Value& object, const std::string& name);

// The globals of transformers' chat template environment. `now` gives the time strftime_now
// formats (local time, as datetime.now()).
std::vector<std::pair<std::string, Value>> make_globals(std::function<std::time_t()> now);

// The message of an Undefined for an error ("'x' is undefined").
std::string undefined_message(const Value& v);

// Python slicing of a str (by code point) or list/tuple.
Value slice(const Value& v, const std::optional<int64_t>& start, const std::optional<int64_t>& stop,
            const std::optional<int64_t>& step);

}  // namespace lm::jinja

namespace lm::jinja {

// Jinja2's environment.getattr / getitem: a Python attribute (a method) or else the item;
// Undefined where neither exists; an error on an Undefined object.
Value get_attr(const Value& object, const std::string& name);
Value get_item(const Value& object, const Value& key);
// Python's `item in container`.
bool contains(const Value& container, const Value& item);
// Python iteration: a list's items, a dict's keys, a str's characters, nothing for Undefined.
std::vector<Value> iterate(const Value& v);

}  // namespace lm::jinja
