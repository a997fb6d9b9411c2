#pragma once
// The look every hand-written SVG plot of the project shares (bench-methods' quality plot,
// bench-host's speed plot): one palette, one number format, 1-2-5 axis steps.
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>

namespace veloxquant::eval::svg {

inline constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                           "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
inline constexpr std::size_t kPaletteSize = sizeof kPalette / sizeof kPalette[0];

// Coordinates with one decimal: enough for a screen, short files.
inline std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// A 1-2-5 step giving about `target` ticks over [0, span].
inline double nice_step(double span, int target) {
  const double raw = span / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) return m * magnitude;
  }
  return 10.0 * magnitude;
}

}  // namespace veloxquant::eval::svg
