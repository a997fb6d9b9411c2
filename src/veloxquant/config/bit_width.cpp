#include "veloxquant/config/bit_width.h"

namespace veloxquant {

std::string BitWidth::to_string() const {
  if (!is_list()) return std::to_string(scalar());
  std::string text = "[";
  for (std::size_t i = 0; i < list().size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(list()[i]);
  }
  return text + "]";
}

}  // namespace veloxquant
