#pragma once
// bench-host --methods' plot, written by hand as SVG like the quality plot (svg_style.h): decode
// tokens/s against context length, one line per method measured, the native cache among them.
// The context axis is logarithmic (base 2): contexts are usually powers of two apart, and at
// long context decode slows roughly in proportion to the bytes attention reads.
#include <string>
#include <vector>

#include "veloxquant/eval/host_bench_methods.h"

namespace veloxquant::eval {

// A standalone SVG document with one <g class="series" data-method="LABEL"> per method (in
// first-seen order), each a polyline through its decode rows sorted by ctx and a circle per
// point. The prefill row is not plotted. Throws base::InvalidArgument when no row decodes.
std::string decode_speed_plot_svg(const std::vector<MethodBenchRow>& rows, const std::string& title);

}  // namespace veloxquant::eval
