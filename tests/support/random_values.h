#pragma once
// Deterministic N(0, 1) floats for kernel tests (header-only).
#include <cstdint>
#include <random>
#include <vector>

namespace test_support {

inline std::vector<float> normal_values(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace test_support
