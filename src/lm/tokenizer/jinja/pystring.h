#pragma once
// Python str operations on UTF-8 text, by code point as Python counts them: len, indexing and
// slicing, strip with str.isspace's notion of whitespace, split, and case mapping for the
// letters of ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (other scripts are left as
// they are; the one-to-many mappings such as ß -> SS are not made).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lm::jinja::pystr {

bool is_space(uint32_t cp);  // str.isspace()

int64_t length(std::string_view s);
std::vector<std::string> code_points(std::string_view s);  // one UTF-8 string per code point

// strip / lstrip / rstrip: `chars` absent means whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1).
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
// str.splitlines(): \n, \r, \r\n, \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029 end lines.
std::vector<std::string> splitlines(std::string_view s);
std::string replace(std::string_view s, std::string_view old, std::string_view with, int64_t count);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string capitalize(std::string_view s);   // first letter upper, the rest lower
std::string title(std::string_view s);        // str.title(): a letter after a non-letter is upper
std::string jinja_title(std::string_view s);  // Jinja's title filter: words split at whitespace - ( { [ <

}  // namespace lm::jinja::pystr
