#include "lm/tokenizer/tokenizer_spm.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "base/error.h"
#include "lm/tokenizer/chat_template.h"

namespace lm {

namespace {

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581, SentencePiece's space

std::string escape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 4);
  for (char c : text) {
    if (c == ' ') {
      out += kSpaceMarker;
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text.substr(i, kSpaceMarker.size()) == kSpaceMarker) {
      out += ' ';
      i += kSpaceMarker.size();
    } else {
      out += text[i++];
    }
  }
  return out;
}

// "<0x41>" -> 0x41; -1 for anything else.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9')
      value |= c - '0';
    else if (c >= 'A' && c <= 'F')
      value |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f')
      value |= c - 'a' + 10;
    else
      return -1;
  }
  return value;
}

// A character's byte length as its lead byte announces it (unchecked, as llama.cpp reads it).
size_t utf8_lead_length(unsigned char lead) { return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4; }

// A piece of the text being merged: a byte range, linked to its live neighbours.
struct Symbol {
  size_t begin = 0;
  size_t size = 0;
  int prev = -1;
  int next = -1;
};

// A candidate merge of two adjacent symbols. The queue pops the best score first and, among
// equal scores, the leftmost pair — the pair llama2.c's linear scan would pick.
struct Bigram {
  float score;
  int left;
  size_t size;  // combined byte size when pushed; a mismatch later means the pair is stale
};
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer(TokenizerVocab vocab) : vocab_(std::move(vocab)), specials_(vocab_) {
  validate_vocab(vocab_);
  if (vocab_.scores.empty()) vocab_.scores.assign(vocab_.tokens.size(), 0.0f);
  piece_to_id_ = PieceIndex(vocab_.tokens);  // the first id wins for a duplicated piece
  byte_tokens_.fill(-1);
  for (int32_t id = 0; id < static_cast<int32_t>(vocab_.tokens.size()); ++id) {
    const std::string& piece = vocab_.tokens[static_cast<size_t>(id)];
    const int byte = parse_byte_token(piece);
    const TokenType type = token_type_of(vocab_, id);
    if (byte >= 0 && (type == TokenType::kByte || vocab_.token_types.empty()) && byte_tokens_[byte] < 0) {
      byte_tokens_[static_cast<size_t>(byte)] = id;
    }
  }
  stop_ids_ = end_of_turn_ids(vocab_);
  spaces_bound_pieces_ = true;
  for (const std::string& piece : vocab_.tokens) {
    size_t lead = 0;
    while (piece.compare(lead, kSpaceMarker.size(), kSpaceMarker) == 0) lead += kSpaceMarker.size();
    if (piece.find(kSpaceMarker, lead) != std::string::npos) {
      spaces_bound_pieces_ = false;
      break;
    }
  }
}

int32_t SentencePieceTokenizer::find(std::string_view piece) const { return piece_to_id_.find(vocab_.tokens, piece); }

void SentencePieceTokenizer::encode_fragment(const std::string& text, std::vector<int32_t>& out) const {
  if (!spaces_bound_pieces_) {
    encode_run(text, out);
    return;
  }
  StringMap<std::vector<int32_t>> word_cache;
  const std::string_view all = text;
  size_t begin = 0;
  auto flush = [&](size_t end) {
    if (end == begin) return;
    const std::string_view word = all.substr(begin, end - begin);
    auto [it, inserted] = word_cache.try_emplace(std::string(word));
    if (inserted) encode_run(word, it->second);
    out.insert(out.end(), it->second.begin(), it->second.end());
    begin = end;
  };
  // Walk the characters as encode_run will cut them and cut before each "▁" that follows a
  // character other than "▁".
  bool previous_is_space = true;
  for (size_t pos = 0; pos < all.size();) {
    const bool is_space = all.compare(pos, kSpaceMarker.size(), kSpaceMarker) == 0;
    if (is_space && !previous_is_space) flush(pos);
    previous_is_space = is_space;
    pos += std::min(utf8_lead_length(static_cast<unsigned char>(all[pos])), all.size() - pos);
  }
  flush(all.size());
}

