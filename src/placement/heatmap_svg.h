#pragma once
// An SVG heatmap of device load per layer: one panel per placement (e.g. before and after),
// rows are layers, columns devices, the colour is the device's load over the layer's mean
// device load (white = 1, red above, blue below; saturating at 2 and 0).
#include <string>
#include <vector>

#include "placement/placement.h"
#include "placement/trace.h"

namespace moe::placement {

struct HeatmapPanel {
  std::string title;
  std::vector<std::vector<double>> ratio;  // [layers][devices]: device load / layer mean
};

HeatmapPanel heatmap_panel(const std::string& title, const LoadMatrix& load, const Placement& p);
std::string heatmap_svg(const std::string& title, const std::vector<HeatmapPanel>& panels);

}  // namespace moe::placement
