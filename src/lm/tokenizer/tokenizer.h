#pragma once
// lm::Tokenizer — text <-> token ids. Implementations: SentencePiece-style (GGUF "llama",
// llama2.c tokenizer files) and byte-level BPE (GGUF "gpt2").
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lm {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Encodes text. add_bos prepends the BOS token when the vocabulary has one. SentencePiece
  // tokenizers add the dummy-prefix space as llama2.c / llama.cpp do.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
  // Decodes one token as it should be printed after `previous` (SentencePiece strips the
  // leading space after BOS; byte tokens are raw bytes and may be partial UTF-8).
  virtual std::string decode_token(int32_t previous, int32_t token) const = 0;
  std::string decode(const std::vector<int32_t>& tokens) const;

  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // Tokens that end a turn besides EOS (e.g. <|im_end|>).
  virtual std::vector<int32_t> stop_ids() const { return {}; }
  virtual std::string token_text(int32_t token) const = 0;

  // Applies the model's chat template (from GGUF metadata) with the generation prompt added.
  // Throws base::Unsupported when the model has no template this build understands.
  virtual std::string apply_chat_template(const std::vector<ChatMessage>& messages) const;
};

}  // namespace lm
