#pragma once
// Prometheus metrics: histograms with fixed buckets, and the text exposition format
// (version 0.0.4) that /metrics serves. Shared by the engine's server and the proxy.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace moe {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);

  const std::vector<double>& bounds() const { return bounds_; }
  // Observations <= bounds()[i] (cumulative, as Prometheus buckets are); the +Inf bucket
  // is count().
  uint64_t cumulative(size_t i) const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last one is +Inf
  uint64_t count_ = 0;
  double sum_ = 0.0;
};

// Writes metrics in the Prometheus text exposition format (version 0.0.4), every name
// prefixed with "moengine:" and labelled with model_name.
class PrometheusText {
 public:
  explicit PrometheusText(const std::string& model_name);

  void gauge(const char* name, const char* help, double v) { scalar(name, help, "gauge", v); }
  void counter(const char* name, const char* help, double v) { scalar(name, help, "counter", v); }
  void histogram(const char* name, const char* help, const Histogram& h);
  // One counter with one more label, a sample per (label value, count).
  void labelled_counter(const char* name, const char* help, const char* label,
                        const std::vector<std::pair<std::string, double>>& values);

  // One metric of `type` ("counter", "gauge") with labels of its own on each sample.
  using Labels = std::vector<std::pair<std::string, std::string>>;
  void samples(const char* name, const char* help, const char* type, const std::vector<std::pair<Labels, double>>& values);

  std::string take() { return std::move(out_); }

 private:
  void head(const char* name, const char* help, const char* type);
  void scalar(const char* name, const char* help, const char* type, double v);

  std::string labels_;
  std::string out_;
};

}  // namespace moe
