#pragma once
// Small self-contained SVG line charts for sweep results (no scripts, no fonts fetched).
#include <string>
#include <vector>

namespace moe::sim {

struct Series {
  std::string label;
  std::vector<double> x, y;
};

// Axes with ticks, one polyline with point markers per series, and a legend.
std::string line_chart_svg(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<Series>& series);

}  // namespace moe::sim
