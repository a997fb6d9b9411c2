#include "lm/unicode/unicode_category.h"

#include <algorithm>

namespace lm::unicode {

Category category(uint32_t cp) {
  // ASCII dominates real text; answer it without the binary search.
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return Category::kLetter;
    if (cp >= '0' && cp <= '9') return Category::kNumber;
    if (cp < 0x20 || cp == 0x7F) return Category::kOther;
    if (cp == ' ') return Category::kSeparator;
  }
  if (cp > 0x10FFFF) return Category::kUnassigned;
  const detail::CategoryRun* begin = detail::kCategoryRuns;
  const detail::CategoryRun* end = begin + detail::kCategoryRunCount;
  // The last run whose first code point is <= cp holds cp (the table starts at U+0000).
  const detail::CategoryRun* it = std::upper_bound(
      begin, end, cp, [](uint32_t value, const detail::CategoryRun& run) { return value < run.first; });
  return (it - 1)->category;
}

bool is_whitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  switch (cp) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

}  // namespace lm::unicode
