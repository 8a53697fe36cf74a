// Unit tests for what the conformance corpus cannot reach: a toy vocabulary whose merges
// are known by hand, every split behaviour, stray bytes, added-token stripping, streaming
// decode and stop strings.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_json_writer.h"
#include "tokenizer/utf8.h"

namespace moe {
namespace {

// 256 byte tokens, then merges "a b", "ab c", "Ġ a" and two added tokens.
TokenizerSpec toy_spec() {
  TokenizerSpec s;
  for (int b = 0; b < 256; ++b) s.tokens.push_back(bytes_to_byte_level(std::string(1, char(b))));
  auto merge = [&](const std::string& l, const std::string& r) {
    s.merges.emplace_back(l, r);
    s.tokens.push_back(l + r);
  };
  merge("a", "b");   // 256
  merge("ab", "c");  // 257
  merge("Ġ", "a");   // 258
  merge("b", "c");   // 259: ranks below "ab c", so "abc" is ab + c, not a + bc
  s.added.push_back({"<|end|>", 260, true});
  s.added.push_back({"<tool>", 261, false, true, true});
  s.tokens.push_back("<|end|>");
  s.tokens.push_back("<tool>");
  s.pre = pre_tokenizer_for_gguf("qwen2");
  s.eos_id = 260;
  return s;
}

TEST(Bpe, LowestRankMergesFirstAndLeftmostOnTies) {
  const Tokenizer t(toy_spec());
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{257}));
  EXPECT_EQ(t.encode("abab"), (std::vector<int32_t>{256, 256}));
  EXPECT_EQ(t.encode("bc"), (std::vector<int32_t>{259}));
  EXPECT_EQ(t.encode(" a"), (std::vector<int32_t>{258}));
  EXPECT_EQ(t.encode("xbc"), (std::vector<int32_t>{'x', 259}));
}

TEST(Bpe, MergeNamingAnUnknownTokenIsAnError) {
  TokenizerSpec s = toy_spec();
  s.merges.emplace_back("q", "zz");
  EXPECT_THROW(Tokenizer{std::move(s)}, Error);
}

TEST(Tokenizer, SpecialTokensAreParsedOnlyWhenAsked) {
  const Tokenizer t(toy_spec());
  EXPECT_EQ(t.encode("ab<|end|>"), (std::vector<int32_t>{256, 260}));
  const std::vector<int32_t> plain = t.encode("ab<|end|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 260), 0);
  EXPECT_EQ(t.decode(plain), "ab<|end|>");
  EXPECT_EQ(t.decode(t.encode("x<|end|>"), true), "x");
}

TEST(Tokenizer, AddedTokenStripsWhitespaceAroundIt) {
  const Tokenizer t(toy_spec());  // <tool> has lstrip and rstrip
  EXPECT_EQ(t.encode("ab  \n<tool> \t ab"), (std::vector<int32_t>{256, 261, 256}));
}

TEST(Tokenizer, StrayBytesEncodeAsByteTokensAndRoundTrip) {
  const Tokenizer t(toy_spec());
  const std::string bad = std::string("ab\xff") + "\xe4\xb8" + " a\x80";
  const std::vector<int32_t> ids = t.encode(bad);
  EXPECT_EQ(t.decode(ids), bad);
  EXPECT_EQ(ids.front(), 256);
  EXPECT_NE(std::find(ids.begin(), ids.end(), 0xff), ids.end());
}

TEST(Tokenizer, AddsBosOnlyWhenTheFileAsks) {
  TokenizerSpec s = toy_spec();
  s.bos_id = 260;
  EXPECT_EQ(Tokenizer(s).encode("ab", true), (std::vector<int32_t>{256}));
  s.add_bos = true;
  EXPECT_EQ(Tokenizer(s).encode("ab", true), (std::vector<int32_t>{260, 256}));
  EXPECT_EQ(Tokenizer(s).encode("ab", false), (std::vector<int32_t>{256}));
}

// Splits "a1b22c" on \d+ with each behaviour; the expected pieces are Hugging Face's.
std::vector<std::string> split_with(SplitBehavior b, bool invert = false) {
  PreTokenizerStep step;
  step.regex = "\\d+";
  step.behavior = b;
  step.invert = invert;
  PreTokenizer p({step});
  std::vector<std::string_view> words;
  std::deque<std::string> owned;
  p.split("a1b22c33", words, owned);
  return {words.begin(), words.end()};
}

TEST(PreTokenizer, SplitBehaviours) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split_with(SplitBehavior::Isolated), (V{"a", "1", "b", "22", "c", "33"}));
  EXPECT_EQ(split_with(SplitBehavior::Removed), (V{"a", "b", "c"}));
  EXPECT_EQ(split_with(SplitBehavior::MergedWithPrevious), (V{"a1", "b22", "c33"}));
  EXPECT_EQ(split_with(SplitBehavior::MergedWithNext), (V{"a", "1b", "22c", "33"}));
  EXPECT_EQ(split_with(SplitBehavior::Removed, true), (V{"1", "22", "33"}));
}

