#pragma once
// UTF-8 scanning that never fails: tokenizers must accept any bytes a user gives them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lm::unicode {

// Code point returned for a byte that does not start a valid UTF-8 sequence. It lies outside
// Unicode, so every category test treats it as unassigned, and callers can tell it apart.
inline constexpr uint32_t kInvalidByte = 0x110000;

struct CodePoint {
  uint32_t value;   // the scalar value, or kInvalidByte
  uint32_t offset;  // byte offset of its first byte in the text
  uint32_t length;  // bytes it occupies (1 for an invalid byte)
};

// Length in bytes of the (valid, shortest-form, non-surrogate) UTF-8 sequence starting at
// text[pos], or 0 when the byte there does not start one.
size_t utf8_sequence_length(std::string_view text, size_t pos);

// Splits text into code points; each byte that is not part of a valid sequence becomes one
// kInvalidByte entry, so the offsets always cover the input exactly.
std::vector<CodePoint> decode_utf8(std::string_view text);

void append_utf8(std::string& out, uint32_t cp);

}  // namespace lm::unicode
