#include "loadgen/report.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <ctime>

namespace moe::loadgen {

namespace {

struct Metric {
  const char* key;      // in JSON keys: mean_<key>_ms
  const char* label;    // in table rows: Mean <label> (ms)
  const char* heading;  // the table section's title
  const Distribution Summary::*field;
};

constexpr Metric kMetrics[] = {
    {"ttft", "TTFT", "Time to First Token", &Summary::ttft_ms},
    {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", &Summary::tpot_ms},
    {"itl", "ITL", "Inter-token Latency", &Summary::itl_ms},
    {"e2el", "E2EL", "End-to-end Latency", &Summary::e2el_ms},
};

void row(std::string& out, std::string_view label, std::string_view value) {
  out += fmt::format("{:<40} {:<10}\n", label, value);
}

std::string num(double v) { return fmt::format("{:.2f}", v); }

std::string rate_text(double rate) { return std::isinf(rate) ? "inf" : num(rate); }

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

std::string percentile_name(double p) {
  return p == std::floor(p) ? fmt::format("{}", int64_t(p)) : fmt::format("{}", p);
}

std::string format_table(const Summary& s, const RunInfo& info) {
  std::string out = fmt::format("{:=^50}\n", " Serving Benchmark Result ");
  row(out, "Successful requests:", std::to_string(s.completed));
  row(out, "Failed requests:", std::to_string(s.failed));
  if (info.max_concurrency > 0) row(out, "Maximum request concurrency:", std::to_string(info.max_concurrency));
  row(out, "Request rate configured (RPS):", rate_text(info.request_rate));
  row(out, "Benchmark duration (s):", num(s.duration_s));
  row(out, "Total input tokens:", std::to_string(s.total_input_tokens));
  row(out, "Total generated tokens:", std::to_string(s.total_output_tokens));
  row(out, "Request throughput (req/s):", num(s.request_throughput));
  if (s.good_requests) {
    row(out, "Request goodput (req/s):", num(s.request_goodput));
    row(out, "Requests meeting all SLOs (%):", num(100.0 * s.goodput_fraction));
  }
  row(out, "Output token throughput (tok/s):", num(s.output_throughput));
  row(out, "Peak output token throughput (tok/s):", num(s.peak_output_throughput));
  row(out, "Peak concurrent requests:", std::to_string(s.peak_concurrent_requests));
  row(out, "Total token throughput (tok/s):", num(s.total_token_throughput));
  if (s.total_draft_tokens > 0) {
    row(out, "Drafted tokens:", std::to_string(s.total_draft_tokens));
    row(out, "Draft acceptance rate (%):", num(100.0 * double(s.total_accepted_draft_tokens) / double(s.total_draft_tokens)));
  }
  for (const Metric& m : kMetrics) {
    const Distribution& d = s.*m.field;
    out += fmt::format("{:-^50}\n", m.heading);
    row(out, fmt::format("Mean {} (ms):", m.label), num(d.mean));
    row(out, fmt::format("Median {} (ms):", m.label), num(d.median));
    for (const auto& [p, v] : d.percentiles) row(out, fmt::format("P{} {} (ms):", percentile_name(p), m.label), num(v));
  }
  out += std::string(50, '=') + "\n";
  return out;
}

nlohmann::ordered_json to_json(const Summary& s, const RunInfo& info, const std::vector<RequestResult>& results,
                               bool per_request) {
  nlohmann::ordered_json j;
  j["date"] = utc_now();
  j["backend"] = "openai";
  j["base_url"] = info.base_url;
  j["endpoint"] = info.endpoint;
  j["model_id"] = info.model;
  j["dataset"] = info.dataset;
  j["num_prompts"] = info.num_prompts;
  if (std::isinf(info.request_rate)) {
    j["request_rate"] = "inf";
  } else {
    j["request_rate"] = info.request_rate;
  }
  j["burstiness"] = info.burstiness;
  j["max_concurrency"] = info.max_concurrency > 0 ? nlohmann::ordered_json(info.max_concurrency) : nullptr;
  j["duration"] = s.duration_s;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["total_input_tokens"] = s.total_input_tokens;
  j["total_output_tokens"] = s.total_output_tokens;
  j["request_throughput"] = s.request_throughput;
  j["request_goodput"] = s.good_requests ? nlohmann::ordered_json(s.request_goodput) : nullptr;
  j["good_requests"] = s.good_requests ? nlohmann::ordered_json(*s.good_requests) : nullptr;
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  j["spec_decode_draft_tokens"] = s.total_draft_tokens;
  j["spec_decode_accepted_tokens"] = s.total_accepted_draft_tokens;
  j["spec_decode_acceptance_rate"] =
      s.total_draft_tokens > 0 ? nlohmann::ordered_json(double(s.total_accepted_draft_tokens) / double(s.total_draft_tokens)) : nullptr;
  j["max_output_tokens_per_s"] = s.peak_output_throughput;
  j["max_concurrent_requests"] = s.peak_concurrent_requests;
  for (const Metric& m : kMetrics) {
    const Distribution& d = s.*m.field;
    j[fmt::format("mean_{}_ms", m.key)] = d.mean;
    j[fmt::format("median_{}_ms", m.key)] = d.median;
    j[fmt::format("std_{}_ms", m.key)] = d.stddev;
    for (const auto& [p, v] : d.percentiles) j[fmt::format("p{}_{}_ms", percentile_name(p), m.key)] = v;
  }
  if (per_request) {
    auto& input_lens = j["input_lens"] = nlohmann::ordered_json::array();
    auto& output_lens = j["output_lens"] = nlohmann::ordered_json::array();
    auto& starts = j["start_times"] = nlohmann::ordered_json::array();
    auto& ttfts = j["ttfts"] = nlohmann::ordered_json::array();
    auto& itls = j["itls"] = nlohmann::ordered_json::array();
    auto& e2els = j["e2els"] = nlohmann::ordered_json::array();
    auto& texts = j["generated_texts"] = nlohmann::ordered_json::array();
    auto& errors = j["errors"] = nlohmann::ordered_json::array();
    for (const RequestResult& r : results) {
      input_lens.push_back(r.prompt_tokens);
      output_lens.push_back(r.output_tokens);
      starts.push_back(r.start_s);
      ttfts.push_back(r.ttft_s);
      itls.push_back(r.itl_s);
      e2els.push_back(r.e2e_s);
      texts.push_back(r.generated_text);
      errors.push_back(r.error);
    }
  }
  return j;
}

}  // namespace moe::loadgen
