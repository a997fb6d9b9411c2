#include "lm/gguf/gguf_value.h"

#include <string>

#include "base/error.h"

namespace lm::gguf {

std::string_view value_type_name(ValueType type) {
  switch (type) {
    case ValueType::U8:
      return "u8";
    case ValueType::I8:
      return "i8";
    case ValueType::U16:
      return "u16";
    case ValueType::I16:
      return "i16";
    case ValueType::U32:
      return "u32";
    case ValueType::I32:
      return "i32";
    case ValueType::F32:
      return "f32";
    case ValueType::BOOL:
      return "bool";
    case ValueType::STRING:
      return "string";
    case ValueType::ARRAY:
      return "array";
    case ValueType::U64:
      return "u64";
    case ValueType::I64:
      return "i64";
    case ValueType::F64:
      return "f64";
  }
  return "unknown";
}

bool is_integer_type(ValueType type) {
  switch (type) {
    case ValueType::U8:
    case ValueType::I8:
    case ValueType::U16:
    case ValueType::I16:
    case ValueType::U32:
    case ValueType::I32:
    case ValueType::U64:
    case ValueType::I64:
      return true;
    default:
      return false;
  }
}

bool is_float_type(ValueType type) { return type == ValueType::F32 || type == ValueType::F64; }

std::size_t Value::array_size() const {
  if (!is_array()) return 0;
  if (array_type == ValueType::STRING) return strings.size();
  if (array_type == ValueType::ARRAY) return arrays.size();
  if (is_float_type(array_type)) return numbers.size();
  return integers.size();
}

namespace {
[[noreturn]] void mismatch(std::string_view key, std::string_view wanted, ValueType got) {
  throw base::FormatError("GGUF metadata '" + std::string(key) + "' is " + std::string(value_type_name(got)) +
                          ", expected " + std::string(wanted));
}
}  // namespace

int64_t Value::as_int(std::string_view key) const {
  if (is_integer_type(type) || type == ValueType::BOOL) return integer;
  mismatch(key, "an integer", type);
}

double Value::as_float(std::string_view key) const {
  if (is_float_type(type)) return number;
  if (is_integer_type(type)) return static_cast<double>(integer);
  mismatch(key, "a number", type);
}

bool Value::as_bool(std::string_view key) const {
  if (type == ValueType::BOOL || is_integer_type(type)) return integer != 0;
  mismatch(key, "a bool", type);
}

const std::string& Value::as_string(std::string_view key) const {
  if (type == ValueType::STRING) return text;
  mismatch(key, "a string", type);
}

}  // namespace lm::gguf
