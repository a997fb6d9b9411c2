#include "veloxquant/eval/speed_plot_svg.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <utility>

#include "base/error.h"
#include "veloxquant/eval/quality_plot_svg.h"
#include "veloxquant/eval/svg_style.h"

namespace veloxquant::eval {

namespace {

// Room on the right for the legend: entries are whole --methods entries.
constexpr double kWidth = 1000, kHeight = 540;
constexpr double kLeft = 80, kRight = 320, kTop = 56, kBottom = 70;
constexpr double kPlotW = kWidth - kLeft - kRight, kPlotH = kHeight - kTop - kBottom;

using svg::num;

struct Series {
  std::string label;
  std::vector<std::pair<int64_t, double>> points;  // (ctx, decode tok/s)
};

}  // namespace

std::string decode_speed_plot_svg(const std::vector<MethodBenchRow>& rows, const std::string& title) {
  std::vector<Series> series;
  double y_max = 0.0;
  int64_t ctx_min = 0, ctx_max = 0;
  for (const auto& r : rows) {
    if (r.row.decode_tokens <= 0) continue;
    auto it = std::find_if(series.begin(), series.end(), [&](const Series& s) { return s.label == r.label; });
    if (it == series.end()) it = series.insert(series.end(), Series{r.label, {}});
    it->points.emplace_back(r.row.ctx, r.row.decode_tokens_per_s);
    y_max = std::max(y_max, r.row.decode_tokens_per_s);
    ctx_min = ctx_min == 0 ? r.row.ctx : std::min(ctx_min, r.row.ctx);
    ctx_max = std::max(ctx_max, r.row.ctx);
  }
  if (series.empty()) throw base::InvalidArgument("speed plot: no decode row to plot");
  for (auto& s : series) std::sort(s.points.begin(), s.points.end());
  y_max = y_max > 0.0 ? y_max * 1.1 : 1.0;
  // Half an octave of margin on each side keeps the end points off the frame; a single
  // context sits in the middle.
  const double lo = std::log2(static_cast<double>(ctx_min)) - 0.5;
  const double hi = std::log2(static_cast<double>(ctx_max)) + 0.5;
  auto px = [&](int64_t ctx) { return kLeft + kPlotW * (std::log2(static_cast<double>(ctx)) - lo) / (hi - lo); };
  auto py = [&](double tps) { return kTop + kPlotH * (1.0 - tps / y_max); };

  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
      << "\" viewBox=\"0 0 " << kWidth << ' ' << kHeight << "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  out << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out << "<text x=\"" << kLeft + kPlotW / 2 << "\" y=\"28\" text-anchor=\"middle\" font-size=\"15\">"
      << xml_escape(title) << "</text>\n";
  // Grid: a vertical line at every measured context, horizontal 1-2-5 steps of tokens/s.
  std::vector<int64_t> contexts;
  for (const auto& s : series) {
    for (const auto& [ctx, tps] : s.points) contexts.push_back(ctx);
  }
  std::sort(contexts.begin(), contexts.end());
  contexts.erase(std::unique(contexts.begin(), contexts.end()), contexts.end());
  for (const int64_t ctx : contexts) {
    out << "<line x1=\"" << num(px(ctx)) << "\" y1=\"" << kTop << "\" x2=\"" << num(px(ctx)) << "\" y2=\""
        << kTop + kPlotH << "\" stroke=\"#eee\"/>\n";
    out << "<text x=\"" << num(px(ctx)) << "\" y=\"" << kTop + kPlotH + 18 << "\" text-anchor=\"middle\">" << ctx
        << "</text>\n";
  }
  const double step = svg::nice_step(y_max, 6);
  for (double y = 0.0; y <= y_max + 1e-9; y += step) {
    out << "<line x1=\"" << kLeft << "\" y1=\"" << num(py(y)) << "\" x2=\"" << kLeft + kPlotW << "\" y2=\""
        << num(py(y)) << "\" stroke=\"#ddd\"/>\n";
    out << "<text x=\"" << kLeft - 8 << "\" y=\"" << num(py(y) + 4) << "\" text-anchor=\"end\">" << y << "</text>\n";
  }
  out << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kPlotW << "\" height=\"" << kPlotH
      << "\" fill=\"none\" stroke=\"black\"/>\n";
  out << "<text x=\"" << kLeft + kPlotW / 2 << "\" y=\"" << kHeight - 22
      << "\" text-anchor=\"middle\">context length (tokens cached at the end of the row), log scale</text>\n";
  out << "<text transform=\"translate(24," << kTop + kPlotH / 2
      << ") rotate(-90)\" text-anchor=\"middle\">decode tokens/s (best of the rounds)</text>\n";
  // One group per method: the line, its points (with a tooltip) and its legend entry.
  for (std::size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    const char* colour = svg::kPalette[i % svg::kPaletteSize];
    // Past the palette the lines repeat colours; a dash pattern keeps them apart.
    const std::string dash = i >= svg::kPaletteSize ? " stroke-dasharray=\"6 3\"" : "";
    out << "<g class=\"series\" data-method=\"" << xml_escape(s.label) << "\">\n";
    out << "<polyline fill=\"none\" stroke=\"" << colour << "\" stroke-width=\"2\"" << dash << " points=\"";
    for (std::size_t p = 0; p < s.points.size(); ++p) {
      out << (p ? " " : "") << num(px(s.points[p].first)) << ',' << num(py(s.points[p].second));
    }
    out << "\"/>\n";
    for (const auto& [ctx, tps] : s.points) {
      out << "<circle cx=\"" << num(px(ctx)) << "\" cy=\"" << num(py(tps)) << "\" r=\"4\" fill=\"" << colour
          << "\"><title>" << xml_escape(s.label) << ": " << num(tps) << " tok/s at ctx " << ctx
          << "</title></circle>\n";
    }
    const double ly = kTop + 10 + 18 * static_cast<double>(i);
    out << "<line x1=\"" << kLeft + kPlotW + 16 << "\" y1=\"" << num(ly) << "\" x2=\"" << kLeft + kPlotW + 40
        << "\" y2=\"" << num(ly) << "\" stroke=\"" << colour << "\" stroke-width=\"2\"" << dash << "/>\n";
    out << "<text x=\"" << kLeft + kPlotW + 46 << "\" y=\"" << num(ly + 4) << "\" font-size=\"11\">"
        << xml_escape(s.label) << "</text>\n";
    out << "</g>\n";
  }
  out << "</svg>\n";
  return out.str();
}

}  // namespace veloxquant::eval
