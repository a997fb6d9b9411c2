#pragma once
// bench-methods' plot, written by hand as SVG (no plotting dependency): quality lost (mean KL
// divergence from the native cache, log scale) against KV bytes resident per token. Lower-left
// is better. Reference formats are vertical lines on the bytes axis.
#include <string>
#include <vector>

#include "veloxquant/eval/eval_record.h"

namespace veloxquant::eval {

struct PlotReferenceLine {
  std::string label;  // "native cache", "llama.cpp q8_0 (bytes only)"
  double bytes_per_token = 0.0;
};

// A standalone SVG document. KL = 0 (lossless) points sit in a strip under the lowest decade,
// hollow; non-finite KL sits on the top edge marked "inf". Throws base::InvalidArgument on an
// empty record list.
std::string quality_plot_svg(const std::vector<EvalRecord>& records, const std::vector<PlotReferenceLine>& references,
                             const std::string& title);

// Escapes &, <, >, " for SVG text and attributes.
std::string xml_escape(const std::string& text);

}  // namespace veloxquant::eval
