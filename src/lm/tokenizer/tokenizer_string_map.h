#pragma once
// piece -> id maps looked up with string_views (no temporary std::string per lookup; the
// tokenizers do one lookup per candidate merge).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace lm {

struct StringViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

template <typename V>
using StringMap = std::unordered_map<std::string, V, StringViewHash, std::equal_to<>>;

}  // namespace lm
