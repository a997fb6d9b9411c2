#pragma once
// The vocabulary a tokenizer is built from, independent of the file it came from: the GGUF
// loader fills it from `tokenizer.ggml.*` metadata, the llama2.c loader from a tokenizer file.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lm/tokenizer/tokenizer.h"

namespace lm {

// GGUF token types (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

struct TokenizerVocab {
  std::string model = "llama";  // "llama": SentencePiece-style; "gpt2": byte-level BPE
  std::string pre = "default";  // gpt2 pre-tokenizer name from tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<float> scores;           // SentencePiece piece scores (may be empty for gpt2)
  std::vector<TokenType> token_types;  // may be empty (all normal)
  std::vector<std::string> merges;     // gpt2: "left right" in rank order
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id, eot_id;
  bool add_bos = true;           // tokenizer.ggml.add_bos_token
  bool add_space_prefix = true;  // tokenizer.ggml.add_space_prefix (SentencePiece dummy prefix)
  std::string chat_template;     // tokenizer.chat_template (Jinja text), may be empty
};

// Builds the tokenizer the vocabulary describes; throws base::Unsupported for an unknown
// model or pre-tokenizer, base::FormatError for an inconsistent vocabulary.
std::shared_ptr<Tokenizer> make_tokenizer(TokenizerVocab vocab);

// Reads a llama2.c tokenizer file (int32 max_token_length, then per token: f32 score,
// int32 length, bytes) for a model of `vocab_size` tokens.
TokenizerVocab read_llama2c_tokenizer(const std::string& path, int32_t vocab_size);

}  // namespace lm
