#include "sim/workload.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "config/yaml_fields.h"
#include "core/error.h"

namespace moe::sim {

namespace {

// "2026-12-04T10:20:31Z" as seconds since the epoch (UTC).
double iso_seconds(const std::string& s, const std::string& where) {
  std::tm tm{};
  std::istringstream in(s);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) fail("{}: received \"{}\" is not a time as YYYY-MM-DDTHH:MM:SSZ", where, s);
  return double(timegm(&tm));
}

int64_t count_of(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) return 0;
  if (!j[key].is_number_integer() || j[key].get<int64_t>() < 0) fail("{}: {} must be a count of tokens", where, key);
  return j[key].get<int64_t>();
}

std::vector<TracedRequest> from_result_file(const nlohmann::json& j, const std::string& path) {
  for (const char* key : {"start_times", "input_lens", "output_lens"})
    if (!j.contains(key) || !j[key].is_array())
      fail("{}: a bench serve result file needs {} (run bench serve with --save-detailed)", path, key);
  const auto& t = j["start_times"];
  const auto& in = j["input_lens"];
  const auto& out = j["output_lens"];
  if (in.size() != t.size() || out.size() != t.size())
    fail("{}: start_times, input_lens and output_lens differ in length", path);
  std::vector<TracedRequest> r;
  for (size_t i = 0; i < t.size(); ++i) {
    if (!t[i].is_number() || !in[i].is_number_integer() || !out[i].is_number_integer())
      fail("{}: entry {} of start_times, input_lens or output_lens is not a number", path, i);
    r.push_back({t[i].get<double>(), in[i].get<int64_t>(), out[i].get<int64_t>()});
  }
  return r;
}

}  // namespace

std::vector<TracedRequest> read_request_trace(const std::string& path) {
  const std::string text = config::read_file(path, "request trace");
  std::vector<TracedRequest> r;
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) fail("{}: the request trace is empty", path);
  bool whole_file = false;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (j.is_object() && j.contains("start_times")) {
      r = from_result_file(j, path);
      whole_file = true;
    }
  } catch (const nlohmann::json::exception&) {
  }
  if (!whole_file) {
    std::istringstream in(text);
    size_t line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = fmt::format("{}:{}", path, line_no);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        fail("{}: not a JSON line of an access log: {}", where, e.what());
      }
      if (!j.is_object()) fail("{}: an access log line must be a JSON object", where);
      TracedRequest t;
      if (j.contains("received_s") && j["received_s"].is_number()) t.arrival_s = j["received_s"].get<double>();
      else if (j.contains("received") && j["received"].is_string()) t.arrival_s = iso_seconds(j["received"], where);
      else fail("{}: the line has no received_s or received time", where);
      t.prompt_tokens = count_of(j, "prompt_tokens", where);
      t.output_tokens = count_of(j, "output_tokens", where);
      r.push_back(t);
    }
  }
  if (r.empty()) fail("{}: the request trace holds no requests", path);
  std::stable_sort(r.begin(), r.end(), [](const TracedRequest& a, const TracedRequest& b) { return a.arrival_s < b.arrival_s; });
  const double t0 = r.front().arrival_s;
  for (TracedRequest& t : r) t.arrival_s -= t0;
  return r;
}

WorkloadGenerator::WorkloadGenerator(const Workload& workload, std::vector<TracedRequest> trace)
    : w_(workload), trace_(std::move(trace)), rng_(workload.seed) {
  if (w_.arrival.kind == Arrival::Kind::trace && trace_.empty()) fail("workload.arrival.trace: no requests in the trace");
}

int64_t WorkloadGenerator::draw(const Lengths& l, int64_t traced) {
  switch (l.kind) {
    case Lengths::Kind::fixed:
      return int64_t(std::llround(l.a));
    case Lengths::Kind::uniform:
      return std::uniform_int_distribution<int64_t>(int64_t(std::llround(l.a)), int64_t(std::llround(l.b)))(rng_);
    case Lengths::Kind::lognormal: {
      // mean is the distribution's own mean: mu = log(mean) - sigma^2 / 2.
      std::lognormal_distribution<double> d(std::log(l.a) - l.b * l.b / 2, l.b);
      return std::max<int64_t>(1, int64_t(std::llround(d(rng_))));
    }
    case Lengths::Kind::trace:
      if (traced < 1) fail("the request trace has no token counts; give workload.prompt_tokens and output_tokens");
      return traced;
  }
  return 1;
}

void WorkloadGenerator::fill(RequestSpec& s, const TracedRequest* traced) {
  s.prompt_tokens = draw(w_.prompt_tokens, traced ? traced->prompt_tokens : 0);
  s.output_tokens = draw(w_.output_tokens, traced ? traced->output_tokens : 0);
  s.cached_tokens = 0;
  s.prefix_group = -1;
  if (w_.prefix_hit_rate > 0) {
    s.cached_tokens = std::min<int64_t>(s.prompt_tokens - 1, int64_t(std::llround(w_.prefix_hit_rate * double(s.prompt_tokens))));
  } else if (w_.prefix_groups > 0) {
    s.prefix_group = std::uniform_int_distribution<int32_t>(0, w_.prefix_groups - 1)(rng_);
    s.prompt_tokens += w_.prefix_tokens;
  }
  ++issued_;
}

bool WorkloadGenerator::more(double at) const {
  if (w_.requests > 0 && issued_ >= w_.requests) return false;
  if (w_.duration_s > 0 && at >= w_.duration_s) return false;
  return true;
}

bool WorkloadGenerator::next_arrival(RequestSpec& s) {
  if (w_.arrival.kind == Arrival::Kind::trace) {
    if (size_t(issued_) >= trace_.size()) return false;
    const TracedRequest& t = trace_[size_t(issued_)];
    if (!more(t.arrival_s)) return false;
    s.arrival_s = t.arrival_s;
    fill(s, &t);
    return true;
  }
  const double rate = w_.arrival.rate;
  double gap = 0;
  if (w_.arrival.kind == Arrival::Kind::poisson) {
    gap = std::exponential_distribution<double>(rate)(rng_);
  } else {
    // Gamma gaps of mean 1 / rate and coefficient of variation cv: shape 1 / cv^2.
    const double shape = 1 / (w_.arrival.cv * w_.arrival.cv);
    gap = std::gamma_distribution<double>(shape, 1 / (rate * shape))(rng_);
  }
  const double at = clock_ + gap;
  if (!more(at)) return false;
  clock_ = at;
  s.arrival_s = at;
  fill(s, nullptr);
  return true;
}

bool WorkloadGenerator::next_closed(double now, RequestSpec& s) {
  if (!more(now)) return false;
  const TracedRequest* traced = nullptr;
  if (!trace_.empty()) {
    if (size_t(issued_) >= trace_.size()) return false;
    traced = &trace_[size_t(issued_)];
  }
  // A pause, however short, breaks the ties of clients answered in the same step, as the
  // network and the server's request handling do.
  const double think = w_.arrival.think_s;
  s.arrival_s = now + (think > 0 ? std::exponential_distribution<double>(1 / think)(rng_) : 0.0);
  fill(s, traced);
  return true;
}

}  // namespace moe::sim
