#pragma once
// The pre-tokenizer of byte-level BPE: splits text into "words" that BPE then encodes one by
// one (a merge never crosses a word boundary). GGUF names it in tokenizer.ggml.pre; each name
// stands for the regex list llama.cpp applies for it. The regexes are matched by hand here
// (no std::regex, which knows no Unicode classes), with Unicode letter/number/whitespace
// classes from lm/unicode. Like llama.cpp, a list of regexes is applied in sequence: each one
// splits the pieces the previous one produced, keeping both its matches and the gaps between
// them as pieces, and a regex never looks past the end of the piece it is splitting.
#include <string>
#include <string_view>
#include <vector>

namespace lm {

class PreTokenizer {
 public:
  // Throws base::Unsupported naming `name` when it is not one of supported_names().
  explicit PreTokenizer(std::string_view name);

  // The words of `text`, in order; concatenated they give back `text` exactly.
  std::vector<std::string_view> split(std::string_view text) const;

  const std::string& name() const { return name_; }
  static std::vector<std::string> supported_names();

  // One regex of a pre-tokenizer's list.
  enum class Stage {
    kEachNumber,         // \p{N}
    kNumberRuns,         // \p{N}+
    kAsciiDigitTriples,  // [0-9][0-9][0-9]
    kPunctuationRuns,    // [\p{P}\$\+<=>\^~\|]+
    kGpt2,               // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
    kLlama3,             // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
                         //   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
    kQwen2,              // the Llama 3 regex with \p{N} (one digit) in place of \p{N}{1,3}
  };

 private:
  std::string name_;
  std::vector<Stage> stages_;
};

}  // namespace lm
