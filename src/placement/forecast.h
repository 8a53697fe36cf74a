#pragma once
// The loads a plan is made for: a forecast of the next window from the planning window.
//
// Expert popularity drifts (the hot set turns over and neighbours in rank swap places), so
// recent steps predict the next window better than the window mean; but a short memory
// also keeps more per-step noise. Each layer therefore weighs its steps by
// exp(-age / tau) and picks tau by a backtest inside the window: the steps before its last
// quarter forecast that last quarter, and the tau with the smallest squared error wins
// (squared, so the heavy experts that set the peak dominate). One-step spikes (bursts of
// similar requests) are clipped first: a short memory would otherwise plan for a burst
// that is already over. Weights sum to the window's step count, so loads keep the window's
// scale less the clipped spikes.
#include "placement/trace.h"

namespace moe::placement {

// Candidate memories in steps; 0 is the plain window sum.
inline constexpr double kForecastTaus[] = {2, 4, 8, 16, 0};

// f64 [layers, experts]; the window must have at least 4 steps for the backtest, else
// (and for a layer the backtest cannot tell apart) the plain window sum.
LoadMatrix forecast_load(const Trace& trace, Window window);

// How far the window's steps stray from a forecast: per layer and expert, the root mean
// square of (step load - forecast / steps) over the window's steps, times the step count
// (the forecast's scale). Level changes, bursts and sampling noise all count: each is a
// way the next window's steps can miss the forecast. f64 [layers, experts].
LoadMatrix forecast_deviation(const Trace& trace, Window window, const LoadMatrix& forecast);

}  // namespace moe::placement
