#pragma once
// Byte-level BPE (GGUF tokenizer.ggml.model = "gpt2"; GPT-2, SmolLM2, Llama 3, Qwen2): every
// byte of the text is mapped to a printable code point (GPT-2's bytes_to_unicode), the
// pre-tokenizer cuts the text into words, and each word is merged pairwise by merge rank
// (lowest rank first, leftmost on ties). Special tokens written in the text are matched
// whole before any of this.
#include <array>
#include <string>
#include <unordered_map>

#include "lm/tokenizer/tokenizer.h"
#include "lm/tokenizer/tokenizer_pretokenizer.h"
#include "lm/tokenizer/tokenizer_special.h"
#include "lm/tokenizer/tokenizer_string_map.h"
#include "lm/tokenizer/tokenizer_vocab.h"

namespace lm {

class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  // Throws base::Unsupported for an unknown vocab.pre, base::FormatError for a malformed
  // merge line.
  explicit ByteLevelBpeTokenizer(TokenizerVocab vocab);

  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override;
  std::string decode_token(int32_t previous, int32_t token) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.tokens.size()); }
  std::optional<int32_t> bos_id() const override { return vocab_.bos_id; }
  std::optional<int32_t> eos_id() const override { return vocab_.eos_id; }
  std::vector<int32_t> stop_ids() const override { return stop_ids_; }
  std::string token_text(int32_t token) const override;
  std::string apply_chat_template(const std::vector<ChatMessage>& messages) const override;
  std::string apply_custom_chat_template(const std::vector<ChatMessage>& messages,
                                         const std::string& jinja) const override;

 private:
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  // A merge, looked up by the ids of its two sides (both are vocabulary tokens in any
  // well-formed vocabulary): its rank and the id of the merged token (-1 when the vocabulary
  // lacks the merged piece; the symbol then falls back to bytes at the end).
  struct Merge {
    int rank;
    int32_t merged;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  TokenizerVocab vocab_;
  PreTokenizer pre_tokenizer_;
  SpecialTokenMatcher specials_;
  StringMap<int32_t> token_to_id_;
  std::unordered_map<uint64_t, Merge> merges_;  // pair_key(left id, right id) -> merge
  std::array<std::string, 256> byte_to_text_;   // byte -> its code point, UTF-8 encoded
  std::array<int32_t, 256> byte_token_{};       // byte -> id of its one-character token, or -1
  std::vector<int32_t> stop_ids_;
};

}  // namespace lm
