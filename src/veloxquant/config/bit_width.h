#pragma once
// veloxquant::BitWidth — the `bit_width_inlier` field: either one int for every layer, or one
// int per *attention* layer (the per-layer form only makes sense to for_model, spec §3.1).
// Assignable from an int and from a std::vector<int>, as the Python field accepts both.
#include <initializer_list>
#include <string>
#include <stdexcept>
#include <vector>

namespace veloxquant {

class BitWidth {
 public:
  BitWidth() = default;
  BitWidth(int bits) : scalar_(bits) {}  // NOLINT: implicit on purpose (config.bit_width_inlier = 4)
  BitWidth(std::vector<int> per_layer) : is_list_(true), list_(std::move(per_layer)) {}  // NOLINT: implicit
  BitWidth(std::initializer_list<int> per_layer) : is_list_(true), list_(per_layer) {}

  bool is_list() const { return is_list_; }
  // The scalar; throws std::logic_error for the list form (callers check is_list()).
  int scalar() const {
    if (is_list_) throw std::logic_error("BitWidth::scalar() on a per-layer list");
    return scalar_;
  }
  // The per-attention-layer list; throws std::logic_error for the scalar form.
  const std::vector<int>& list() const {
    if (!is_list_) throw std::logic_error("BitWidth::list() on a scalar");
    return list_;
  }
  // The bits for attention layer `attention_index` (the scalar for every layer, else the entry).
  int for_attention_layer(std::size_t attention_index) const {
    return is_list() ? list().at(attention_index) : scalar();
  }
  // "2" or "[2, 3, 4]" — the form error messages and reports echo.
  std::string to_string() const;

  bool operator==(const BitWidth&) const = default;

 private:
  // Two plain members rather than a std::variant: same semantics, and GCC 12 raises false
  // maybe-uninitialized warnings on assigning variant<int, vector<int>>.
  bool is_list_ = false;
  int scalar_ = 2;
  std::vector<int> list_;
};

}  // namespace veloxquant
