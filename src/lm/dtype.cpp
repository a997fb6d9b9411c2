#include "lm/dtype.h"

#include "base/error.h"

namespace lm {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::U8:
      return 1;
    case DType::F32:
    case DType::I32:
    case DType::U32:
      return 4;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::U8:
      return "u8";
    case DType::I32:
      return "i32";
    case DType::U32:
      return "u32";
  }
  return "?";
}

DType parse_float_dtype(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::F32;
  if (name == "f16" || name == "float16") return DType::F16;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  throw base::InvalidArgument("unknown float dtype '" + std::string(name) + "' (expected f32, f16 or bf16)");
}

}  // namespace lm
