// read_llama2c_tokenizer: the tokenizer file llama2.c's tokenizer.py exports ("tok512.bin",
// "tokenizer.bin"): int32 max_token_length, then per token f32 score, int32 byte length and
// the bytes. The exporter wrote SentencePiece's "▁" as a plain space and BOS/EOS as
// "\n<s>\n" / "\n</s>\n"; we undo both so that the vocabulary reads like a GGUF "llama" one.
#include <cstring>
#include <fstream>

#include "base/error.h"
#include "lm/tokenizer/tokenizer_vocab.h"

namespace lm {

namespace {

constexpr int32_t kMaxPieceBytes = 1 << 16;  // far above any real piece; guards a corrupt length

bool is_byte_piece(const std::string& piece) {
  auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F') || (c >= 'a' && c <= 'f'); };
  return piece.size() == 6 && piece.compare(0, 3, "<0x") == 0 && hex(piece[3]) && hex(piece[4]) && piece[5] == '>';
}

std::string strip_newlines(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && s[b] == '\n') ++b;
  while (e > b && s[e - 1] == '\n') --e;
  return s.substr(b, e - b);
}

}  // namespace

TokenizerVocab read_llama2c_tokenizer(const std::string& path, int32_t vocab_size) {
  if (vocab_size <= 0) {
    throw base::InvalidArgument("llama2.c tokenizer: vocab_size must be positive, got " + std::to_string(vocab_size));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw base::FormatError("cannot open llama2.c tokenizer file '" + path + "'");
  auto read_exact = [&](void* dst, size_t n, const std::string& what) {
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    if (static_cast<size_t>(in.gcount()) != n) {
      throw base::FormatError("llama2.c tokenizer '" + path + "' is truncated while reading " + what + " (expected " +
                              std::to_string(vocab_size) + " tokens)");
    }
  };
  int32_t max_token_length = 0;
  read_exact(&max_token_length, sizeof max_token_length, "the header");
  if (max_token_length <= 0 || max_token_length > kMaxPieceBytes) {
    throw base::FormatError("llama2.c tokenizer '" + path + "' has max_token_length " +
                            std::to_string(max_token_length) + "; not a llama2.c tokenizer file?");
  }

  TokenizerVocab vocab;
  vocab.model = "llama";
  vocab.tokens.reserve(static_cast<size_t>(vocab_size));
  vocab.scores.reserve(static_cast<size_t>(vocab_size));
  for (int32_t id = 0; id < vocab_size; ++id) {
    const std::string what = "token " + std::to_string(id);
    float score = 0;
    int32_t length = 0;
    read_exact(&score, sizeof score, what);
    read_exact(&length, sizeof length, what);
    if (length < 0 || length > kMaxPieceBytes) {
      throw base::FormatError("llama2.c tokenizer '" + path + "': token " + std::to_string(id) + " has length " +
                              std::to_string(length));
    }
    std::string piece(static_cast<size_t>(length), '\0');
    if (length > 0) read_exact(piece.data(), piece.size(), what);
    std::string escaped;
    for (char c : piece) {
      if (c == ' ') {
        escaped += "\xE2\x96\x81";
      } else {
        escaped += c;
      }
    }
    vocab.tokens.push_back(std::move(escaped));
    vocab.scores.push_back(score);
  }

  // llama2.c hard-codes <unk> = 0, BOS = 1, EOS = 2 (SentencePiece's defaults).
  vocab.token_types.assign(vocab.tokens.size(), TokenType::kNormal);
  for (int32_t id = 0; id < vocab_size; ++id) {
    std::string& piece = vocab.tokens[static_cast<size_t>(id)];
    if (id == 1 || id == 2) {
      piece = strip_newlines(piece);
      vocab.token_types[static_cast<size_t>(id)] = TokenType::kControl;
    } else if (id == 0 && piece == "<unk>") {
      vocab.token_types[0] = TokenType::kUnknown;
    } else if (is_byte_piece(piece)) {
      vocab.token_types[static_cast<size_t>(id)] = TokenType::kByte;
    }
  }
  if (vocab_size > 0 && vocab.tokens[0] == "<unk>") vocab.unk_id = 0;
  if (vocab_size > 1) vocab.bos_id = 1;
  if (vocab_size > 2) vocab.eos_id = 2;
  vocab.add_bos = true;
  vocab.add_space_prefix = true;
  return vocab;
}

}  // namespace lm
