#include "lm/tokenizer/tokenizer_bpe.h"

#include <queue>

#include "base/error.h"
#include "lm/tokenizer/chat_template.h"
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
  int32_t token;  // the token this symbol spells, -1 if none
  size_t begin;   // byte range in the (unmapped) word
  size_t size;
  int prev;
  int next;
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
  auto id_of = [&](std::string_view piece) -> int32_t {
    auto it = token_to_id_.find(piece);
    return it == token_to_id_.end() ? -1 : it->second;
  };
  merges_.reserve(vocab_.merges.size());
  for (size_t r = 0; r < vocab_.merges.size(); ++r) {
    const std::string& merge = vocab_.merges[r];
    const size_t space = merge.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == merge.size() ||
        merge.find(' ', space + 1) != std::string::npos) {
      throw base::FormatError("tokenizer merge " + std::to_string(r) + " is '" + merge +
                              "'; expected two pieces separated by one space");
    }
    const std::string_view left = std::string_view(merge).substr(0, space);
    const std::string_view right = std::string_view(merge).substr(space + 1);
    const int32_t left_id = id_of(left), right_id = id_of(right);
    // A side that is no token can never be formed (symbols start as byte tokens and only
    // merge into tokens), so such a merge can never apply.
    if (left_id < 0 || right_id < 0) continue;
    merges_.emplace(pair_key(left_id, right_id),
                    Merge{static_cast<int>(r), id_of(merge.substr(0, space) + merge.substr(space + 1))});
  }
  const auto code_points = byte_to_code_point();
  for (size_t b = 0; b < 256; ++b) {
    unicode::append_utf8(byte_to_text_[b], code_points[b]);
    byte_token_[b] = id_of(byte_to_text_[b]);
  }
  stop_ids_ = end_of_turn_ids(vocab_);
}

void ByteLevelBpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  // One symbol per byte to start with, each the token of its byte character.
  std::vector<Symbol> symbols(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    symbols[i] = {byte_token_[static_cast<unsigned char>(word[i])], i, 1, static_cast<int>(i) - 1,
                  static_cast<int>(i) + 1};
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_pair = [&](int left) {
    if (left < 0 || symbols[static_cast<size_t>(left)].next < 0) return;
    const Symbol& a = symbols[static_cast<size_t>(left)];
    const Symbol& b = symbols[static_cast<size_t>(a.next)];
    if (a.token < 0 || b.token < 0) return;
    auto it = merges_.find(pair_key(a.token, b.token));
    if (it != merges_.end()) queue.push({it->second.rank, left, a.size + b.size});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) try_pair(i);

  while (!queue.empty()) {
    const Bigram top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(top.left)];
    // Stale: one side was merged into something else since this pair was queued.
    if (left.size == 0 || left.next < 0) continue;
    Symbol& right = symbols[static_cast<size_t>(left.next)];
    if (left.size + right.size != top.size) continue;
    left.token = merges_.at(pair_key(left.token, right.token)).merged;
    left.size += right.size;
    right.size = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.left;
    try_pair(left.prev);
    try_pair(top.left);
  }

  for (int i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const Symbol& s = symbols[static_cast<size_t>(i)];
    if (s.token >= 0) {
      out.push_back(s.token);
      continue;
    }
    // A piece the vocabulary cannot spell (a merge result it lacks, or a byte without a
    // token): one token per byte, or the unknown token.
    for (size_t b = s.begin; b < s.begin + s.size; ++b) {
      const auto byte = static_cast<unsigned char>(word[b]);
      if (byte_token_[byte] >= 0) {
        out.push_back(byte_token_[byte]);
      } else if (vocab_.unk_id) {
        out.push_back(*vocab_.unk_id);
      } else {
        throw base::FormatError("byte-level BPE vocabulary has no token for the byte piece '" + byte_to_text_[byte] +
                                "' and no unknown token");
      }
    }
  }
}

std::vector<int32_t> ByteLevelBpeTokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  StringMap<std::vector<int32_t>> word_cache;
  if (add_bos && vocab_.add_bos && vocab_.bos_id) out.push_back(*vocab_.bos_id);
  for (const TextFragment& fragment : specials_.split(text)) {
    if (fragment.is_token()) {
      out.push_back(fragment.token);
      continue;
    }
    // As llama.cpp: each byte that is not part of valid UTF-8 becomes U+FFFD (the vocabulary
    // need not spell such bytes; SmolLM2's has no token for 0xFF).
    const std::string text_utf8 = replace_invalid_utf8(fragment.text);
    for (std::string_view word : pre_tokenizer_.split(text_utf8)) {
      // Words repeat a lot in running text; remember each one's tokens for this call.
      auto [it, inserted] = word_cache.try_emplace(std::string(word));
      if (inserted) encode_word(word, it->second);
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
  }
  return out;
}

std::string ByteLevelBpeTokenizer::token_text(int32_t token) const {
  check_token_id(vocab_, token);
  return vocab_.tokens[static_cast<size_t>(token)];
}

std::string ByteLevelBpeTokenizer::decode_token(int32_t, int32_t token) const {
  check_token_id(vocab_, token);
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
  return apply_vocab_chat_template(vocab_, messages);
}

std::string ByteLevelBpeTokenizer::apply_custom_chat_template(const std::vector<ChatMessage>& messages,
                                                              const std::string& jinja) const {
  return apply_vocab_chat_template(vocab_, messages, &jinja);
}

}  // namespace lm
