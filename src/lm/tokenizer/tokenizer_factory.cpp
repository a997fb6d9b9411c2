// make_tokenizer: picks the implementation tokenizer.ggml.model names.
#include "base/error.h"
#include "lm/tokenizer/tokenizer_bpe.h"
#include "lm/tokenizer/tokenizer_spm.h"
#include "lm/tokenizer/tokenizer_vocab.h"

namespace lm {

std::shared_ptr<Tokenizer> make_tokenizer(TokenizerVocab vocab) {
  if (vocab.model == "llama") return std::make_shared<SentencePieceTokenizer>(std::move(vocab));
  if (vocab.model == "gpt2") return std::make_shared<ByteLevelBpeTokenizer>(std::move(vocab));
  throw base::Unsupported("tokenizer model '" + vocab.model +
                          "' (tokenizer.ggml.model) is not supported; supported: llama (SentencePiece), "
                          "gpt2 (byte-level BPE)");
}

}  // namespace lm
