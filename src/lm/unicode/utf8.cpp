#include "lm/unicode/utf8.h"

namespace lm::unicode {

namespace {
bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }
}  // namespace

size_t utf8_sequence_length(std::string_view text, size_t pos) {
  const auto byte = static_cast<unsigned char>(text[pos]);
  const size_t left = text.size() - pos;
  auto at = [&](size_t i) { return static_cast<unsigned char>(text[pos + i]); };
  if (byte < 0x80) return 1;
  if (byte >= 0xC2 && byte <= 0xDF) return left >= 2 && is_continuation(at(1)) ? 2 : 0;
  if (byte >= 0xE0 && byte <= 0xEF) {
    if (left < 3 || !is_continuation(at(1)) || !is_continuation(at(2))) return 0;
    if (byte == 0xE0 && at(1) < 0xA0) return 0;   // overlong
    if (byte == 0xED && at(1) >= 0xA0) return 0;  // UTF-16 surrogate
    return 3;
  }
  if (byte >= 0xF0 && byte <= 0xF4) {
    if (left < 4 || !is_continuation(at(1)) || !is_continuation(at(2)) || !is_continuation(at(3))) return 0;
    if (byte == 0xF0 && at(1) < 0x90) return 0;   // overlong
    if (byte == 0xF4 && at(1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

std::vector<CodePoint> decode_utf8(std::string_view text) {
  std::vector<CodePoint> out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t n = utf8_sequence_length(text, pos);
    const auto b0 = static_cast<unsigned char>(text[pos]);
    uint32_t cp = kInvalidByte;
    if (n == 1) {
      cp = b0;
    } else if (n > 1) {
      cp = b0 & (0xFF >> (n + 1));
      for (size_t i = 1; i < n; ++i) cp = (cp << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3F);
    }
    const uint32_t length = n == 0 ? 1 : static_cast<uint32_t>(n);
    out.push_back({cp, static_cast<uint32_t>(pos), length});
    pos += length;
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace lm::unicode
