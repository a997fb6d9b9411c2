#include "lm/tokenizer/tokenizer_special.h"

#include <algorithm>
#include <array>

#include "base/error.h"

namespace lm {

namespace {

bool is_named_id(const TokenizerVocab& vocab, int32_t id) {
  for (const auto& named : {vocab.bos_id, vocab.eos_id, vocab.eot_id, vocab.unk_id, vocab.pad_id}) {
    if (named && *named == id) return true;
  }
  return false;
}

void check_id(const TokenizerVocab& vocab, const std::optional<int32_t>& id, const char* name) {
  if (id && (*id < 0 || *id >= static_cast<int32_t>(vocab.tokens.size()))) {
    throw base::FormatError("tokenizer vocabulary: " + std::string(name) + " id " + std::to_string(*id) +
                            " is outside the vocabulary of " + std::to_string(vocab.tokens.size()) + " tokens");
  }
}

}  // namespace

void check_token_id(const TokenizerVocab& vocab, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= vocab.tokens.size()) {
    throw base::InvalidArgument("token id " + std::to_string(id) + " is outside the vocabulary of " +
                                std::to_string(vocab.tokens.size()) + " tokens");
  }
}

TokenType token_type_of(const TokenizerVocab& vocab, int32_t id) {
  if (!vocab.token_types.empty()) return vocab.token_types[static_cast<size_t>(id)];
  return is_named_id(vocab, id) ? TokenType::kControl : TokenType::kNormal;
}

void validate_vocab(const TokenizerVocab& vocab) {
  const size_t n = vocab.tokens.size();
  if (n == 0) throw base::FormatError("tokenizer vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX))
    throw base::FormatError("tokenizer vocabulary is too large: " + std::to_string(n));
  if (!vocab.scores.empty() && vocab.scores.size() != n) {
    throw base::FormatError("tokenizer vocabulary has " + std::to_string(n) + " tokens but " +
                            std::to_string(vocab.scores.size()) + " scores");
  }
  if (!vocab.token_types.empty() && vocab.token_types.size() != n) {
    throw base::FormatError("tokenizer vocabulary has " + std::to_string(n) + " tokens but " +
                            std::to_string(vocab.token_types.size()) + " token types");
  }
  for (size_t i = 0; i < vocab.token_types.size(); ++i) {
    const auto t = static_cast<int32_t>(vocab.token_types[i]);
    if (t < 0 || t > static_cast<int32_t>(TokenType::kByte)) {
      throw base::FormatError("tokenizer vocabulary: token " + std::to_string(i) + " has unknown type " +
                              std::to_string(t));
    }
  }
  check_id(vocab, vocab.bos_id, "bos");
  check_id(vocab, vocab.eos_id, "eos");
  check_id(vocab, vocab.unk_id, "unk");
  check_id(vocab, vocab.pad_id, "pad");
  check_id(vocab, vocab.eot_id, "eot");
}

SpecialTokenMatcher::SpecialTokenMatcher(const TokenizerVocab& vocab) {
  for (int32_t id = 0; id < static_cast<int32_t>(vocab.tokens.size()); ++id) {
    const TokenType type = token_type_of(vocab, id);
    if ((type == TokenType::kControl || type == TokenType::kUserDefined || type == TokenType::kUnknown) &&
        !vocab.tokens[static_cast<size_t>(id)].empty()) {
      specials_.push_back({vocab.tokens[static_cast<size_t>(id)], id});
    }
  }
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const Special& a, const Special& b) { return a.text.size() > b.text.size(); });
}

std::vector<TextFragment> SpecialTokenMatcher::split(std::string_view text) const {
  std::vector<TextFragment> fragments;
  if (!text.empty()) fragments.push_back({text, -1});
  // One pass per special token, longest first, over the raw-text fragments left so far: a
  // shorter token can never cut through a longer one that was already taken out.
  for (const Special& special : specials_) {
    std::vector<TextFragment> next;
    next.reserve(fragments.size());
    for (const TextFragment& fragment : fragments) {
      if (fragment.is_token()) {
        next.push_back(fragment);
        continue;
      }
      std::string_view rest = fragment.text;
      for (size_t at = rest.find(special.text); at != std::string_view::npos; at = rest.find(special.text)) {
        if (at > 0) next.push_back({rest.substr(0, at), -1});
        next.push_back({{}, special.id});
        rest.remove_prefix(at + special.text.size());
      }
      if (!rest.empty()) next.push_back({rest, -1});
    }
    fragments = std::move(next);
  }
  return fragments;
}

std::vector<int32_t> end_of_turn_ids(const TokenizerVocab& vocab) {
  static constexpr std::array<std::string_view, 9> kMarkers = {"<|im_end|>",    "<|eot_id|>",      "<|eom_id|>",
                                                               "<|endoftext|>", "<|end|>",         "<end_of_turn>",
                                                               "<EOT>",         "<|end_of_text|>", "</s>"};
  std::vector<int32_t> ids;
  if (vocab.eos_id) ids.push_back(*vocab.eos_id);
  if (vocab.eot_id) ids.push_back(*vocab.eot_id);
  for (int32_t id = 0; id < static_cast<int32_t>(vocab.tokens.size()); ++id) {
    const TokenType type = token_type_of(vocab, id);
    if (type != TokenType::kControl && type != TokenType::kUserDefined) continue;
    const std::string& text = vocab.tokens[static_cast<size_t>(id)];
    if (std::find(kMarkers.begin(), kMarkers.end(), text) != kMarkers.end()) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace lm
