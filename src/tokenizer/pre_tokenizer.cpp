#include "tokenizer/pre_tokenizer.h"

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace moe {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// The patterns below are those of the models' tokenizer.json files, byte for byte, so a
// file's pre-tokenizer can be recognised by comparing strings.
const char* const kDeepseekV3Patterns[] = {
    R"(\p{N}{1,3})",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

PreTokenizerStep split_step(const char* pattern) {
  PreTokenizerStep s;
  s.regex = pattern;
  return s;
}

PreTokenizerStep byte_level_step() {
  PreTokenizerStep s;
  s.kind = PreTokenizerStep::ByteLevel;
  return s;
}

// PCRE2 with Unicode properties folds case beyond ASCII ('ſ' matches 's'); llama.cpp and
// transformers.js both read the contraction group as ASCII-only, so it is spelled out.
std::string ascii_contractions(std::string pattern) {
  static const std::string from = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  static const std::string to = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
  for (size_t at = pattern.find(from); at != std::string::npos; at = pattern.find(from, at + to.size()))
    pattern.replace(at, from.size(), to);
  return pattern;
}

}  // namespace

std::vector<PreTokenizerStep> pre_tokenizer_for_gguf(std::string_view name) {
  if (name == "deepseek-v3") {
    std::vector<PreTokenizerStep> s;
    for (const char* p : kDeepseekV3Patterns) s.push_back(split_step(p));
    s.push_back(byte_level_step());
    return s;
  }
  if (name == "qwen2") return {split_step(kQwen2Pattern), byte_level_step()};
  if (name == "llama-bpe" || name == "llama3") return {split_step(kLlama3Pattern), byte_level_step()};
  if (name == "gpt-2" || name == "default") return {split_step(kGpt2Pattern), byte_level_step()};
  fail("tokenizer.ggml.pre '{}' is not supported (deepseek-v3, qwen2, llama-bpe, gpt-2, default)", name);
}

std::string gguf_name_for_pre_tokenizer(const std::vector<PreTokenizerStep>& steps) {
  auto same = [](const std::vector<PreTokenizerStep>& a, const std::vector<PreTokenizerStep>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i].kind != b[i].kind || a[i].regex != b[i].regex || a[i].invert != b[i].invert ||
          a[i].behavior != b[i].behavior || a[i].add_prefix_space != b[i].add_prefix_space ||
          a[i].use_regex != b[i].use_regex)
        return false;
    }
    return true;
  };
  for (const char* name : {"deepseek-v3", "qwen2", "llama-bpe", "gpt-2"})
    if (same(steps, pre_tokenizer_for_gguf(name))) return name;
  // GPT-2 files say it the short way: one ByteLevel step that applies its own regex.
  if (steps.size() == 1 && steps[0].kind == PreTokenizerStep::ByteLevel && steps[0].use_regex &&
      !steps[0].add_prefix_space)
    return "gpt-2";
  return "";
}

PreTokenizer::PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {
  for (const PreTokenizerStep& s : steps_) {
    if (s.kind == PreTokenizerStep::Split) regexes_.push_back(std::make_unique<Regex>(ascii_contractions(s.regex)));
    else if (s.use_regex) regexes_.push_back(std::make_unique<Regex>(kGpt2Pattern));
    else regexes_.push_back(nullptr);
  }
}

void PreTokenizer::apply_split(const Regex& re, const PreTokenizerStep& step, std::string_view piece,
                               std::vector<std::string_view>& out) const {
  // Cut the piece into alternating matched / unmatched runs; with invert the unmatched
  // runs are the delimiters, otherwise the matches are.
  struct Run {
    size_t begin, end;
    bool delimiter;
  };
  std::vector<Run> runs;
  size_t pos = 0, search = 0, b = 0, e = 0;
  while (search <= piece.size() && re.find(piece, search, b, e)) {
    if (e == b) {  // an empty match splits nothing; step over one code point
      const size_t len = b < piece.size() ? std::max<size_t>(1, utf8_sequence_length(piece, b)) : 1;
      search = b + len;
      continue;
    }
    if (b > pos) runs.push_back({pos, b, step.invert});
    runs.push_back({b, e, !step.invert});
    pos = search = e;
  }
  if (pos < piece.size()) runs.push_back({pos, piece.size(), step.invert});

  auto emit = [&](size_t begin, size_t end) {
    if (end > begin) out.push_back(piece.substr(begin, end - begin));
  };
  switch (step.behavior) {
    case SplitBehavior::Isolated:
      for (const Run& r : runs) emit(r.begin, r.end);
      break;
    case SplitBehavior::Removed:
      for (const Run& r : runs)
        if (!r.delimiter) emit(r.begin, r.end);
      break;
    case SplitBehavior::MergedWithPrevious:
    case SplitBehavior::MergedWithNext: {
      // A delimiter joins the content run before it (or after it); two delimiters in a
      // row do not join each other.
      const bool with_previous = step.behavior == SplitBehavior::MergedWithPrevious;
      for (size_t i = 0; i < runs.size(); ++i) {
        const bool joins = i + 1 < runs.size() && runs[i].delimiter != with_previous && runs[i + 1].delimiter == with_previous;
        if (joins) {
          emit(runs[i].begin, runs[i + 1].end);
          ++i;
        } else {
          emit(runs[i].begin, runs[i].end);
        }
      }
      break;
    }
    case SplitBehavior::Contiguous: {
      size_t i = 0;
      while (i < runs.size()) {
        size_t j = i + 1;
        if (runs[i].delimiter)
          while (j < runs.size() && runs[j].delimiter) ++j;
        emit(runs[i].begin, runs[j - 1].end);
        i = j;
      }
      break;
    }
  }
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& out,
                         std::deque<std::string>& owned) const {
  std::vector<std::string_view> cur{text}, next;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const PreTokenizerStep& step = steps_[s];
    next.clear();
    for (std::string_view piece : cur) {
      if (step.kind == PreTokenizerStep::ByteLevel && step.add_prefix_space && !piece.starts_with(' ')) {
        std::string& w = owned.emplace_back(1, ' ');
        w.append(piece);
        piece = owned.back();
      }
      if (regexes_[s]) apply_split(*regexes_[s], step, piece, next);
      else next.push_back(piece);
    }
    cur.swap(next);
  }
  out.insert(out.end(), cur.begin(), cur.end());
}

}  // namespace moe
