#pragma once
// One GGUF metadata value: a scalar of one of the twelve GGUF value types, a string, or an
// array (of scalars, strings or — rarely — arrays). Numbers keep their declared type so that
// a reader can tell a u32 token id from an f32 epsilon, but the accessors convert between
// integer widths freely (GGUF writers are not consistent about u32 vs i32 vs u64).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lm::gguf {

enum class ValueType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

std::string_view value_type_name(ValueType type);
bool is_integer_type(ValueType type);
bool is_float_type(ValueType type);

struct Value {
  ValueType type = ValueType::U8;
  ValueType array_type = ValueType::U8;  // element type when type == ARRAY

  // Scalars: integers (and bool) in `integer` (u64 values above INT64_MAX keep their bit
  // pattern), floats in `number`, strings in `text`.
  int64_t integer = 0;
  double number = 0.0;
  std::string text;

  // Arrays: exactly one of these is filled, by element type.
  std::vector<int64_t> integers;     // integer and bool elements
  std::vector<double> numbers;       // f32/f64 elements
  std::vector<std::string> strings;  // string elements
  std::vector<Value> arrays;         // nested arrays

  bool is_array() const { return type == ValueType::ARRAY; }
  std::size_t array_size() const;

  // Converting accessors; they throw base::FormatError naming `key` on a type mismatch.
  int64_t as_int(std::string_view key) const;
  double as_float(std::string_view key) const;  // accepts integers too
  bool as_bool(std::string_view key) const;
  const std::string& as_string(std::string_view key) const;
};

}  // namespace lm::gguf
