#pragma once
// SentencePiece-style tokenizer (GGUF tokenizer.ggml.model = "llama", llama2.c tokenizer
// files): spaces become U+2581 "▁", a dummy-prefix space starts the text, adjacent pieces are
// merged greedily by the best vocabulary score (llama2.c run.c's encode and llama.cpp's SPM
// tokenizer give the same result), and characters missing from the vocabulary fall back to
// their UTF-8 bytes as <0xNN> tokens.
#include <array>
#include <string>

#include "lm/tokenizer/tokenizer.h"
#include "lm/tokenizer/tokenizer_special.h"
#include "lm/tokenizer/tokenizer_piece_index.h"
#include "lm/tokenizer/tokenizer_string_map.h"
#include "lm/tokenizer/tokenizer_vocab.h"

namespace lm {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(TokenizerVocab vocab);

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
  // Appends the pieces of one stretch of raw text (already with "▁" for spaces).
  void encode_fragment(const std::string& text, std::vector<int32_t>& out) const;
  // Best-score merging over one run of text: the algorithm itself.
  void encode_run(std::string_view text, std::vector<int32_t>& out) const;
  int32_t find(std::string_view piece) const;  // -1 when absent

  TokenizerVocab vocab_;
  PieceIndex piece_to_id_;                  // over vocab_.tokens
  std::array<int32_t, 256> byte_tokens_{};  // <0xNN> ids, -1 when the vocabulary lacks one
  SpecialTokenMatcher specials_;
  // True when "▁" occurs in pieces only as a leading run (SentencePiece's split_by_whitespace,
  // the usual case): then no merge can join a non-space character to a following "▁", the text
  // can be cut there into words merged independently — with the same result — and repeated
  // words are merged once.
  bool spaces_bound_pieces_ = false;
  std::vector<int32_t> stop_ids_;
};

}  // namespace lm
