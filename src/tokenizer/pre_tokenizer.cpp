#include "tokenizer/pre_tokenizer.h"

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace moe {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

// The patterns below are spelled as the models' tokenizer.json files spell them, byte for
// byte, so a file's pre-tokenizer can be recognised by comparing strings; where llama.cpp
// reads a GGUF name with other rules, its own patterns are used for that name.
const char* const kDeepseekV3Patterns[] = {
    R"(\p{N}{1,3})",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
    "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

// DeepSeek LLM and V2 (deepseek-llm) split off, in turn: newlines; runs of cased letters
// (the class lists Unicode's Lu/Ll/Lt ranges, less a few scripts) and of ASCII, fullwidth
// and CJK punctuation, each with one whitespace before it; trailing whitespace; CJK and
// Hangul (U+0800..U+4E00 takes in most scripts between); then digits.
const char* const kDeepseekNewline = "[\r\n]";
const char* const kDeepseekLetters =
    "\\s?["
    "A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
    "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5"
    "\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA"
    "\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45"
    "\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE"
    "\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC"
    "\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
    "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3"
    "\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06"
    "\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3"
    "\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF"
    "\U0001E900-\U0001E943"
    "]+";
const char* const kDeepseekPunctuation = "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+";
const char* const kDeepseekTrailingSpace = "\\s+$";
const char* const kDeepseekCjk = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";

const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

PreTokenizerStep split_step(const char* pattern) {
  PreTokenizerStep s;
  s.regex = pattern;
  return s;
}

PreTokenizerStep byte_level_step(bool use_regex = false) {
  PreTokenizerStep s;
  s.kind = PreTokenizerStep::ByteLevel;
  s.use_regex = use_regex;
  return s;
}

PreTokenizerStep digits_step(bool individual) {
  PreTokenizerStep s;
  s.kind = PreTokenizerStep::Digits;
  s.individual_digits = individual;
  return s;
}

struct GgufEntry {
  GgufPreTokenizer gguf;
  // The models' tokenizer.json spelling where it is not llama.cpp's; it may split
  // differently (deepseek-llm's digits), and a file that has it converts to this name.
  std::vector<PreTokenizerStep> json;
};

// Every supported tokenizer.ggml.pre value, with llama.cpp's rules for it (llama-vocab.cpp:
// its regexes, then the byte-level mapping). The first name whose steps a tokenizer.json
// has is the one it converts to, so aliases come after their name.
std::vector<GgufEntry> make_gguf_table() {
  const PreTokenizerStep bytes = byte_level_step();
  std::vector<PreTokenizerStep> v3;
  for (const char* p : kDeepseekV3Patterns) v3.push_back(split_step(p));
  v3.push_back(bytes);

  // DeepSeek's files end with a Digits step that isolates each digit. llama.cpp splits a
  // deepseek-coder GGUF the same way (\p{N}) but a deepseek-llm one on runs of digits.
  auto then = [&](std::vector<PreTokenizerStep> head, PreTokenizerStep digits) {
    head.push_back(std::move(digits));
    head.push_back(bytes);
    return head;
  };
  const PreTokenizerStep newline = split_step(kDeepseekNewline), cjk = split_step(kDeepseekCjk);
  const std::vector<PreTokenizerStep> llm = {newline, split_step(kDeepseekLetters), split_step(kDeepseekPunctuation),
                                             split_step(kDeepseekTrailingSpace), cjk};
  const std::vector<PreTokenizerStep> coder = {newline, split_step(R"(\s?\p{L}+)"), split_step(R"(\s?\p{P}+)"), cjk};

  const std::vector<PreTokenizerStep> llama3 = {split_step(kLlama3Pattern), bytes};
  return {
      {{"deepseek-v3", v3}, {}},
      {{"deepseek-llm", then(llm, split_step(R"(\p{N}+)"))}, then(llm, digits_step(true))},
      {{"deepseek-coder", then(coder, split_step(R"(\p{N})"))}, then(coder, digits_step(true))},
      {{"qwen2", {split_step(kQwen2Pattern), bytes}}, {}},
      {{"llama-bpe", llama3, true}, {}},
      {{"llama3", llama3, true}, {}},
      // GPT-2's files say it the short way: one ByteLevel step that applies its own regex.
      {{"gpt-2", {split_step(kGpt2Pattern), bytes}}, {byte_level_step(true)}},
      // What llama.cpp uses for a file without tokenizer.ggml.pre; no model's file has it.
      {{"default",
        {split_step(R"([\p{P}\$\+<=>\^~\|]+)"),
         split_step(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))"),
         split_step(R"(\p{N}+)"), split_step("[0-9][0-9][0-9]"), bytes}},
       {}},
  };
}

const std::vector<GgufEntry>& gguf_table() {
  static const std::vector<GgufEntry> table = make_gguf_table();
  return table;
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

std::string gguf_pre_tokenizer_names() {
  std::string names;
  for (const GgufEntry& e : gguf_table()) names += (names.empty() ? "" : ", ") + e.gguf.name;
  return names;
}

const GgufPreTokenizer& gguf_pre_tokenizer(std::string_view name, std::string_view source) {
  for (const GgufEntry& e : gguf_table())
    if (e.gguf.name == name) return e.gguf;
  fail("{}tokenizer.ggml.pre '{}' is not supported (supported: {})", source.empty() ? "" : fmt::format("{}: ", source),
       name, gguf_pre_tokenizer_names());
}

std::vector<PreTokenizerStep> pre_tokenizer_for_gguf(std::string_view name) { return gguf_pre_tokenizer(name).steps; }

std::string gguf_name_for_pre_tokenizer(const std::vector<PreTokenizerStep>& steps) {
  for (const GgufEntry& e : gguf_table())
    if (steps == e.gguf.steps || (!e.json.empty() && steps == e.json)) return e.gguf.name;
  return "";
}

PreTokenizer::PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {
  for (const PreTokenizerStep& s : steps_) {
    if (s.kind == PreTokenizerStep::Split) {
      regexes_.push_back(std::make_unique<Regex>(ascii_contractions(s.regex)));
    } else if (s.kind == PreTokenizerStep::Digits) {
      // Hugging Face cuts where char::is_numeric holds, which is \p{N}: one digit at a time,
      // or whole runs; isolating these matches does the same.
      regexes_.push_back(std::make_unique<Regex>(s.individual_digits ? R"(\p{N})" : R"(\p{N}+)"));
    } else if (s.use_regex) {
      regexes_.push_back(std::make_unique<Regex>(kGpt2Pattern));
    } else {
      regexes_.push_back(nullptr);
    }
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
