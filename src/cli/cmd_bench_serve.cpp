// moengine bench serve: a load generator for OpenAI-compatible servers, modelled on
// `vllm bench serve`. It streams every request and reports throughput and latency (TTFT,
// TPOT, ITL, E2EL) the way vLLM does, so numbers from either tool compare.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/progress.h"
#include "core/error.h"
#include "loadgen/benchmark.h"
#include "loadgen/report.h"
#include "loadgen/shared_prefix_dataset.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer.h"

namespace moe::cli {
namespace {

using namespace moe::loadgen;

struct BenchServeArgs {
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint = "/v1/completions";
  std::string model;
  std::string api_key;
  std::string dataset = "random";
  std::string dataset_path;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  double range_ratio = 0;
  std::string random_prompt;  // ids | words; default by endpoint
  int64_t vocab_size = 256;
  std::string tokenizer;
  // generated-shared-prefix; the defaults are SGLang's where it has the option.
  size_t gsp_num_groups = 64;
  int64_t gsp_system_prompt_len = 2048;
  int64_t gsp_question_len = 128;
  double gsp_question_range_ratio = 0;
  int64_t gsp_long_question_len = 0;
  double gsp_long_question_fraction = 0;
  double gsp_zipf = 0;
  size_t num_prompts = 100;
  std::string request_rate = "inf";
  double burstiness = 1;
  size_t max_concurrency = 0;
  std::vector<std::string> goodput;
  std::string percentiles = "99";
  uint64_t seed = 0;
  bool ignore_eos = false;
  double temperature = 0;
  std::string extra_body;
  double timeout_s = 600;
  double ready_timeout_s = 0;
  bool json = false;
  bool save_detailed = false;
  std::string result_file;
  // Whether the user gave these, for defaults that depend on other flags.
  const CLI::Option* ignore_eos_opt = nullptr;
  const CLI::Option* output_len_opt = nullptr;
  const CLI::Option* vocab_size_opt = nullptr;
};

double parse_rate(const std::string& text) {
  if (text == "inf") return std::numeric_limits<double>::infinity();
  size_t used = 0;
  double r = 0;
  try {
    r = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !(r > 0) || std::isinf(r))
    fail("--request-rate must be a positive number of requests per second or 'inf' (got '{}')", text);
  return r;
}

std::vector<double> parse_percentiles(const std::string& text) {
  std::vector<double> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    double p = -1;
    try {
      p = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || !(p > 0 && p < 100))
      fail("--percentiles: '{}' is not a percentile between 0 and 100 (exclusive); example: --percentiles 50,90,99",
           item);
    out.push_back(p);
  }
  return out;
}

std::vector<SampleRequest> make_dataset(const BenchServeArgs& a, Endpoint endpoint, const Tokenizer* tok) {
  const TokenCounter count = tok ? TokenCounter([tok](std::string_view s) { return int64_t(tok->encode(s).size()); })
                                 : TokenCounter(estimate_tokens);
  if (a.dataset == "random") {
    RandomDatasetOptions o;
    o.num_prompts = a.num_prompts;
    o.input_len = a.input_len;
    o.output_len = a.output_len;
    o.range_ratio = a.range_ratio;
    const std::string form = a.random_prompt.empty()
                                 ? (endpoint == Endpoint::Completions ? "ids" : "words")
                                 : a.random_prompt;
    if (form == "ids" && endpoint == Endpoint::ChatCompletions)
      fail("--random-prompt ids needs --endpoint /v1/completions: the chat endpoint takes text");
    o.token_ids = form == "ids";
    o.vocab_size = tok && a.vocab_size_opt->count() == 0 ? tok->n_vocab() : a.vocab_size;
    o.seed = a.seed;
    std::vector<SampleRequest> reqs = random_dataset(o);
    if (!o.token_ids && tok)
      for (SampleRequest& r : reqs) r.prompt_len = count(r.prompt_text);
    return reqs;
  }
  if (a.dataset == "sharegpt") {
    if (a.dataset_path.empty()) fail("--dataset sharegpt needs --dataset-path FILE (a ShareGPT JSON file)");
    ShareGptOptions o;
    o.num_prompts = a.num_prompts;
    if (a.output_len_opt->count() > 0) o.output_len = a.output_len;
    o.seed = a.seed;
    o.count_tokens = count;
    ShareGptDataset d = load_sharegpt(a.dataset_path, o);
    if (d.usable < a.num_prompts)
      std::fprintf(stderr, "note: %s has %zu usable conversations; %zu prompts repeat some of them\n",
                   a.dataset_path.c_str(), d.usable, a.num_prompts);
    return std::move(d.requests);
  }
  if (a.dataset == "generated-shared-prefix") {
    if (endpoint == Endpoint::ChatCompletions)
      fail("--dataset generated-shared-prefix sends token ids and needs --endpoint /v1/completions");
    SharedPrefixOptions o;
    o.num_prompts = a.num_prompts;
    o.num_groups = a.gsp_num_groups;
    o.system_prompt_len = a.gsp_system_prompt_len;
    o.question_len = a.gsp_question_len;
    o.question_range_ratio = a.gsp_question_range_ratio;
    o.long_question_len = a.gsp_long_question_len;
    o.long_question_fraction = a.gsp_long_question_fraction;
    o.output_len = a.output_len;
    o.zipf_exponent = a.gsp_zipf;
    o.vocab_size = tok && a.vocab_size_opt->count() == 0 ? tok->n_vocab() : a.vocab_size;
    o.seed = a.seed;
    const std::vector<size_t> counts = shared_prefix_group_counts(o.num_prompts, o.num_groups, o.zipf_exponent);
    fmt::print(stderr, "generated-shared-prefix: {} groups of {}-token system prompts; requests per group: {}\n",
               o.num_groups, o.system_prompt_len, fmt::join(counts, " "));
    return std::move(shared_prefix_dataset(o).requests);
  }
  fail("unknown --dataset '{}' (random, sharegpt, generated-shared-prefix)", a.dataset);
}

void warn_about(const std::vector<RequestResult>& results, const std::vector<SampleRequest>& reqs, bool ignore_eos) {
  size_t failed = 0, short_answers = 0;
  const std::string* first_error = nullptr;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].success) {
      ++failed;
      if (!first_error) first_error = &results[i].error;
    } else if (ignore_eos && results[i].output_tokens != reqs[i].output_len) {
      ++short_answers;
    }
  }
  if (failed > 0)
    std::fprintf(stderr, "warning: %zu of %zu requests failed; the first error: %s\n", failed, results.size(),
                 first_error->c_str());
  if (short_answers > 0)
    std::fprintf(stderr,
                 "warning: %zu completed requests did not generate exactly max_tokens tokens although ignore_eos "
                 "was sent (does the server support ignore_eos?)\n",
                 short_answers);
}

