#include "sim/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace moe::sim {

namespace {

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

// A round step giving about five ticks over [lo, hi].
double tick_step(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

}  // namespace

std::string line_chart_svg(const std::string& title, const std::string& x_label, const std::string& y_label,
                           const std::vector<Series>& series) {
  constexpr double W = 720, H = 440, L = 80, R = 180, T = 40, B = 60;
  double x0 = std::numeric_limits<double>::max(), x1 = -x0, y1 = 0;
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      x0 = std::min(x0, s.x[i]);
      x1 = std::max(x1, s.x[i]);
      y1 = std::max(y1, s.y[i]);
    }
  if (x0 > x1) x0 = 0, x1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  if (y1 <= 0) y1 = 1;
  y1 *= 1.05;
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - y / y1 * (H - T - B); };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"24\" font-size=\"15\">{}</text>\n",
      W, H, L, escape(title));
  svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", L, H - B, W - R, H - B);
  svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n", L, T, L, H - B);
  const double xs = tick_step(x0, x1), ys = tick_step(0, y1);
  for (double x = std::ceil(x0 / xs) * xs; x <= x1 + 1e-9 * xs; x += xs)
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"black\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4:g}</text>\n",
                       px(x), H - B, H - B + 5, H - B + 18, x);
  for (double y = 0; y <= y1 + 1e-9 * ys; y += ys)
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
                       "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5:g}</text>\n",
                       L, py(y), W - R, L - 6, py(y) + 4, y);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (L + W - R) / 2, H - 20, escape(x_label));
  svg += fmt::format("<text transform=\"translate(20,{}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n", (T + H - B) / 2,
                     escape(y_label));
  static const char* colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    const char* color = colors[k % 8];
    std::string points;
    for (size_t i = 0; i < s.x.size(); ++i) points += fmt::format("{:.1f},{:.1f} ", px(s.x[i]), py(s.y[i]));
    svg += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n", color, points);
    for (size_t i = 0; i < s.x.size(); ++i)
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"/>\n", px(s.x[i]), py(s.y[i]), color);
    svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                       W - R + 12, T + 20 * double(k), color, W - R + 30, T + 20 * double(k) + 11, escape(s.label));
  }
  return svg + "</svg>\n";
}

}  // namespace moe::sim
