#include "lm/tokenizer_bpe.h"

#include <queue>

#include "base/error.h"
#include "lm/chat_template.h"
#include "lm/unicode/utf8.h"

namespace lm {

namespace {

// GPT-2's bytes_to_unicode: the printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand
// for themselves; the other 68 bytes are given code points 256, 257, … in byte order, so that
// every byte has a visible, non-space character and no token contains a raw space.
std::array<uint32_t, 256> byte_to_code_point() {
  std::array<uint32_t, 256> table{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    table[b] = printable ? b : next++;
  }
  return table;
}

struct Symbol {
  size_t begin = 0;  // byte range in the byte-mapped word
  size_t size = 0;
  int prev = -1;
  int next = -1;
};

struct Bigram {
  int rank;
  int left;
  size_t size;  // combined size when queued; differs later if the pair went stale
};
struct BigramOrder {  // lowest rank first, then leftmost
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

std::string replace_invalid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const auto& cp : unicode::decode_utf8(text)) {
    if (cp.value == unicode::kInvalidByte) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
    } else {
      out.append(text.substr(cp.offset, cp.length));
    }
  }
  return out;
}

}  // namespace

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(TokenizerVocab vocab)
    : vocab_(std::move(vocab)),
      pre_tokenizer_(vocab_.pre.empty() ? std::string_view("default") : std::string_view(vocab_.pre)),
      specials_(vocab_) {
  validate_vocab(vocab_);
  token_to_id_.reserve(vocab_.tokens.size());
  for (int32_t id = 0; id < static_cast<int32_t>(vocab_.tokens.size()); ++id) {
    token_to_id_.emplace(vocab_.tokens[static_cast<size_t>(id)], id);
  }
  merge_rank_.reserve(vocab_.merges.size());
  for (size_t r = 0; r < vocab_.merges.size(); ++r) {
    const std::string& merge = vocab_.merges[r];
    const size_t space = merge.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == merge.size() ||
        merge.find(' ', space + 1) != std::string::npos) {
      throw base::FormatError("tokenizer merge " + std::to_string(r) + " is '" + merge +
                              "'; expected two pieces separated by one space");
    }
    merge_rank_.emplace(merge, static_cast<int>(r));  // the first (best) rank wins
  }
  const auto code_points = byte_to_code_point();
  for (size_t b = 0; b < 256; ++b) unicode::append_utf8(byte_to_text_[b], code_points[b]);
  stop_ids_ = end_of_turn_ids(vocab_);
}

int ByteLevelBpeTokenizer::rank(std::string_view left, std::string_view right) const {
  std::string key;
  key.reserve(left.size() + right.size() + 1);
  key.append(left).append(" ").append(right);
  auto it = merge_rank_.find(std::string_view(key));
  return it == merge_rank_.end() ? -1 : it->second;
}

void ByteLevelBpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  // Map the word's bytes to their code points; one symbol per byte to start with.
  std::string mapped;
  mapped.reserve(word.size() * 2);
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (unsigned char byte : word) {
    Symbol s;
    s.begin = mapped.size();
    s.size = byte_to_text_[byte].size();
    s.prev = static_cast<int>(symbols.size()) - 1;
    s.next = static_cast<int>(symbols.size()) + 1;
    symbols.push_back(s);
    mapped += byte_to_text_[byte];
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  const std::string_view text = mapped;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_pair = [&](int left) {
    if (left < 0 || symbols[static_cast<size_t>(left)].next < 0) return;
    const Symbol& a = symbols[static_cast<size_t>(left)];
    const Symbol& b = symbols[static_cast<size_t>(a.next)];
    const int r = rank(text.substr(a.begin, a.size), text.substr(b.begin, b.size));
    if (r >= 0) queue.push({r, left, a.size + b.size});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) try_pair(i);

  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.left)];
    if (left.size == 0 || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    if (left.size + right.size != top.size) continue;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.left;
    try_pair(left.prev);
    try_pair(top.left);
  }

  for (int i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = text.substr(s.begin, s.size);
    if (auto it = token_to_id_.find(piece); it != token_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    // A merge result missing from the vocabulary: fall back to one token per byte.
    for (const auto& cp : unicode::decode_utf8(piece)) {
      const std::string_view one = piece.substr(cp.offset, cp.length);
      if (auto it = token_to_id_.find(one); it != token_to_id_.end()) {
        out.push_back(it->second);
      } else if (vocab_.unk_id) {
        out.push_back(*vocab_.unk_id);
      } else {
        throw base::FormatError("byte-level BPE vocabulary has no token for the byte piece '" + std::string(one) +
                                "' and no unknown token");
      }
    }
  }
}

std::vector<int32_t> ByteLevelBpeTokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && vocab_.add_bos && vocab_.bos_id) out.push_back(*vocab_.bos_id);
  for (const TextFragment& fragment : specials_.split(text)) {
    if (fragment.is_token()) {
      out.push_back(fragment.token);
      continue;
    }
    // As llama.cpp: each byte that is not part of valid UTF-8 becomes U+FFFD (the vocabulary
    // need not spell such bytes; SmolLM2's has no token for 0xFF).
    const std::string text_utf8 = replace_invalid_utf8(fragment.text);
    for (std::string_view word : pre_tokenizer_.split(text_utf8)) encode_word(word, out);
  }
  return out;
}

void ByteLevelBpeTokenizer::check_token(int32_t token) const {
  if (token < 0 || token >= vocab_size()) {
    throw base::InvalidArgument("token id " + std::to_string(token) + " is outside the vocabulary of " +
                                std::to_string(vocab_size()) + " tokens");
  }
}

std::string ByteLevelBpeTokenizer::token_text(int32_t token) const {
  check_token(token);
  return vocab_.tokens[static_cast<size_t>(token)];
}

std::string ByteLevelBpeTokenizer::decode_token(int32_t, int32_t token) const {
  check_token(token);
  const std::string& text = vocab_.tokens[static_cast<size_t>(token)];
  const TokenType type = token_type_of(vocab_, token);
  // Control and user-defined tokens are stored as their literal text, not byte-mapped.
  if (type == TokenType::kControl || type == TokenType::kUserDefined || type == TokenType::kUnknown) return text;
  static const std::array<int, 512> code_point_to_byte = [] {
    std::array<int, 512> table{};
    table.fill(-1);
    const auto forward = byte_to_code_point();
    for (int b = 0; b < 256; ++b) table[forward[static_cast<size_t>(b)]] = b;
    return table;
  }();
  std::string out;
  out.reserve(text.size());
  for (const auto& cp : unicode::decode_utf8(text)) {
    const int byte = cp.value < code_point_to_byte.size() ? code_point_to_byte[cp.value] : -1;
    if (byte >= 0) {
      out += static_cast<char>(byte);
    } else {
      out.append(text, cp.offset, cp.length);  // not a byte character: keep it as written
    }
  }
  return out;
}

std::string ByteLevelBpeTokenizer::apply_chat_template(const std::vector<ChatMessage>& messages) const {
  return render_chat_template(vocab_.chat_template, messages, /*add_generation_prompt=*/true);
}

}  // namespace lm