void run(const BenchServeArgs& a) {
  if (a.num_prompts < 1) fail("--num-prompts must be at least 1");
  if (!(a.timeout_s > 0)) fail("--timeout must be positive");
  if (a.ready_timeout_s < 0) fail("--ready-timeout must not be negative");
  const Endpoint endpoint = parse_endpoint(a.endpoint);
  const std::vector<double> percentiles = parse_percentiles(a.percentiles);
  const Slo slo = parse_slo(a.goodput);

  BenchmarkOptions o;
  o.base_url = a.base_url;
  o.endpoint = endpoint;
  o.request.model = a.model;
  o.request.ignore_eos = a.ignore_eos_opt->count() > 0 ? a.ignore_eos : a.dataset != "sharegpt";
  o.request.temperature = a.temperature;
  if (!a.extra_body.empty()) {
    o.request.extra_body = nlohmann::json::parse(a.extra_body, nullptr, false);
    if (!o.request.extra_body.is_object()) fail("--extra-body must be a JSON object, e.g. '{{\"top_k\": 1}}'");
  }
  o.api_key = a.api_key;
  if (o.api_key.empty())
    if (const char* env = std::getenv("OPENAI_API_KEY")) o.api_key = env;
  o.request_rate = parse_rate(a.request_rate);
  o.burstiness = a.burstiness;
  o.max_concurrency = a.max_concurrency;
  o.seed = a.seed;
  o.timeout = std::chrono::milliseconds(int64_t(a.timeout_s * 1e3));
  o.ready_timeout_s = a.ready_timeout_s;
  parse_url(a.base_url);

  std::unique_ptr<Tokenizer> tok;
  if (!a.tokenizer.empty()) tok = std::make_unique<Tokenizer>(load_tokenizer(a.tokenizer));
  const std::vector<SampleRequest> requests = make_dataset(a, endpoint, tok.get());

  std::fprintf(stderr, "bench serve: %zu %s requests to %s%s, request rate %s, max concurrency %s%s\n",
               requests.size(), a.dataset.c_str(), a.base_url.c_str(), a.endpoint.c_str(), a.request_rate.c_str(),
               a.max_concurrency ? std::to_string(a.max_concurrency).c_str() : "none",
               a.ready_timeout_s > 0 ? fmt::format(" (waiting up to {} s for the server)", a.ready_timeout_s).c_str()
                                     : "");
  ProgressBar bar("bench serve");
  const BenchmarkRun run = run_benchmark(o, requests, [&](size_t done, size_t total) {
    bar.update(double(done) / double(total), fmt::format("{}/{} requests", done, total));
  });
  bar.done(fmt::format("{} requests in {:.1f} s", requests.size(), run.duration_s));
  warn_about(run.results, requests, o.request.ignore_eos);

  const Summary summary = summarize(run.results, run.duration_s, percentiles, slo);
  RunInfo info;
  info.base_url = a.base_url;
  info.endpoint = a.endpoint;
  info.model = run.model;
  info.dataset = a.dataset;
  info.num_prompts = requests.size();
  info.request_rate = o.request_rate;
  info.burstiness = a.burstiness;
  info.max_concurrency = a.max_concurrency;
  info.percentiles = percentiles;
  const auto dump = [](const nlohmann::ordered_json& j) {
    return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (!a.result_file.empty()) {
    std::ofstream out(a.result_file);
    if (!out) fail("cannot write --result-file '{}'", a.result_file);
    out << dump(to_json(summary, info, run.results, a.save_detailed)) << "\n";
    if (!out) fail("cannot write --result-file '{}'", a.result_file);
  }
  if (a.json) {
    std::printf("%s\n", dump(to_json(summary, info, run.results, a.save_detailed)).c_str());
  } else {
    std::fputs(format_table(summary, info).c_str(), stdout);
  }
}

}  // namespace

