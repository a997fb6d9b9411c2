#include "lm/tokenizer/tokenizer_pretokenizer.h"

#include <algorithm>
#include <map>

#include "base/error.h"
#include "lm/unicode/unicode_category.h"
#include "lm/unicode/utf8.h"

namespace lm {

namespace {

using Stage = PreTokenizer::Stage;

// Regex lists per tokenizer.ggml.pre name, as llama.cpp (llama-vocab.cpp) maps them.
const std::map<std::string, std::vector<Stage>, std::less<>>& pre_tokenizers() {
  static const std::map<std::string, std::vector<Stage>, std::less<>> table = [] {
    std::map<std::string, std::vector<Stage>, std::less<>> t;
    const std::vector<Stage> gpt2 = {Stage::kGpt2};
    const std::vector<Stage> digits_then_gpt2 = {Stage::kEachNumber, Stage::kGpt2};
    const std::vector<Stage> llama3 = {Stage::kLlama3};
    t["default"] = {Stage::kPunctuationRuns, Stage::kGpt2, Stage::kNumberRuns, Stage::kAsciiDigitTriples};
    for (const char* name : {"gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais"}) t[name] = gpt2;
    for (const char* name : {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}) {
      t[name] = digits_then_gpt2;
    }
    // lfm2: LFM2's byte-level BPE, which llama.cpp also pre-tokenizes with the Llama 3 regex.
    for (const char* name : {"llama3", "llama-v3", "llama-bpe", "dbrx", "smaug-bpe", "lfm2"}) t[name] = llama3;
    t["qwen2"] = {Stage::kQwen2};
    return t;
  }();
  return table;
}

struct Span {
  size_t begin;  // code point indices, [begin, end)
  size_t end;
};

// Character tests over one span; positions at or past `end` are "out of range" and match
// nothing, which is how a regex stops at the end of the piece it splits.
class Cursor {
 public:
  Cursor(const std::vector<unicode::CodePoint>& cps, size_t end) : cps_(cps), end_(end) {}
  bool in(size_t i) const { return i < end_; }
  uint32_t cp(size_t i) const { return in(i) ? cps_[i].value : 0xFFFFFFFFu; }
  bool space(size_t i) const { return in(i) && unicode::is_whitespace(cps_[i].value); }
  bool letter(size_t i) const { return in(i) && unicode::is_letter(cps_[i].value); }
  bool number(size_t i) const { return in(i) && unicode::is_number(cps_[i].value); }
  // [^\s\p{L}\p{N}]
  bool other(size_t i) const { return in(i) && !space(i) && !letter(i) && !number(i); }
  bool newline(size_t i) const { return cp(i) == '\r' || cp(i) == '\n'; }
  uint32_t lower_ascii(size_t i) const {
    const uint32_t c = cp(i);
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
  }

