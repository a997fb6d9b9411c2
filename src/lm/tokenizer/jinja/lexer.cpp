#include "lm/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "lm/tokenizer/jinja/pystring.h"
#include "lm/unicode/utf8.h"

namespace lm::jinja {

namespace {

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Python's str.rstrip() / "\s+" on the text: all Unicode whitespace.
std::string rstrip_all(std::string_view text) { return pystr::strip(text, std::nullopt, false, true); }
bool all_space(std::string_view text) { return !text.empty() && pystr::strip(text, std::nullopt, true, true).empty(); }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(std::string_view raw) {
    // Jinja2 treats \r\n and \r as \n everywhere in the source, and (keep_trailing_newline
    // off) drops one newline at the very end.
    src_.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\r') {
        src_ += '\n';
        if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
      } else {
        src_ += raw[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;  // the previous tag's match ended with a newline (or we are at the start)
    while (pos < src_.size()) {
      size_t open = pos;
      while (open + 1 < src_.size() &&
             !(src_[open] == '{' && (src_[open + 1] == '{' || src_[open + 1] == '%' || src_[open + 1] == '#'))) {
        ++open;
      }
      if (open + 1 >= src_.size()) {
        emit_text(src_.substr(pos), pos);
        break;
      }
      const char kind = src_[open + 1];
      const char sign = open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+') ? src_[open + 2] : 0;
      std::string text = src_.substr(pos, open - pos);
      if (sign == '-') {
        text = rstrip_all(text);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: a block or comment tag preceded on its line only by whitespace.
        const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if ((line_start > 0 || line_starting) && all_space(std::string_view(text).substr(line_start))) {
          text.resize(line_start);
        }
      }
      emit_text(text, pos);
      size_t p = open + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        p = skip_comment(p, open);
      } else {
        p = lex_tag(p, open, kind == '%');
      }
      line_starting = p > 0 && src_[p - 1] == '\n';
      pos = p;
    }
    tokens_.push_back(Token{Token::Kind::kEnd, {}, 0, 0, position(src_.size())});
    return std::move(tokens_);
  }

 private:
  Position position(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return Position{static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }

  void emit_text(std::string text, size_t at) {
    if (!text.empty()) tokens_.push_back(Token{Token::Kind::kText, std::move(text), 0, 0, position(at)});
  }

  size_t skip_whitespace(size_t p) const {
    // "\s*" after a "-" end marker: all whitespace, Unicode included.
    const auto rest = std::string_view(src_).substr(p);
    const std::string stripped = pystr::strip(rest, std::nullopt, true, false);
    return p + (rest.size() - stripped.size());
  }

  // After `{#`: up to and including the end marker (+#}, -#} plus whitespace, #} plus one newline).
  size_t skip_comment(size_t p, size_t open) {
    for (size_t j = p; j + 1 < src_.size(); ++j) {
      if ((src_[j] == '+' || src_[j] == '-') && src_.compare(j + 1, 2, "#}") == 0) {
        return src_[j] == '-' ? skip_whitespace(j + 3) : j + 3;
      }
      if (src_.compare(j, 2, "#}") == 0) return j + 2 < src_.size() && src_[j + 2] == '\n' ? j + 3 : j + 2;
    }
    syntax_error(position(open), "missing end of comment tag '#}'");
  }

  // Inside {{ or {%: expression tokens up to the end marker. Returns the offset after it.
  size_t lex_tag(size_t p, size_t open, bool block) {
    tokens_.push_back(
        Token{block ? Token::Kind::kBlockBegin : Token::Kind::kVarBegin, block ? "{%" : "{{", 0, 0, position(open)});
    std::vector<char> balance;  // open brackets: an end marker inside them is not an end
    while (true) {
      if (p >= src_.size()) {
        syntax_error(position(open), std::string("unexpected end of template, expected '") + (block ? "%}" : "}}") +
                                         "' to close the tag opened here");
      }
      if (balance.empty()) {
        const char* end = block ? "%}" : "}}";
        size_t after = std::string::npos;
        if (block && src_.compare(p, 3, "+%}") == 0) {
          after = p + 3;
        } else if (src_[p] == '-' && src_.compare(p + 1, 2, end) == 0) {
          after = skip_whitespace(p + 3);
        } else if (src_.compare(p, 2, end) == 0) {
          after = p + 2;
          if (block && after < src_.size() && src_[after] == '\n') ++after;  // trim_blocks
        }
        if (after != std::string::npos) {
          tokens_.push_back(Token{block ? Token::Kind::kBlockEnd : Token::Kind::kVarEnd, end, 0, 0, position(p)});
          return after;
        }
      }
      const char c = src_[p];
      if (is_ascii_space(c)) {
        ++p;
        continue;
      }
      const Position at = position(p);
      if (is_name_start(c)) {
        size_t q = p;
        while (q < src_.size() && is_name_char(src_[q])) ++q;
        tokens_.push_back(Token{Token::Kind::kName, src_.substr(p, q - p), 0, 0, at});
        p = q;
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else if (is_digit(c)) {
        p = lex_number(p);
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                     "]",  "(",  ")",  "{",  "}",  "<",  ">", "=", ".", ":", "|", ",", ";"};
        std::string op;
        for (const char* candidate : kOps) {
          if (src_.compare(p, std::char_traits<char>::length(candidate), candidate) == 0) {
            op = candidate;
            break;
          }
        }
        if (op.empty()) syntax_error(at, std::string("unexpected character '") + c + "'");
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) syntax_error(at, "unexpected '" + op + "'");
          if (balance.back() != op[0]) {
            syntax_error(at, "unexpected '" + op + "', expected '" + std::string(1, balance.back()) + "'");
          }
          balance.pop_back();
        }
        tokens_.push_back(Token{Token::Kind::kOperator, op, 0, 0, at});
        p += op.size();
      }
    }
  }

