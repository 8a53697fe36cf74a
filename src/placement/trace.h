#pragma once
// Expert load traces: tokens routed to each logical expert, per step and MoE layer.
//   load  f32 [steps, layers, experts]  (the .npy layout written by gen-trace)
// Loads are counts (or any non-negative weights); a token's load on an expert is split
// evenly over the expert's replicas when a placement is scored.
#include <cstdint>
#include <string>
#include <vector>

#include "core/npy.h"

namespace moe::placement {

struct Trace {
  int64_t steps = 0, layers = 0, experts = 0;
  std::vector<float> load;  // f32 [steps, layers, experts]

  float at(int64_t t, int64_t l, int64_t e) const { return load[size_t((t * layers + l) * experts + e)]; }
  const float* row(int64_t t, int64_t l) const { return load.data() + (t * layers + l) * experts; }
};

// Throws moe::Error naming `source` for a shape that does not match the data, an empty
// dimension, or a negative or non-finite load.
void check_trace(const Trace& trace, const std::string& source);
Trace read_trace(const std::string& path);
// A trace from a parsed .npy (read_npy or parse_npy), checked as above.
Trace trace_from_npy(NpyArray a, const std::string& source);
void write_trace(const std::string& path, const Trace& trace);

// Steps [begin, end): checked against the trace, with `what` naming the option in errors.
struct Window {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
Window parse_window(const std::string& text, const std::string& what);
void check_window(const Trace& trace, Window w, const std::string& what);

// Loads summed over a window of steps: f64 [layers, experts].
struct LoadMatrix {
  int64_t layers = 0, experts = 0;
  std::vector<double> load;  // f64 [layers, experts]

  double at(int64_t l, int64_t e) const { return load[size_t(l * experts + e)]; }
  const double* row(int64_t l) const { return load.data() + l * experts; }
};
LoadMatrix window_load(const Trace& trace, Window w);

}  // namespace moe::placement