void register_bench_serve(CLI::App& bench) {
  auto a = std::make_shared<BenchServeArgs>();
  CLI::App* cmd = bench.add_subcommand("serve", "Load-test an OpenAI-compatible server, like `vllm bench serve`");
  cmd->footer(
      "Example:\n"
      "  moengine serve --model models/tiny.gguf --port 8000 &\n"
      "  moengine bench serve --base-url http://127.0.0.1:8000 --endpoint /v1/completions \\\n"
      "      --dataset random --input-len 128 --output-len 64 --num-prompts 32 --max-concurrency 4\n"
      "Each request streams (with usage); TTFT is to the first chunk with text, ITL the gaps between\n"
      "chunks, TPOT = (E2EL - TTFT) / (output tokens - 1), output tokens from the server's usage.\n"
      "Random prompts are token ids in [0, --vocab-size) on /v1/completions (exact input length) and\n"
      "space-separated common English words on the chat endpoint (one token each in real BPE vocabularies).\n"
      "generated-shared-prefix: --gsp-num-groups system prompts of random token ids, each request one of\n"
      "them (popularity by --gsp-zipf) followed by a question of its own, e.g. --dataset generated-shared-prefix\n"
      "--gsp-num-groups 8 --gsp-system-prompt-len 1024 --gsp-question-len 64 --gsp-question-range-ratio 0.5\n"
      "--gsp-long-question-len 1024 --gsp-long-question-fraction 0.1 --gsp-zipf 1.\n"
      "See docs/cli.md and docs/benchmarks.md.");
  cmd->add_option("--base-url", a->base_url, "Server to test")->capture_default_str();
  cmd->add_option("--endpoint", a->endpoint, "/v1/completions or /v1/chat/completions")->capture_default_str();
  cmd->add_option("--model", a->model, "Model name sent in requests (default: the first of GET /v1/models)");
  cmd->add_option("--api-key", a->api_key, "Sent as 'Authorization: Bearer KEY' (default: $OPENAI_API_KEY)");
  cmd->add_option("--dataset,--dataset-name", a->dataset, "random, sharegpt or generated-shared-prefix")
      ->capture_default_str();
  cmd->add_option("--dataset-path", a->dataset_path, "ShareGPT JSON file (for --dataset sharegpt)");
  cmd->add_option("--input-len,--random-input-len", a->input_len, "Prompt tokens (random)")->capture_default_str();
  a->output_len_opt =
      cmd->add_option("--output-len,--random-output-len,--gsp-output-len", a->output_len,
                      "max_tokens of each request (random, generated-shared-prefix; for sharegpt it replaces the "
                      "answer's length)")
          ->capture_default_str();
  cmd->add_option("--random-range-ratio", a->range_ratio,
                  "Draw each length uniformly from [len*(1-r), len*(1+r)] (random)")
      ->capture_default_str();
  cmd->add_option("--random-prompt", a->random_prompt,
                  "ids (token ids; /v1/completions only) or words (text) (default: ids on /v1/completions, "
                  "words on chat)")
      ->check(CLI::IsMember({"ids", "words"}));
  a->vocab_size_opt =
      cmd->add_option("--vocab-size", a->vocab_size,
                      "Random token ids are drawn from [0, N) (default: the --tokenizer's vocabulary, else 256, "
                      "valid in every byte-level vocabulary)");
  cmd->add_option("--gsp-num-groups", a->gsp_num_groups, "System prompts (generated-shared-prefix)")
      ->capture_default_str();
  cmd->add_option("--gsp-system-prompt-len", a->gsp_system_prompt_len,
                  "Tokens of each system prompt (generated-shared-prefix)")
      ->capture_default_str();
  cmd->add_option("--gsp-question-len", a->gsp_question_len,
                  "Tokens of each request's question after its system prompt (generated-shared-prefix)")
      ->capture_default_str();
  cmd->add_option("--gsp-question-range-ratio", a->gsp_question_range_ratio,
                  "Draw each question's length uniformly from [len*(1-r), len*(1+r)] (generated-shared-prefix)")
      ->capture_default_str();
  cmd->add_option("--gsp-long-question-len", a->gsp_long_question_len,
                  "Length of the long questions (generated-shared-prefix; same range ratio)")
      ->capture_default_str();
  cmd->add_option("--gsp-long-question-fraction", a->gsp_long_question_fraction,
                  "Fraction of requests with a long question (generated-shared-prefix)")
      ->capture_default_str();
  cmd->add_option("--gsp-zipf", a->gsp_zipf,
                  "Popularity skew: group g (0-based) gets a share 1/(g+1)^s of the requests; 0: all equal "
                  "(generated-shared-prefix)")
      ->capture_default_str();
  cmd->add_option("--tokenizer", a->tokenizer,
                  "tokenizer.json or GGUF of the served model: counts text prompt and answer tokens exactly "
                  "(default: about 4 bytes per token)");
  cmd->add_option("--num-prompts,-n", a->num_prompts, "Requests to send")->capture_default_str();
  cmd->add_option("--request-rate", a->request_rate,
                  "Requests per second, Poisson arrivals (see --burstiness), or inf: all at once")
      ->capture_default_str();
  cmd->add_option("--burstiness", a->burstiness,
                  "Gamma shape of the arrival gaps: 1 is Poisson, < 1 burstier, > 1 more even")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", a->max_concurrency, "Most requests in flight at once (default: no limit)");
  cmd->add_option("--goodput", a->goodput,
                  "Service-level objectives in ms, e.g. --goodput ttft:500 tpot:50 e2el:5000; reports the rate and "
                  "fraction of requests meeting all of them");
  cmd->add_option("--percentiles,--metric-percentiles", a->percentiles,
                  "Comma-separated percentiles to report besides mean and median")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of the prompts and of the arrival times")->capture_default_str();
  a->ignore_eos_opt = cmd->add_flag("--ignore-eos,!--no-ignore-eos", a->ignore_eos,
                                    "Ask the server to generate max_tokens tokens regardless of end-of-sequence "
                                    "(default: off for sharegpt, else on)");
  cmd->add_option("--temperature", a->temperature, "Sampling temperature sent (0: greedy)")->capture_default_str();
  cmd->add_option("--extra-body", a->extra_body, "JSON object merged into every request body");
  cmd->add_option("--timeout", a->timeout_s, "Fail a request after this many seconds without data from the server")
      ->capture_default_str();
  cmd->add_option("--ready-timeout,--ready-check-timeout-sec", a->ready_timeout_s,
                  "Wait up to this many seconds for a server that is still starting")
      ->capture_default_str();
  cmd->add_option("--result-file", a->result_file, "Write the results as JSON to this file");
  cmd->add_flag("--json", a->json, "Print the results as JSON instead of the table");
  cmd->add_flag("--save-detailed", a->save_detailed,
                "Include per-request lists (lengths, TTFTs, ITLs, texts, errors) in the JSON");
  cmd->callback([a] { run(*a); });
}

}  // namespace moe::cli
