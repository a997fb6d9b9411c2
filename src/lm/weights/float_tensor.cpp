#include "lm/weights/float_tensor.h"

#include "base/error.h"
#include "lm/weights/dequantize.h"

namespace lm {

std::vector<float> read_float_tensor(const gguf::GgufFile& file, const std::string& name) {
  const gguf::TensorInfo& t = file.tensor(name);
  if (t.type != GgmlType::F32 && t.type != GgmlType::F16 && t.type != GgmlType::BF16) {
    throw base::Unsupported("GGUF file '" + file.path() + "': tensor '" + name + "' has type " +
                            ggml_type_name(t.type) + " (expected F32, F16 or BF16)");
  }
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  dequantize_row(t.type, file.tensor_data(t), v.data(), t.numel());
  return v;
}

}  // namespace lm
