#include "veloxquant/eval/quality_plot_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>

#include "base/error.h"
#include "veloxquant/eval/svg_style.h"

namespace veloxquant::eval {

namespace {

constexpr double kWidth = 860, kHeight = 540;
constexpr double kLeft = 90, kRight = 40, kTop = 56, kBottom = 70;
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;
// KL = 0 has no place on a log axis: lossless points get their own strip under the decades.
constexpr double kZeroStrip = 24;
constexpr double kLogH = kPlotH - kZeroStrip;

using svg::nice_step;
using svg::num;

const char* colour_for(const std::string& method) {
  return svg::kPalette[std::hash<std::string>{}(method) % svg::kPaletteSize];
}

}  // namespace

std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string quality_plot_svg(const std::vector<EvalRecord>& records, const std::vector<PlotReferenceLine>& references,
                             const std::string& title) {
  if (records.empty()) throw base::InvalidArgument("quality plot: no result to plot");
  double x_max = 0.0;
  double kl_min = std::numeric_limits<double>::infinity(), kl_max = 0.0;
  for (const auto& r : records) {
    x_max = std::max(x_max, r.kv_bytes_per_token);
    if (std::isfinite(r.kld) && r.kld > 0.0) {
      kl_min = std::min(kl_min, r.kld);
      kl_max = std::max(kl_max, r.kld);
    }
  }
  for (const auto& ref : references) x_max = std::max(x_max, ref.bytes_per_token);
  x_max = x_max > 0.0 ? x_max * 1.08 : 1.0;
  // Whole decades around the positive KLs; one decade (1e-4..1e-3) when every method is exact.
  int decade_lo = std::isfinite(kl_min) ? static_cast<int>(std::floor(std::log10(kl_min))) : -4;
  int decade_hi = kl_max > 0.0 ? static_cast<int>(std::ceil(std::log10(kl_max))) : decade_lo + 1;
  if (decade_hi <= decade_lo) decade_hi = decade_lo + 1;

  auto px = [&](double bytes) { return kLeft + kPlotW * bytes / x_max; };
  auto py = [&](double kl) {
    const double t = (std::log10(kl) - decade_lo) / (decade_hi - decade_lo);
    return kTop + kLogH * (1.0 - t);
  };

  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" viewBox=\"0 0 " << kWidth << ' ' << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg << "<text x=\"" << kWidth / 2 << "\" y=\"28\" text-anchor=\"middle\" font-size=\"15\">" << xml_escape(title)
      << "</text>\n";
  // Grid and axes.
  const double step = nice_step(x_max, 8);
  for (double x = 0.0; x <= x_max + 1e-9; x += step) {
    svg << "<line x1=\"" << num(px(x)) << "\" y1=\"" << kTop << "\" x2=\"" << num(px(x)) << "\" y2=\"" << kTop + kPlotH
        << "\" stroke=\"#eee\"/>\n";
    svg << "<text x=\"" << num(px(x)) << "\" y=\"" << kTop + kPlotH + 18 << "\" text-anchor=\"middle\">" << x
        << "</text>\n";
  }
  for (int d = decade_lo; d <= decade_hi; ++d) {
    const double y = py(std::pow(10.0, d));
    svg << "<line x1=\"" << kLeft << "\" y1=\"" << num(y) << "\" x2=\"" << kLeft + kPlotW << "\" y2=\"" << num(y)
        << "\" stroke=\"#ddd\"/>\n";
    svg << "<text x=\"" << kLeft - 8 << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">1e" << d << "</text>\n";
  }
  svg << "<line x1=\"" << kLeft << "\" y1=\"" << kTop + kLogH + kZeroStrip / 2 << "\" x2=\"" << kLeft + kPlotW
      << "\" y2=\"" << kTop + kLogH + kZeroStrip / 2 << "\" stroke=\"#ddd\" stroke-dasharray=\"2 2\"/>\n";
  svg << "<text x=\"" << kLeft - 8 << "\" y=\"" << kTop + kLogH + kZeroStrip / 2 + 4
      << "\" text-anchor=\"end\">0</text>\n";
  svg << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kPlotW << "\" height=\"" << kPlotH
      << "\" fill=\"none\" stroke=\"black\"/>\n";
  svg << "<text x=\"" << kLeft + kPlotW / 2 << "\" y=\"" << kHeight - 22
      << "\" text-anchor=\"middle\">KV bytes resident per token (measured nbytes)</text>\n";
  svg << "<text transform=\"translate(24," << kTop + kPlotH / 2
      << ") rotate(-90)\" text-anchor=\"middle\">mean KL(native || method), nats, log scale</text>\n";
  // Reference lines: labels stacked from the top so close lines stay readable.
  int ref_index = 0;
  for (const auto& ref : references) {
    const double x = px(ref.bytes_per_token);
    svg << "<line x1=\"" << num(x) << "\" y1=\"" << kTop << "\" x2=\"" << num(x) << "\" y2=\"" << kTop + kPlotH
        << "\" stroke=\"#888\" stroke-dasharray=\"4 3\"/>\n";
    svg << "<text x=\"" << num(x + 3) << "\" y=\"" << kTop + 12 + 13 * (ref_index % 6)
        << "\" font-size=\"10\" fill=\"#555\">" << xml_escape(ref.label) << "</text>\n";
    ++ref_index;
  }
  // Points.
  for (const auto& r : records) {
    const double x = px(r.kv_bytes_per_token);
    const bool exact = r.kld == 0.0;
    const bool infinite = !std::isfinite(r.kld);
    const double y = exact ? kTop + kLogH + kZeroStrip / 2 : (infinite ? kTop : py(r.kld));
    std::string label = r.method + (r.bits.empty() ? "" : " b=" + r.bits);
    if (!r.settings.empty()) label += " " + r.settings;
    if (exact) label += " (KL=0)";
    if (infinite) label += " (KL=inf)";
    const char* colour = colour_for(r.method);
    svg << "<circle cx=\"" << num(x) << "\" cy=\"" << num(y) << "\" r=\"5\" fill=\"" << (exact ? "white" : colour)
        << "\" stroke=\"" << colour << "\" stroke-width=\"2\"><title>" << xml_escape(label) << "</title></circle>\n";
    svg << "<text x=\"" << num(x + 7) << "\" y=\"" << num(y - 6) << "\" font-size=\"10\" fill=\"" << colour << "\">"
        << xml_escape(label) << "</text>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace veloxquant::eval
