#include "lm/tokenizer/jinja/pystring.h"

#include "lm/unicode/unicode_category.h"
#include "lm/unicode/utf8.h"

namespace lm::jinja::pystr {

bool is_space(uint32_t cp) {
  // str.isspace(): the White_Space property plus the information separators U+001C..U+001F,
  // which Python counts as whitespace (bidirectional class B/S).
  return unicode::is_whitespace(cp) || (cp >= 0x1C && cp <= 0x1F);
}

int64_t length(std::string_view s) { return static_cast<int64_t>(unicode::decode_utf8(s).size()); }

std::vector<std::string> code_points(std::string_view s) {
  std::vector<std::string> out;
  for (const auto& cp : unicode::decode_utf8(s)) out.emplace_back(s.substr(cp.offset, cp.length));
  return out;
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const auto cps = unicode::decode_utf8(s);
  std::vector<uint32_t> set;
  if (chars) {
    for (const auto& cp : unicode::decode_utf8(*chars)) set.push_back(cp.value);
  }
  auto strippable = [&](uint32_t cp) {
    if (!chars) return is_space(cp);
    for (uint32_t c : set) {
      if (c == cp) return true;
    }
    return false;
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strippable(cps[begin].value)) ++begin;
  }
  if (right) {
    while (end > begin && strippable(cps[end - 1].value)) --end;
  }
  if (begin == end) return {};
  const size_t from = cps[begin].offset;
  const size_t to = cps[end - 1].offset + cps[end - 1].length;
  return std::string(s.substr(from, to - from));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t at = s.find(*sep, pos);
      if (at == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, at - pos));
      pos = at + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  // Runs of whitespace separate; leading and trailing whitespace yields no empty strings.
  const auto cps = unicode::decode_utf8(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && is_space(cps[i].value)) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      // The rest, with its trailing whitespace removed as Python does.
      out.push_back(strip(s.substr(cps[i].offset), std::nullopt, false, true));
      return out;
    }
    const size_t start = i;
    while (i < cps.size() && !is_space(cps[i].value)) ++i;
    const size_t from = cps[start].offset;
    const size_t to = cps[i - 1].offset + cps[i - 1].length;
    out.emplace_back(s.substr(from, to - from));
  }
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `with` between code points and at both ends.
    const auto cps = code_points(s);
    int64_t done = 0;
    for (const auto& cp : cps) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      out += cp;
    }
    if (count < 0 || done < count) out += with;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(old, pos);
    if (at == std::string_view::npos) break;
    out.append(s.substr(pos, at - pos)).append(with);
    pos = at + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

namespace {
char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
}  // namespace

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_upper(c);
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out = lower(s);
  if (!out.empty()) out[0] = ascii_upper(out[0]);
  return out;
}

std::string title(std::string_view s) {
  std::string out(s);
  bool previous_cased = false;
  for (char& c : out) {
    const bool alpha = ascii_alpha(c);
    c = alpha ? (previous_cased ? ascii_lower(c) : ascii_upper(c)) : c;
    // Bytes of multi-byte characters count as cased, so a letter after é is not capitalised.
    previous_cased = alpha || static_cast<unsigned char>(c) >= 0x80;
  }
  return out;
}

}  // namespace lm::jinja::pystr
