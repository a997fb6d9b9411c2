#pragma once
// GGML tensor element types as numbered in GGUF files (ggml.h's enum ggml_type), with the
// block geometry each one has on disk. Only the formats this host computes with are marked
// supported; the others are named so that errors can say what a file contains.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lm {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
};

struct GgmlTypeInfo {
  std::string_view name;      // "Q4_K", or "" for numbers GGML never assigned
  int64_t block_size = 0;     // elements per block (1 for plain types)
  std::size_t type_size = 0;  // bytes per block; 0 when the geometry is unknown here
  bool supported = false;     // this host can dequantize and multiply it
};

// Geometry and name of a type number; unknown numbers get an empty name and zero sizes.
GgmlTypeInfo ggml_type_info(uint32_t type);
inline GgmlTypeInfo ggml_type_info(GgmlType type) { return ggml_type_info(static_cast<uint32_t>(type)); }
// "Q4_K", or "type 123" for a number GGML never assigned.
std::string ggml_type_name(GgmlType type);
bool ggml_type_supported(GgmlType type);
// Bytes of a row of `n` elements. Throws base::FormatError when n is not a multiple of the
// block size, base::Unsupported when the type's geometry is unknown.
std::size_t ggml_row_bytes(GgmlType type, int64_t n);

}  // namespace lm
