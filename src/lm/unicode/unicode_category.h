#pragma once
// Unicode general categories (coarse: L, M, N, P, S, Z, C, unassigned) and the White_Space
// property, as the byte-level BPE pre-tokenizer regexes use them (\p{L}, \p{N}, \p{P}, \s).
// The table is generated from Python's unicodedata by tools/make_unicode_tables.py.
#include <cstdint>

namespace lm::unicode {

enum class Category : uint8_t {
  kLetter,       // Lu Ll Lt Lm Lo        \p{L}
  kMark,         // Mn Mc Me              \p{M}
  kNumber,       // Nd Nl No              \p{N}
  kPunctuation,  // Pc Pd Ps Pe Pi Pf Po  \p{P}
  kSymbol,       // Sm Sc Sk So           \p{S}
  kSeparator,    // Zs Zl Zp              \p{Z}
  kOther,        // Cc Cf Cs Co
  kUnassigned,   // Cn, and anything past U+10FFFF or not decodable as UTF-8
};

Category category(uint32_t cp);

// The White_Space property (what regex \s matches): TAB..CR, space, NEL, NBSP, OGHAM SPACE,
// EN QUAD..HAIR SPACE, LINE/PARAGRAPH SEPARATOR, NNBSP, MMSP, IDEOGRAPHIC SPACE.
bool is_whitespace(uint32_t cp);

inline bool is_letter(uint32_t cp) { return category(cp) == Category::kLetter; }
inline bool is_number(uint32_t cp) { return category(cp) == Category::kNumber; }
inline bool is_punctuation(uint32_t cp) { return category(cp) == Category::kPunctuation; }

namespace detail {
struct CategoryRun {
  uint32_t first;  // first code point of the run; the run ends where the next one starts
  Category category;
};
extern const CategoryRun kCategoryRuns[];
extern const int kCategoryRunCount;
}  // namespace detail

}  // namespace lm::unicode
