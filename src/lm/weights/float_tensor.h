#pragma once
// Small float tensors of a GGUF file (norm weights, biases, conv taps) read into f32, the one
// reader every architecture loader uses.
#include <string>
#include <vector>

#include "lm/gguf/gguf_file.h"

namespace lm {

// The tensor `name` as f32, row-major as stored. base::Unsupported (naming the file, the tensor
// and its type) unless it is F32, F16 or BF16; a missing tensor throws as GgufFile::tensor does.
std::vector<float> read_float_tensor(const gguf::GgufFile& file, const std::string& name);

}  // namespace lm
