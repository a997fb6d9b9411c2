// bench-host's speed plot: a well-formed SVG document (every tag closed in order, checked by a
// small tag-stack reader) with exactly one series group per method, a point per decode row,
// labels escaped, and the prefill row left out.
#include "veloxquant/eval/speed_plot_svg.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"

namespace veloxquant::eval {
namespace {

int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

// "" when every element is closed in order and the root is one <svg>; else what is wrong.
std::string well_formed(const std::string& doc) {
  std::vector<std::string> open;
  int roots = 0;
  for (std::size_t pos = doc.find('<'); pos != std::string::npos; pos = doc.find('<', pos + 1)) {
    const std::size_t end = doc.find('>', pos);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(pos);
    const std::string tag = doc.substr(pos + 1, end - pos - 1);
    if (tag.empty()) return "empty tag";
    if (tag.find('<') != std::string::npos) return "'<' inside a tag: " + tag;
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "unexpected </" + tag.substr(1) + ">";
      open.pop_back();
    } else if (tag.back() != '/') {
      const std::string name = tag.substr(0, tag.find_first_of(" \n"));
      if (open.empty()) ++roots;
      open.push_back(name);
    } else if (open.empty()) {
      return "self-closed element outside the root";
    }
    pos = end;
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  if (roots != 1) return "expected one root element, got " + std::to_string(roots);
  return "";
}

MethodBenchRow row(const std::string& label, const std::string& kind, int64_t ctx, double decode_tps) {
  MethodBenchRow r;
  r.label = label;
  r.row.kind = kind;
  r.row.ctx = ctx;
  r.row.decode_tokens = kind == "decode" ? 32 : 0;
  r.row.decode_tokens_per_s = decode_tps;
  return r;
}

TEST(SpeedPlotSvg, OneSeriesPerMethodAndAPointPerDecodeRow) {
  const std::vector<MethodBenchRow> rows = {row("none", "prefill", 512, 0),
                                            row("kivi --bits 4", "prefill", 512, 0),
                                            row("none", "decode", 1024, 115),
                                            row("kivi --bits 4", "decode", 1024, 100),
                                            row("h2o --set h2o_budget=512", "decode", 1024, 120),
                                            row("none", "decode", 8192, 28),
                                            row("kivi --bits 4", "decode", 8192, 40),
                                            row("h2o --set h2o_budget=512", "decode", 8192, 110)};
  const std::string svg = decode_speed_plot_svg(rows, "decode <tok/s> & ctx");
  EXPECT_EQ(well_formed(svg), "") << svg;
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(count(svg, "<g class=\"series\""), 3);
  EXPECT_EQ(count(svg, "data-method=\"none\""), 1);
  EXPECT_EQ(count(svg, "data-method=\"kivi --bits 4\""), 1);
  EXPECT_EQ(count(svg, "data-method=\"h2o --set h2o_budget=512\""), 1);
  EXPECT_EQ(count(svg, "<polyline"), 3);
  EXPECT_EQ(count(svg, "<circle"), 6);  // 3 methods x 2 contexts; the prefill rows are not plotted
  EXPECT_NE(svg.find("decode &lt;tok/s&gt; &amp; ctx"), std::string::npos);  // escaped title
  EXPECT_NE(svg.find(">1024</text>"), std::string::npos);
  EXPECT_NE(svg.find(">8192</text>"), std::string::npos);
}

TEST(SpeedPlotSvg, PointsSortedByContextAndHigherSpeedHigherUp) {
  // Given out of order: the line must still run from the smaller context to the larger.
  const std::vector<MethodBenchRow> rows = {row("none", "decode", 4096, 10), row("none", "decode", 1024, 40)};
  const std::string svg = decode_speed_plot_svg(rows, "t");
  EXPECT_EQ(well_formed(svg), "") << svg;
  const auto points_at = svg.find("points=\"");
  ASSERT_NE(points_at, std::string::npos);
  double x1 = 0, y1 = 0, x2 = 0, y2 = 0;
  ASSERT_EQ(std::sscanf(svg.c_str() + points_at + 8, "%lf,%lf %lf,%lf", &x1, &y1, &x2, &y2), 4);
  EXPECT_LT(x1, x2);  // 1024 left of 4096
  EXPECT_LT(y1, y2);  // 40 tok/s above 10 tok/s (SVG y grows downwards)
}

TEST(SpeedPlotSvg, RefusesRowsWithoutDecode) {
  EXPECT_THROW(decode_speed_plot_svg({row("none", "prefill", 512, 0)}, "t"), base::InvalidArgument);
  EXPECT_THROW(decode_speed_plot_svg({}, "t"), base::InvalidArgument);
}

}  // namespace
}  // namespace veloxquant::eval
