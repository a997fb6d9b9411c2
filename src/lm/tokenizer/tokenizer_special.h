#pragma once
// Special tokens written literally in the text (<|im_start|>, <s>, …) are matched as whole
// tokens before the text reaches the subword model, as llama.cpp does with parse_special:
// the chat template writes them as text and the model must see their single ids.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lm/tokenizer/tokenizer_vocab.h"

namespace lm {

// One piece of the input: either raw text for the subword model, or a special token id.
struct TextFragment {
  std::string_view text;  // empty for a token fragment
  int32_t token = -1;     // >= 0: a special token
  bool is_token() const { return token >= 0; }
};

class SpecialTokenMatcher {
 public:
  // Collects the tokens of type control, user-defined and unknown. When the vocabulary has no
  // types, the ids it names (bos/eos/eot/unk/pad) count as control tokens.
  explicit SpecialTokenMatcher(const TokenizerVocab& vocab);

  // Splits text at every occurrence of a special token. Longer tokens win over the shorter
  // ones they contain (they are searched first), and among equal lengths the leftmost match.
  std::vector<TextFragment> split(std::string_view text) const;

 private:
  struct Special {
    std::string text;
    int32_t id;
  };
  std::vector<Special> specials_;  // longest first
};

// Throws base::InvalidArgument naming the id when it is outside the vocabulary.
void check_token_id(const TokenizerVocab& vocab, int32_t id);

// Whether a token is control-like: decoded as its literal text, never byte-mapped.
TokenType token_type_of(const TokenizerVocab& vocab, int32_t id);

// The ids that end a generated turn: EOS, EOT, and tokens whose text is a well-known
// end-of-turn marker (<|im_end|>, <|eot_id|>, <|endoftext|>, <|end|>, <end_of_turn>, …).
std::vector<int32_t> end_of_turn_ids(const TokenizerVocab& vocab);

// Checks the vocabulary's sizes and ids; throws base::FormatError naming what is wrong.
void validate_vocab(const TokenizerVocab& vocab);

}  // namespace lm
