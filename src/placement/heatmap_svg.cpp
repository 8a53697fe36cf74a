#include "placement/heatmap_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "placement/metrics.h"

namespace moe::placement {
namespace {

std::string colour(double ratio) {
  const double t = std::clamp(ratio - 1.0, -1.0, 1.0);
  const int fade = int(std::lround(255 * (1.0 - std::abs(t))));
  return t >= 0 ? fmt::format("rgb(255,{},{})", fade, fade) : fmt::format("rgb({},{},255)", fade, fade);
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

HeatmapPanel heatmap_panel(const std::string& title, const LoadMatrix& load, const Placement& p) {
  HeatmapPanel panel{title, {}};
  for (int64_t l = 0; l < load.layers; ++l) {
    std::vector<double> dev = device_loads(p.layers[size_t(l)], p.devices(), load.row(l), load.experts);
    double mean = 0;
    for (double v : dev) mean += v;
    mean /= double(dev.size());
    for (double& v : dev) v = mean > 0 ? v / mean : 1.0;
    panel.ratio.push_back(std::move(dev));
  }
  return panel;
}

std::string heatmap_svg(const std::string& title, const std::vector<HeatmapPanel>& panels) {
  const size_t layers = panels.empty() ? 0 : panels[0].ratio.size();
  const size_t devices = layers ? panels[0].ratio[0].size() : 0;
  const double cell_w = std::max(2.0, 480.0 / double(std::max<size_t>(devices, 1)));
  const double cell_h = std::max(2.0, 480.0 / double(std::max<size_t>(layers, 1)));
  const double panel_w = cell_w * double(devices), panel_h = cell_h * double(layers);
  const double left = 50, top = 60, gap = 40;
  const double width = left + double(panels.size()) * (panel_w + gap), height = top + panel_h + 70;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0f}\" height=\"{:.0f}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"{}\" y=\"20\" font-size=\"15\">{}</text>\n",
      width, height, left, escape(title));
  for (size_t k = 0; k < panels.size(); ++k) {
    const HeatmapPanel& panel = panels[k];
    const double x0 = left + double(k) * (panel_w + gap);
    double peak = 0;
    for (const auto& row : panel.ratio) peak += *std::max_element(row.begin(), row.end());
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">{} (mean layer peak {:.2f}x mean)</text>\n", x0, top - 8,
                       escape(panel.title), layers ? peak / double(layers) : 0.0);
    for (size_t l = 0; l < panel.ratio.size(); ++l) {
      for (size_t d = 0; d < panel.ratio[l].size(); ++d) {
        svg += fmt::format("<rect x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"{}\"><title>layer {} device {}: {:.3f}</title></rect>\n",
                           x0 + double(d) * cell_w, top + double(l) * cell_h, cell_w, cell_h, colour(panel.ratio[l][d]), l, d,
                           panel.ratio[l][d]);
      }
    }
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#444\"/>\n", x0, top,
                       panel_w, panel_h);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\">devices 0..{} (columns), layers 0..{} (rows)</text>\n", x0,
                       top + panel_h + 16, devices ? devices - 1 : 0, layers ? layers - 1 : 0);
  }
  const double ly = top + panel_h + 34;
  const double stops[] = {0.0, 0.5, 1.0, 1.5, 2.0};
  for (size_t i = 0; i < 5; ++i) {
    svg += fmt::format("<rect x=\"{:.0f}\" y=\"{:.0f}\" width=\"14\" height=\"14\" fill=\"{}\" stroke=\"#888\"/><text x=\"{:.0f}\" y=\"{:.0f}\">{:.1f}x</text>\n",
                       left + double(i) * 70, ly, colour(stops[i]), left + double(i) * 70 + 18, ly + 12, stops[i]);
  }
  svg += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\">device load / layer mean</text>\n</svg>\n", left + 360, ly + 12);
  return svg;
}

}  // namespace moe::placement