TEST(PreTokenizer, ContiguousJoinsAdjacentDelimiters) {
  PreTokenizerStep step;
  step.regex = "-";
  step.behavior = SplitBehavior::Contiguous;
  PreTokenizer p({step});
  std::vector<std::string_view> words;
  std::deque<std::string> owned;
  p.split("a--b-c", words, owned);
  EXPECT_EQ(std::vector<std::string>(words.begin(), words.end()), (std::vector<std::string>{"a", "--", "b", "-", "c"}));
}

TEST(PreTokenizer, ContractionsAreAsciiOnly) {
  // 'ſ' (U+017F) folds to 's' under Unicode case folding; the reference tokenizers keep
  // the contraction group ASCII-only, so "'ſ" is not a contraction.
  PreTokenizer p(pre_tokenizer_for_gguf("qwen2"));
  std::vector<std::string_view> words;
  std::deque<std::string> owned;
  p.split("it'S it\xc5\xbf", words, owned);
  EXPECT_EQ(std::vector<std::string>(words.begin(), words.end()),
            (std::vector<std::string>{"it", "'S", " it\xc5\xbf"}));
}

std::vector<std::string> words_of(const std::vector<PreTokenizerStep>& steps, std::string_view text) {
  PreTokenizer p(steps);
  std::vector<std::string_view> words;
  std::deque<std::string> owned;
  p.split(text, words, owned);
  return {words.begin(), words.end()};
}

TEST(PreTokenizer, DigitsSplitsEveryNumericCharacter) {
  // Hugging Face tests char::is_numeric: Arabic-Indic three and one half are digits too.
  PreTokenizerStep digits;
  digits.kind = PreTokenizerStep::Digits;
  using V = std::vector<std::string>;
  EXPECT_EQ(words_of({digits}, "a12\xd9\xa3" "b\xc2\xbd"), (V{"a", "12\xd9\xa3", "b", "\xc2\xbd"}));
  digits.individual_digits = true;
  EXPECT_EQ(words_of({digits}, "a12\xd9\xa3" "b\xc2\xbd"), (V{"a", "1", "2", "\xd9\xa3", "b", "\xc2\xbd"}));
}

TEST(PreTokenizer, DeepseekLlmGgufSplitsAsLlamaCppDoes) {
  // Newlines, letters with one space before them, punctuation, trailing whitespace, CJK,
  // then runs of digits (the models' files isolate each digit; llama.cpp does not).
  EXPECT_EQ(words_of(pre_tokenizer_for_gguf("deepseek-llm"), "Hello \xe4\xb8\x96\xe7\x95\x8c 123!\n  ok  "),
            (std::vector<std::string>{"Hello", " ", "\xe4\xb8\x96\xe7\x95\x8c", " ", "123", "!", "\n", " ", " ok", "  "}));
  EXPECT_EQ(words_of(pre_tokenizer_for_gguf("deepseek-coder"), "x=12;"), (std::vector<std::string>{"x", "=", "1", "2", ";"}));
}

