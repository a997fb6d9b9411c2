#pragma once
// The evaluation text: read byte for byte (the reference perplexities in
// ../shared/data/README.md depend on every byte, mojibake included) and tokenized once.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lm/tokenizer/tokenizer.h"

namespace veloxquant::eval {

// Whole file as bytes. Throws base::FormatError naming the path when it is missing or
// unreadable, base::InvalidArgument when it is empty.
std::string read_text_file(const std::string& path);

struct TokenizedText {
  std::vector<int32_t> tokens;
  // The BOS id when the tokenizer put one in front (llama.cpp's add_bos); llama chunking
  // writes it over the first token of every chunk only in that case, as llama-perplexity does.
  std::optional<int32_t> bos;
};

// Encodes with BOS when the vocabulary adds one. Throws base::InvalidArgument when the text
// is empty or yields no token besides BOS.
TokenizedText tokenize_text(const lm::Tokenizer& tokenizer, std::string_view text);

// Keeps the first max_tokens tokens when max_tokens > 0 (--max-tokens); negative is an error.
void truncate_tokens(TokenizedText& text, int64_t max_tokens);

}  // namespace veloxquant::eval
