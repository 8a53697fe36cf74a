#include "core/prometheus.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace moe {

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end())) throw std::invalid_argument("histogram bounds must be sorted");
}

void Histogram::observe(double value) {
  const size_t i = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin());
  ++counts_[i];
  ++count_;
  sum_ += value;
}

uint64_t Histogram::cumulative(size_t i) const {
  uint64_t n = 0;
  for (size_t j = 0; j <= i; ++j) n += counts_[j];
  return n;
}

namespace {

// Label values escape backslash, double quote and newline.
std::string escape_label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

PrometheusText::PrometheusText(const std::string& model_name) : labels_("model_name=\"" + escape_label(model_name) + "\"") {}

void PrometheusText::histogram(const char* name, const char* help, const Histogram& h) {
  head(name, help, "histogram");
  for (size_t i = 0; i < h.bounds().size(); ++i) {
    out_ += fmt::format("moengine:{}_bucket{{{},le=\"{}\"}} {}\n", name, labels_, h.bounds()[i], h.cumulative(i));
  }
  out_ += fmt::format("moengine:{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels_, h.count());
  out_ += fmt::format("moengine:{}_sum{{{}}} {}\n", name, labels_, h.sum());
  out_ += fmt::format("moengine:{}_count{{{}}} {}\n", name, labels_, h.count());
}

void PrometheusText::labelled_counter(const char* name, const char* help, const char* label,
                                      const std::vector<std::pair<std::string, double>>& values) {
  head(name, help, "counter");
  for (const auto& [value, n] : values) {
    out_ += fmt::format("moengine:{}{{{},{}=\"{}\"}} {}\n", name, labels_, label, escape_label(value), n);
  }
}

void PrometheusText::samples(const char* name, const char* help, const char* type,
                             const std::vector<std::pair<Labels, double>>& values) {
  head(name, help, type);
  for (const auto& [labels, v] : values) {
    std::string all = labels_;
    for (const auto& [key, value] : labels) all += fmt::format(",{}=\"{}\"", key, escape_label(value));
    out_ += fmt::format("moengine:{}{{{}}} {}\n", name, all, v);
  }
}

void PrometheusText::head(const char* name, const char* help, const char* type) {
  out_ += fmt::format("# HELP moengine:{} {}\n# TYPE moengine:{} {}\n", name, help, name, type);
}

void PrometheusText::scalar(const char* name, const char* help, const char* type, double v) {
  head(name, help, type);
  out_ += fmt::format("moengine:{}{{{}}} {}\n", name, labels_, v);
}

}  // namespace moe