TEST(PreTokenizer, EveryGgufNameCompilesAndIsRecognised) {
  EXPECT_EQ(gguf_pre_tokenizer_names(), "deepseek-v3, deepseek-llm, deepseek-coder, qwen2, llama-bpe, llama3, gpt-2, default");
  for (const char* name : {"deepseek-v3", "deepseek-llm", "deepseek-coder", "qwen2", "llama-bpe", "gpt-2", "default"}) {
    EXPECT_NO_THROW(PreTokenizer{pre_tokenizer_for_gguf(name)}) << name;
    EXPECT_EQ(gguf_name_for_pre_tokenizer(pre_tokenizer_for_gguf(name)), name);
  }
  EXPECT_EQ(gguf_name_for_pre_tokenizer(pre_tokenizer_for_gguf("llama3")), "llama-bpe");
  EXPECT_TRUE(gguf_pre_tokenizer("llama3").ignore_merges);
  EXPECT_FALSE(gguf_pre_tokenizer("deepseek-llm").ignore_merges);
}

TEST(PreTokenizer, UnknownGgufNameIsAnErrorListingTheKnownOnes) {
  try {
    pre_tokenizer_for_gguf("no-such-pre");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "tokenizer.ggml.pre 'no-such-pre' is not supported (supported: " + gguf_pre_tokenizer_names() + ")");
  }
}

TEST(TokenizerJson, DigitsStepIsWrittenAndReadBack) {
  TokenizerSpec s = toy_spec();
  PreTokenizerStep digits;
  digits.kind = PreTokenizerStep::Digits;
  digits.individual_digits = true;
  s.pre.insert(s.pre.begin(), digits);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("moe-digits-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  write_hf_tokenizer(s, dir.string());
  const TokenizerSpec back = read_hf_tokenizer_spec((dir / "tokenizer.json").string());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(back.pre, s.pre);
}

TEST(Utf8, IncompleteTail) {
  EXPECT_EQ(utf8_incomplete_tail("abc"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("a\xe4"), 1u);
  EXPECT_EQ(utf8_incomplete_tail("a\xe4\xb8"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("a\xe4\xb8\xad"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xf0\x9f\x98"), 3u);
  EXPECT_EQ(utf8_incomplete_tail("a\xed\xa0"), 0u);  // would be a surrogate: never completes
  EXPECT_EQ(utf8_incomplete_tail("a\x80"), 0u);
}

TEST(Utf8, SanitizeReplacesEachIllFormedSubsequence) {
  EXPECT_EQ(utf8_sanitize("a\xff" "b"), "a\xef\xbf\xbd" "b");
  EXPECT_EQ(utf8_sanitize("\xe4\xb8" "x"), "\xef\xbf\xbd" "x");  // one U+FFFD for the truncated pair
  EXPECT_EQ(utf8_sanitize("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");  // overlong: two
  EXPECT_EQ(utf8_sanitize("\xe4\xb8\xad"), "\xe4\xb8\xad");
}

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  const Tokenizer t(toy_spec());
  StreamDecoder d(t);
  // "中" is e4 b8 ad: three byte tokens.
  EXPECT_EQ(d.push(0xe4), "");
  EXPECT_EQ(d.push(0xb8), "");
  EXPECT_EQ(d.push(0xad), "\xe4\xb8\xad");
  EXPECT_EQ(d.push(256), "ab");
  EXPECT_EQ(d.push(260), "");  // special: no text
  EXPECT_EQ(d.push(0xf0), "");
  EXPECT_EQ(d.finish(), "\xef\xbf\xbd");
}

TEST(StopMatcher, StopStringSpanningPushes) {
  StopMatcher m({"</answer>", "STOP"});
  StopMatcher::Result r = m.push("The result </ans");
  EXPECT_EQ(r.text, "The result ");
  EXPECT_FALSE(r.stopped);
  r = m.push("wer> more");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(r.which, 0u);
  EXPECT_EQ(m.push("after").text, "");
}

TEST(StopMatcher, ReleasesTextThatTurnsOutNotToBeAStop) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("abc ST").text, "abc ");
  EXPECT_EQ(m.push("ART ST").text, "START ");
  EXPECT_EQ(m.finish(), "ST");
}

TEST(StopMatcher, EarliestStopWins) {
  StopMatcher m({"bc", "ab"});
  const StopMatcher::Result r = m.push("xabc");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "x");
  EXPECT_EQ(r.which, 1u);
}

}  // namespace
}  // namespace moe
