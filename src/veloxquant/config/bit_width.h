#pragma once
// veloxquant::BitWidth — the `bit_width_inlier` field: either one int for every layer, or one
// int per *attention* layer (the per-layer form only makes sense to for_model, spec §3.1).
// Assignable from an int and from a std::vector<int>, as the Python field accepts both.
#include <initializer_list>
#include <string>
#include <variant>
#include <vector>

namespace veloxquant {

class BitWidth {
 public:
  BitWidth() = default;
  BitWidth(int bits) : value_(bits) {}  // NOLINT: implicit on purpose (config.bit_width_inlier = 4)
  BitWidth(std::vector<int> per_layer) : value_(std::move(per_layer)) {}  // NOLINT: implicit
  BitWidth(std::initializer_list<int> per_layer) : value_(std::vector<int>(per_layer)) {}

  bool is_list() const { return std::holds_alternative<std::vector<int>>(value_); }
  // The scalar; only valid when !is_list().
  int scalar() const { return std::get<int>(value_); }
  // The per-attention-layer list; only valid when is_list().
  const std::vector<int>& list() const { return std::get<std::vector<int>>(value_); }
  // The bits for attention layer `attention_index` (the scalar for every layer, else the entry).
  int for_attention_layer(std::size_t attention_index) const {
    return is_list() ? list().at(attention_index) : scalar();
  }
  // "2" or "[2, 3, 4]" — the form error messages and reports echo.
  std::string to_string() const;

  bool operator==(const BitWidth&) const = default;

 private:
  std::variant<int, std::vector<int>> value_ = 2;
};

}  // namespace veloxquant
