#include "placement/trace.h"

#include <cmath>

#include "core/error.h"

namespace moe::placement {

void check_trace(const Trace& trace, const std::string& source) {
  if (trace.steps <= 0 || trace.layers <= 0 || trace.experts <= 0) {
    fail("{}: a load trace needs steps, layers and experts all > 0, got [{}, {}, {}]", source, trace.steps, trace.layers,
         trace.experts);
  }
  if (trace.load.size() != size_t(trace.steps * trace.layers * trace.experts)) {
    fail("{}: {} loads for shape [{}, {}, {}]", source, trace.load.size(), trace.steps, trace.layers, trace.experts);
  }
  for (size_t i = 0; i < trace.load.size(); ++i) {
    const float v = trace.load[i];
    if (std::isfinite(v) && v >= 0) continue;
    const int64_t e = int64_t(i) % trace.experts, l = int64_t(i) / trace.experts % trace.layers;
    const int64_t t = int64_t(i) / (trace.experts * trace.layers);
    fail("{}: load at step {}, layer {}, expert {} is {}; loads must be finite and >= 0", source, t, l, e, v);
  }
}

Trace read_trace(const std::string& path) { return trace_from_npy(read_npy(path), path); }

Trace trace_from_npy(NpyArray a, const std::string& source) {
  if (a.shape.size() != 3) {
    fail("{}: a load trace is a 3-D array [steps, layers, experts], this one has {} dimensions", source, a.shape.size());
  }
  Trace t{a.shape[0], a.shape[1], a.shape[2], std::move(a.data)};
  check_trace(t, source);
  return t;
}

void write_trace(const std::string& path, const Trace& trace) {
  check_trace(trace, path);
  write_npy_f32(path, {trace.steps, trace.layers, trace.experts}, trace.load.data());
}

Window parse_window(const std::string& text, const std::string& what) {
  const size_t colon = text.find(':');
  if (colon == std::string::npos) fail("{} '{}': expected A:B (steps A to B-1)", what, text);
  Window w;
  try {
    size_t used = 0;
    const std::string a = text.substr(0, colon), b = text.substr(colon + 1);
    w.begin = std::stoll(a, &used);
    if (used != a.size()) throw std::invalid_argument(a);
    w.end = std::stoll(b, &used);
    if (used != b.size()) throw std::invalid_argument(b);
  } catch (const std::exception&) {
    fail("{} '{}': expected A:B with integer steps", what, text);
  }
  return w;
}

void check_window(const Trace& trace, Window w, const std::string& what) {
  if (w.begin < 0 || w.end <= w.begin || w.end > trace.steps) {
    fail("{} {}:{} is not a non-empty range of steps within the trace's {} steps", what, w.begin, w.end, trace.steps);
  }
}

LoadMatrix window_load(const Trace& trace, Window w) {
  LoadMatrix m{trace.layers, trace.experts, std::vector<double>(size_t(trace.layers * trace.experts), 0.0)};
  for (int64_t t = w.begin; t < w.end; ++t) {
    const float* src = trace.row(t, 0);
    for (size_t i = 0; i < m.load.size(); ++i) m.load[i] += src[i];
  }
  return m;
}

}  // namespace moe::placement