  // A quoted string with Python's escapes (Jinja2 decodes them with "unicode-escape").
  size_t lex_string(size_t p) {
    const Position at = position(p);
    const char quote = src_[p];
    std::string value;
    size_t q = p + 1;
    while (true) {
      if (q >= src_.size()) syntax_error(at, "unterminated string");
      const char c = src_[q];
      if (c == quote) break;
      if (c != '\\' || q + 1 >= src_.size()) {
        value += c;
        ++q;
        continue;
      }
      const char e = src_[q + 1];
      q += 2;
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'v':
          value += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t k = 0; k < digits; ++k) {
            const int h = q + k < src_.size() ? hex_value(src_[q + k]) : -1;
            if (h < 0) syntax_error(at, std::string("truncated \\") + e + " escape in string");
            cp = cp * 16 + static_cast<uint32_t>(h);
          }
          if (cp > 0x10FFFF) syntax_error(at, "escape in string is past U+10FFFF");
          q += digits;
          unicode::append_utf8(value, cp);
          break;
        }
        case 'N':
          unsupported(at, "the \\N{...} escape");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7'; ++k, ++q) {
              cp = cp * 8 + static_cast<uint32_t>(src_[q] - '0');
            }
            unicode::append_utf8(value, cp);
          } else {
            value += '\\';  // unknown escapes stay as written
            value += e;
          }
      }
    }
    tokens_.push_back(Token{Token::Kind::kString, std::move(value), 0, 0, at});
    return q + 1;
  }

  size_t lex_number(size_t p) {
    const Position at = position(p);
    auto digits = [&](size_t q) {
      // \d+ with single underscores between digits
      while (q < src_.size() &&
             (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && is_digit(src_[q + 1])))) {
        ++q;
      }
      return q;
    };
    size_t q = digits(p);
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
      q = digits(q + 1);
      is_float = true;
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && is_digit(src_[r])) {
        q = digits(r);
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = p; k < q; ++k) {
      if (src_[k] != '_') text += src_[k];
    }
    Token t{is_float ? Token::Kind::kFloat : Token::Kind::kInt, text, 0, 0, at};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) unsupported(at, "an integer literal past 64 bits");
    }
    tokens_.push_back(std::move(t));
    return q;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace lm::jinja