 private:
  const std::vector<unicode::CodePoint>& cps_;
  size_t end_;
};

// 's 't 'm 'd (2 code points) or 're 've 'll (3) at p; 0 when none.
size_t contraction_length(const Cursor& c, size_t p, bool ignore_case) {
  if (c.cp(p) != '\'') return 0;
  auto at = [&](size_t i) { return ignore_case ? c.lower_ascii(i) : c.cp(i); };
  const uint32_t a = at(p + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = at(p + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S) then \s+ at p, for a whitespace run of n code points: all of a run that ends the
// piece; otherwise all but its last code point (which the next word takes as its " ?"
// prefix), unless the run is a single code point.
size_t whitespace_match(const Cursor& c, size_t p) {
  size_t n = 0;
  while (c.space(p + n)) ++n;
  if (n > 1 && c.in(p + n)) return n - 1;
  return n;
}

// Length of the GPT-2 regex's match at p (always >= 1).
size_t gpt2_match(const Cursor& c, size_t p) {
  if (size_t n = contraction_length(c, p, /*ignore_case=*/false)) return n;
  const size_t q = p + (c.cp(p) == ' ' ? 1 : 0);  // the optional leading space
  size_t e = q;
  if (c.letter(q)) {
    while (c.letter(e)) ++e;
    return e - p;
  }
  if (c.number(q)) {
    while (c.number(e)) ++e;
    return e - p;
  }
  if (c.other(q)) {
    while (c.other(e)) ++e;
    return e - p;
  }
  if (size_t n = whitespace_match(c, p)) return n;
  return 1;
}

// Length of the Llama 3 regex's match at p (always >= 1); max_digits 3 (Llama 3) or 1 (Qwen2).
size_t llama3_match(const Cursor& c, size_t p, size_t max_digits) {
  if (size_t n = contraction_length(c, p, /*ignore_case=*/true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+ : any one non-newline, non-number code point may lead a word.
  if (!c.newline(p) && !c.number(p) && (c.letter(p) || c.letter(p + 1))) {
    size_t e = p + 1;
    while (c.letter(e)) ++e;
    return e - p;
  }
  if (c.number(p)) {
    size_t e = p;
    while (c.number(e) && e - p < max_digits) ++e;
    return e - p;
  }
  // " ?[^\s\p{L}\p{N}]+[\r\n]*"
  const size_t q = p + (c.cp(p) == ' ' ? 1 : 0);
  if (c.other(q)) {
    size_t e = q;
    while (c.other(e)) ++e;
    while (c.newline(e)) ++e;
    return e - p;
  }
  // \s*[\r\n]+ : a whitespace run up to and including its last newline.
  size_t n = 0, through_last_newline = 0;
  while (c.space(p + n)) {
    if (c.newline(p + n)) through_last_newline = n + 1;
    ++n;
  }
  if (through_last_newline > 0) return through_last_newline;
  if (size_t m = whitespace_match(c, p)) return m;
  return 1;
}

// Where the stage's match starting at p ends, or p when nothing matches there.
size_t stage_match_end(Stage stage, const Cursor& c, size_t p) {
  switch (stage) {
    case Stage::kGpt2:
      return p + gpt2_match(c, p);
    case Stage::kLlama3:
      return p + llama3_match(c, p, 3);
    case Stage::kQwen2:
      return p + llama3_match(c, p, 1);
    case Stage::kEachNumber:
      return c.number(p) ? p + 1 : p;
    case Stage::kNumberRuns: {
      size_t e = p;
      while (c.number(e)) ++e;
      return e;
    }
    case Stage::kAsciiDigitTriples: {
      auto digit = [&](size_t i) { return c.cp(i) >= '0' && c.cp(i) <= '9'; };
      return digit(p) && digit(p + 1) && digit(p + 2) ? p + 3 : p;
    }
    case Stage::kPunctuationRuns: {
      auto punct = [&](size_t i) {
        if (!c.in(i)) return false;
        const uint32_t v = c.cp(i);
        return unicode::is_punctuation(v) || v == '$' || v == '+' || v == '<' || v == '=' || v == '>' || v == '^' ||
               v == '~' || v == '|';
      };
      size_t e = p;
      while (punct(e)) ++e;
      return e;
    }
  }
  return p;
}

// Splits each span with one regex; matches and the gaps between them both become spans.
// (gpt2, llama3 and qwen2 match every code point, so they leave no gaps.)
std::vector<Span> apply_stage(Stage stage, const std::vector<unicode::CodePoint>& cps, const std::vector<Span>& spans) {
  std::vector<Span> out;
  out.reserve(spans.size() * 2);
  for (const Span& span : spans) {
    const Cursor c(cps, span.end);
    size_t gap_begin = span.begin;
    size_t p = span.begin;
    while (p < span.end) {
      const size_t end = stage_match_end(stage, c, p);
      if (end == p) {  // no match here: the gap grows
        ++p;
        continue;
      }
      if (gap_begin < p) out.push_back({gap_begin, p});
      out.push_back({p, end});
      gap_begin = end;
      p = end;
    }
    if (gap_begin < span.end) out.push_back({gap_begin, span.end});
  }
  return out;
}

}  // namespace

PreTokenizer::PreTokenizer(std::string_view name) : name_(name) {
  const auto& table = pre_tokenizers();
  auto it = table.find(name);
  if (it == table.end()) {
    std::string known;
    for (const auto& [n, stages] : table) known += (known.empty() ? "" : ", ") + n;
    throw base::Unsupported("byte-level BPE pre-tokenizer '" + std::string(name) +
                            "' (tokenizer.ggml.pre) is not supported; supported: " + known);
  }
  stages_ = it->second;
}

std::vector<std::string> PreTokenizer::supported_names() {
  std::vector<std::string> names;
  for (const auto& [name, stages] : pre_tokenizers()) names.push_back(name);
  return names;
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  const std::vector<unicode::CodePoint> cps = unicode::decode_utf8(text);
  std::vector<Span> spans;
  if (!cps.empty()) spans.push_back({0, cps.size()});
  for (Stage stage : stages_) spans = apply_stage(stage, cps, spans);
  std::vector<std::string_view> words;
  words.reserve(spans.size());
  for (const Span& span : spans) {
    const size_t begin = cps[span.begin].offset;
    const size_t end = cps[span.end - 1].offset + cps[span.end - 1].length;
    words.push_back(text.substr(begin, end - begin));
  }
  return words;
}

}  // namespace lm
