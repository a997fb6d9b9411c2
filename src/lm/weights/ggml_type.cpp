#include "lm/weights/ggml_type.h"

#include "base/error.h"
#include "lm/weights/block_formats.h"

namespace lm {

GgmlTypeInfo ggml_type_info(uint32_t type) {
  // Sizes follow ggml's type_traits table; the block structs of the supported formats
  // static_assert the same numbers in block_formats.h.
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32:
      return {"F32", 1, 4, true};
    case GgmlType::F16:
      return {"F16", 1, 2, true};
    case GgmlType::BF16:
      return {"BF16", 1, 2, true};
    case GgmlType::Q4_0:
      return {"Q4_0", kQK4_0, sizeof(BlockQ4_0), true};
    case GgmlType::Q4_1:
      return {"Q4_1", kQK4_1, sizeof(BlockQ4_1), true};
    case GgmlType::Q8_0:
      return {"Q8_0", kQK8_0, sizeof(BlockQ8_0), true};
    case GgmlType::Q4_K:
      return {"Q4_K", kQK_K, sizeof(BlockQ4_K), true};
    case GgmlType::Q6_K:
      return {"Q6_K", kQK_K, sizeof(BlockQ6_K), true};
    case GgmlType::Q5_0:
      return {"Q5_0", kQK5_0, sizeof(BlockQ5_0), true};
    case GgmlType::Q5_1:
      return {"Q5_1", kQK5_1, sizeof(BlockQ5_1), true};
    case GgmlType::Q8_1:
      return {"Q8_1", 32, 36, false};
    case GgmlType::Q2_K:
      return {"Q2_K", kQK_K, sizeof(BlockQ2_K), true};
    case GgmlType::Q3_K:
      return {"Q3_K", kQK_K, sizeof(BlockQ3_K), true};
    case GgmlType::Q5_K:
      return {"Q5_K", kQK_K, sizeof(BlockQ5_K), true};
    case GgmlType::Q8_K:
      return {"Q8_K", 256, 292, false};
    case GgmlType::IQ2_XXS:
      return {"IQ2_XXS", 256, 66, false};
    case GgmlType::IQ2_XS:
      return {"IQ2_XS", 256, 74, false};
    case GgmlType::IQ3_XXS:
      return {"IQ3_XXS", 256, 98, false};
    case GgmlType::IQ1_S:
      return {"IQ1_S", 256, 50, false};
    case GgmlType::IQ4_NL:
      return {"IQ4_NL", kQK4_NL, sizeof(BlockIQ4_NL), true};
    case GgmlType::IQ3_S:
      return {"IQ3_S", 256, 110, false};
    case GgmlType::IQ2_S:
      return {"IQ2_S", 256, 82, false};
    case GgmlType::IQ4_XS:
      return {"IQ4_XS", kQK_K, sizeof(BlockIQ4_XS), true};
    case GgmlType::I8:
      return {"I8", 1, 1, false};
    case GgmlType::I16:
      return {"I16", 1, 2, false};
    case GgmlType::I32:
      return {"I32", 1, 4, false};
    case GgmlType::I64:
      return {"I64", 1, 8, false};
    case GgmlType::F64:
      return {"F64", 1, 8, false};
    case GgmlType::IQ1_M:
      return {"IQ1_M", 256, 56, false};
    case GgmlType::TQ1_0:
      return {"TQ1_0", 256, 54, false};
    case GgmlType::TQ2_0:
      return {"TQ2_0", 256, 66, false};
  }
  return {};
}

std::string ggml_type_name(GgmlType type) {
  const GgmlTypeInfo info = ggml_type_info(type);
  if (!info.name.empty()) return std::string(info.name);
  return "type " + std::to_string(static_cast<uint32_t>(type));
}

bool ggml_type_supported(GgmlType type) { return ggml_type_info(type).supported; }

std::size_t ggml_row_bytes(GgmlType type, int64_t n) {
  const GgmlTypeInfo info = ggml_type_info(type);
  if (info.type_size == 0) {
    throw base::Unsupported("tensor type " + ggml_type_name(type) + " has no known block layout");
  }
  if (n < 0 || n % info.block_size != 0) {
    throw base::FormatError("a row of " + std::to_string(n) + " elements is not a whole number of " +
                            ggml_type_name(type) + " blocks of " + std::to_string(info.block_size));
  }
  return static_cast<std::size_t>(n / info.block_size) * info.type_size;
}

}  // namespace lm
