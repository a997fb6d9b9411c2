#include "veloxquant/eval/text_source.h"

#include <fstream>
#include <iterator>

#include "base/error.h"

namespace veloxquant::eval {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw base::FormatError("cannot open text file '" + path + "'");
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw base::FormatError("error while reading text file '" + path + "'");
  if (bytes.empty()) throw base::InvalidArgument("text file '" + path + "' is empty");
  return bytes;
}

TokenizedText tokenize_text(const lm::Tokenizer& tokenizer, std::string_view text) {
  if (text.empty()) throw base::InvalidArgument("the evaluation text is empty");
  TokenizedText out;
  out.tokens = tokenizer.encode(text, /*add_bos=*/true);
  const auto bos = tokenizer.bos_id();
  if (bos && !out.tokens.empty() && out.tokens.front() == *bos) out.bos = bos;
  const std::size_t content = out.tokens.size() - (out.bos ? 1 : 0);
  if (content == 0) throw base::InvalidArgument("the evaluation text produced no tokens");
  return out;
}

void truncate_tokens(TokenizedText& text, int64_t max_tokens) {
  if (max_tokens < 0) {
    throw base::InvalidArgument("--max-tokens must be >= 0 (0 = whole text), got " + std::to_string(max_tokens));
  }
  if (max_tokens > 0 && static_cast<std::size_t>(max_tokens) < text.tokens.size()) {
    text.tokens.resize(static_cast<std::size_t>(max_tokens));
  }
}

}  // namespace veloxquant::eval
