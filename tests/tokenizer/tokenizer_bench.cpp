// Encode throughput of moengine's tokenizer against the JavaScript reference, measured in
// the same run on the same text (a generated mix of English, code, Chinese, Japanese,
// Korean, other scripts, numbers, whitespace and emoji), one line per encode call as a
// server sees requests. Usage: tokenizer_bench [MiB of text, default 4]
#include <chrono>
#include <cstdio>
#include <string_view>

#include "js_reference.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  const std::string mib = argc > 1 ? argv[1] : "4";
  const std::string missing = moe::test::reference_missing();
  if (!missing.empty()) {
    std::fprintf(stderr, "%s\n", missing.c_str());
    return 1;
  }
  std::fprintf(stderr, "running the JavaScript reference on %s MiB...\n", mib.c_str());
  const nlohmann::ordered_json ref = moe::test::run_reference("bench", mib);
  const std::string text = ref["text"].get<std::string>();
  std::vector<std::string_view> lines;
  for (size_t pos = 0;;) {
    const size_t nl = text.find('\n', pos);
    lines.push_back(std::string_view(text).substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  const double mb = double(text.size()) / 1e6;
  std::printf("text: %.2f MB, %zu lines\n", mb, lines.size());
  std::printf("%-12s %12s %12s %12s %12s %8s\n", "tokenizer", "tokens", "moengine", "reference", "ref tokens", "ratio");
  for (const auto& [key, package] : {std::pair{"deepseek_v3", "tokenizer-deepseek_v3"}, std::pair{"qwen3", "tokenizer-qwen3"}}) {
    const moe::Tokenizer tok = moe::load_hf_tokenizer(moe::test::reference_model_dir(package) + "/tokenizer.json");
    for (size_t i = 0; i < std::min<size_t>(2000, lines.size()); ++i) tok.encode(lines[i]);
    size_t tokens = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::string_view l : lines) tokens += tok.encode(l).size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto& r = ref["reference"][key];
    const double ours = mb / s, theirs = r["mb_per_s"].get<double>();
    std::printf("%-12s %12zu %9.1f MB/s %7.1f MB/s %12lld %7.1fx\n", key, tokens, ours, theirs, r["tokens"].get<long long>(),
                ours / theirs);
  }
  return 0;
}