void SentencePieceTokenizer::encode_run(std::string_view text, std::vector<int32_t>& out) const {
  // Start from one symbol per UTF-8 character. Its length is read off the lead byte alone, as
  // llama.cpp does, so malformed input is cut the same way (a symbol that is not a piece then
  // falls back to its bytes).
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = utf8_lead_length(static_cast<unsigned char>(text[pos]));
    Symbol s;
    s.begin = pos;
    s.size = std::min(length, text.size() - pos);
    s.prev = static_cast<int>(symbols.size()) - 1;
    s.next = static_cast<int>(symbols.size()) + 1;
    symbols.push_back(s);
    pos += s.size;
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;

  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue;
  auto try_pair = [&](int left) {
    if (left < 0 || symbols[static_cast<size_t>(left)].next < 0) return;
    const Symbol& a = symbols[static_cast<size_t>(left)];
    const Symbol& b = symbols[static_cast<size_t>(a.next)];
    const int32_t id = find(text.substr(a.begin, a.size + b.size));
    if (id < 0) return;
    queue.push({vocab_.scores[static_cast<size_t>(id)], left, a.size + b.size});
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
    const int32_t id = find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    // Only single characters can be missing (merges only make known pieces): byte fallback.
    for (unsigned char byte : piece) {
      const int32_t byte_id = byte_tokens_[byte];
      if (byte_id >= 0) {
        out.push_back(byte_id);
      } else if (vocab_.unk_id) {
        out.push_back(*vocab_.unk_id);
      } else {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02X", byte);
        throw base::InvalidArgument(std::string("text contains byte ") + hex +
                                    ", which this vocabulary has neither a piece nor a byte token for");
      }
    }
  }
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int32_t> out;
  if (add_bos && vocab_.add_bos && vocab_.bos_id) out.push_back(*vocab_.bos_id);
  // As llama.cpp: the dummy prefix goes before the first stretch of text and before each one
  // that follows a special token (llama2.c has no specials, so only the first gets it).
  bool after_special = true;
  for (const TextFragment& fragment : specials_.split(text)) {
    if (fragment.is_token()) {
      out.push_back(fragment.token);
      after_special = true;
      continue;
    }
    std::string raw;
    if (vocab_.add_space_prefix && after_special) raw = " ";
    raw += fragment.text;
    encode_fragment(escape_spaces(raw), out);
    after_special = false;
  }
  return out;
}

std::string SentencePieceTokenizer::token_text(int32_t token) const {
  check_token_id(vocab_, token);
  return vocab_.tokens[static_cast<size_t>(token)];
}

std::string SentencePieceTokenizer::decode_token(int32_t previous, int32_t token) const {
  check_token_id(vocab_, token);
  const std::string& piece = vocab_.tokens[static_cast<size_t>(token)];
  const TokenType type = token_type_of(vocab_, token);
  if (type == TokenType::kControl || type == TokenType::kUserDefined || type == TokenType::kUnknown) {
    return piece;
  }
  if (type == TokenType::kByte || vocab_.token_types.empty()) {
    const int byte = parse_byte_token(piece);
    if (byte >= 0) return std::string(1, static_cast<char>(byte));
  }
  std::string text = unescape_spaces(piece);
  // The encoder put a dummy-prefix space after BOS and after each special token; take it off
  // again (llama2.c run.c strips it after BOS).
  const TokenType previous_type =
      previous >= 0 && previous < vocab_size() ? token_type_of(vocab_, previous) : TokenType::kNormal;
  const bool previous_is_special = previous_type == TokenType::kControl || previous_type == TokenType::kUserDefined ||
                                   previous_type == TokenType::kUnknown;
  if (vocab_.add_space_prefix && previous_is_special && !text.empty() && text[0] == ' ') text.erase(0, 1);
  return text;
}

std::string SentencePieceTokenizer::apply_chat_template(const std::vector<ChatMessage>& messages) const {
  return apply_vocab_chat_template(vocab_, messages);
}

std::string SentencePieceTokenizer::apply_custom_chat_template(const std::vector<ChatMessage>& messages,
                                                               const std::string& jinja) const {
  return apply_vocab_chat_template(vocab_, messages, &jinja);
}

}  // namespace lm
