#pragma once
// lm::load — open a model file (GGUF v2/v3 or a llama2.c checkpoint, told apart by content,
// not by extension) and return the model with its tokenizer.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "lm/dtype.h"
#include "lm/cache/kv_cache_type.h"
#include "lm/model.h"
#include "lm/tokenizer/tokenizer.h"
#include "lm/tokenizer/tokenizer_vocab.h"

namespace lm {

namespace gguf {
class GgufFile;
}

struct LoadOptions {
  // A separate tokenizer: a llama2.c tokenizer file, or a GGUF whose tokenizer.ggml.* metadata
  // is used. Required for llama2.c checkpoints unless tokenizer.bin / tok<vocab>.bin sits next
  // to the model.
  std::optional<std::string> tokenizer_path;
  // Element type of the native KV cache: f16 / bf16 / f32 rows, or llama.cpp's q8_0 / q5_0 /
  // q4_0 blocks (lm::BlockKVCache).
  KVCacheType kv_type = KVCacheType::F16;
  int threads = 0;  // 0 = all cores
  // Decode matmuls on 16-bit-rounded activations (lm::LlamaRuntimeOptions::i16_activations).
  bool i16_activations = true;
  std::optional<int64_t> context_length;  // overrides the file's context length
};

struct LoadedModel {
  std::shared_ptr<Model> model;
  std::shared_ptr<Tokenizer> tokenizer;
};

// Throws base::FormatError (missing, truncated or corrupt file; missing tensors; wrong
// shapes), base::Unsupported (architecture, tensor type, file version) or
// base::InvalidArgument (bad options), each naming the file and the problem.
LoadedModel load(const std::string& path, const LoadOptions& options = {});

// The tokenizer vocabulary stored in a GGUF file's tokenizer.ggml.* metadata.
TokenizerVocab read_gguf_vocab(const gguf::GgufFile& file);

}  // namespace lm
