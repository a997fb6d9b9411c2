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

std::vector<std::string> splitlines(std::string_view s) {
  std::vector<std::string> out;
  const auto cps = unicode::decode_utf8(s);
  size_t start = 0;  // byte offset of the current line
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t c = cps[i].value;
    const bool br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                    c == 0x2028 || c == 0x2029;
    if (!br) continue;
    out.emplace_back(s.substr(start, cps[i].offset - start));
    size_t next = cps[i].offset + cps[i].length;
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1].value == '\n') next = cps[++i].offset + 1;
    start = next;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
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

// Simple (one-to-one) case mappings of the scripts templates plausibly contain.
uint32_t to_upper(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c == 0xB5) return 0x39C;
  if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x131) return 'I';
    if (c == 0x17F) return 'S';
    const bool pairs_odd_lower = (c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177);
    const bool pairs_even_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (pairs_odd_lower && (c & 1)) return c - 1;
    if (pairs_even_lower && !(c & 1)) return c - 1;
    return c;
  }
  if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3AC && c <= 0x3AF) return c == 0x3AC ? 0x386 : c - 37;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

uint32_t to_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130) return 'i';  // Python gives i + combining dot; plain i is close enough here
    const bool pairs_odd_lower = (c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177);
    const bool pairs_even_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (pairs_odd_lower && !(c & 1)) return c + 1;
    if (pairs_even_lower && (c & 1)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}

bool is_cased(uint32_t c) { return to_upper(c) != c || to_lower(c) != c; }

std::string map_case(std::string_view s, uint32_t (*f)(uint32_t)) {
  std::string out;
  for (const auto& cp : unicode::decode_utf8(s)) {
    if (cp.value == unicode::kInvalidByte) {
      out.append(s.substr(cp.offset, cp.length));
    } else {
      unicode::append_utf8(out, f(cp.value));
    }
  }
  return out;
}

}  // namespace

std::string upper(std::string_view s) { return map_case(s, to_upper); }
std::string lower(std::string_view s) { return map_case(s, to_lower); }

std::string capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (const auto& cp : unicode::decode_utf8(s)) {
    if (cp.value == unicode::kInvalidByte) {
      out.append(s.substr(cp.offset, cp.length));
    } else {
      unicode::append_utf8(out, first ? to_upper(cp.value) : to_lower(cp.value));
    }
    first = false;
  }
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (const auto& cp : unicode::decode_utf8(s)) {
    if (cp.value == unicode::kInvalidByte) {
      out.append(s.substr(cp.offset, cp.length));
      previous_cased = false;
      continue;
    }
    const bool cased = is_cased(cp.value);
    unicode::append_utf8(out, cased ? (previous_cased ? to_lower(cp.value) : to_upper(cp.value)) : cp.value);
    previous_cased = cased;
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  // Jinja2: re.split(r"([-\s({\[<]+)", s), each piece's first character upper, the rest lower.
  std::string out;
  bool word_start = true;
  for (const auto& cp : unicode::decode_utf8(s)) {
    if (cp.value == unicode::kInvalidByte) {
      out.append(s.substr(cp.offset, cp.length));
      word_start = false;
      continue;
    }
    const uint32_t c = cp.value;
    const bool separator = is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    unicode::append_utf8(out, separator ? c : word_start ? to_upper(c) : to_lower(c));
    word_start = separator;
  }
  return out;
}

}  // namespace lm::jinja::pystr
