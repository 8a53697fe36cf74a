// The GGUF path: a model file carrying the real DeepSeek-V3 (or Qwen3) vocabulary, written
// the way llama.cpp's converter writes it, must tokenize exactly like the tokenizer.json
// it came from.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

#include "core/error.h"
#include "gguf_round_trip.h"
#include "js_reference.h"
#include "tokenizer/synthetic_vocab.h"

namespace moe {
namespace {

using test::GgufTokenizer;
using test::through_gguf;

// What spdlog's default logger writes while this is alive.
struct CapturedLog {
  std::ostringstream text;
  std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  CapturedLog() {
    spdlog::set_default_logger(
        std::make_shared<spdlog::logger>("captured", std::make_shared<spdlog::sinks::ostream_sink_st>(text)));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous); }
};

class GgufConformance : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufConformance, SameIdsAsTokenizerJson) {
  const std::string missing = test::reference_missing();
  ASSERT_TRUE(missing.empty()) << missing;
  const std::string package = GetParam();
  const TokenizerSpec spec = read_hf_tokenizer_spec(test::reference_model_dir(package) + "/tokenizer.json");
  const Tokenizer json_tok(spec);
  // DeepSeek-V3's files pad the vocabulary to the embedding size, 129280.
  const int64_t n_vocab = package == "tokenizer-deepseek_v3" ? 129280 : 0;
  const GgufVocab v = gguf_vocab_from_spec(spec, n_vocab);
  EXPECT_EQ(v.pre, package == "tokenizer-deepseek_v3" ? "deepseek-v3" : "qwen2");
  const GgufTokenizer g = through_gguf(v);
  EXPECT_EQ(g.tok.n_vocab(), n_vocab ? n_vocab : json_tok.n_vocab());
  EXPECT_EQ(g.tok.bos_id(), json_tok.bos_id());
  EXPECT_EQ(g.tok.eos_id(), json_tok.eos_id());
  EXPECT_EQ(g.tok.add_bos(), json_tok.add_bos());
  EXPECT_EQ(g.tok.chat_template(), json_tok.chat_template());

  const nlohmann::ordered_json corpus = test::run_reference("corpus")["corpus"];
  ASSERT_GE(corpus.size(), 2000u);
  size_t mismatches = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string s = corpus[i].get<std::string>();
    for (bool add_special : {false, true}) {
      const std::vector<int32_t> want = json_tok.encode(s, add_special), got = g.tok.encode(s, add_special);
      if (got != want && ++mismatches <= 5)
        ADD_FAILURE() << "string " << i << " " << nlohmann::json(s).dump() << "\n  tokenizer.json: " << nlohmann::json(want).dump()
                      << "\n  gguf:           " << nlohmann::json(got).dump();
    }
  }
  EXPECT_EQ(mismatches, 0u);
}

INSTANTIATE_TEST_SUITE_P(Models, GgufConformance, ::testing::Values("tokenizer-deepseek_v3", "tokenizer-qwen3"));

TEST(GgufVocab, TokenTypesFollowLlamaCppConverter) {
  const std::string missing = test::reference_missing();
  ASSERT_TRUE(missing.empty()) << missing;
  const TokenizerSpec ds = read_hf_tokenizer_spec(test::reference_model_dir("tokenizer-deepseek_v3") + "/tokenizer.json");
  const TokenizerSpec qwen = read_hf_tokenizer_spec(test::reference_model_dir("tokenizer-qwen3") + "/tokenizer.json");
  const GgufVocab v = gguf_vocab_from_spec(ds, 129280), q = gguf_vocab_from_spec(qwen);
  auto type_in = [](const GgufVocab& v, const std::string& t) {
    for (size_t i = 0; i < v.tokens.size(); ++i)
      if (v.tokens[i] == t) return v.token_types[i];
    return -1;
  };
  auto type_of = [&](const std::string& t) { return type_in(v, t); };
  EXPECT_EQ(type_of("<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"), kTokenControl);
  EXPECT_EQ(type_of("<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"), kTokenControl);  // non-special in the json, looks special
  EXPECT_EQ(type_in(q, "<think>"), kTokenUserDefined);  // non-special, plain looking
  EXPECT_EQ(type_in(q, "<|im_start|>"), kTokenControl);
  EXPECT_EQ(type_of("[PAD129279]"), kTokenUnused);
  EXPECT_EQ(type_of("\xc4\xa0t"), kTokenNormal);  // "Ġt"
}

TEST(GgufVocab, SyntheticVocabularyRoundTripsAnyText) {
  for (VocabFlavor flavor : {VocabFlavor::Deepseek, VocabFlavor::Qwen}) {
    const GgufTokenizer g = through_gguf(make_synthetic_vocab(2048, flavor));
    const std::string text = "Hello world, the experts route tokens \xe4\xb8\xad\xe6\x96\x87 123456 \xf0\x9f\x98\x80\n\t end";
    const std::vector<int32_t> ids = g.tok.encode(text);
    EXPECT_LT(ids.size(), text.size());  // merges apply
    EXPECT_EQ(g.tok.decode(ids), text);
  }
}

TEST(GgufVocab, MissingOrBadKeysAreErrorsNamingTheKey) {
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "llama");
  std::vector<uint8_t> bytes = w.to_bytes();
  try {
    tokenizer_spec_from_gguf(GgufFile("m.gguf", bytes.data(), bytes.size()));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model"), std::string::npos) << e.what();
  }
}

TEST(GgufVocab, UnknownPreTokenizerIsAnErrorListingTheSupportedOnes) {
  GgufVocab v = make_synthetic_vocab(300, VocabFlavor::Qwen);
  v.pre = "mystery";
  try {
    through_gguf(v, "m.gguf");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* part : {"m.gguf", "tokenizer.ggml.pre 'mystery'", "deepseek-v3", "deepseek-llm", "deepseek-coder",
                             "qwen2", "llama-bpe", "llama3", "gpt-2", "default"})
      EXPECT_NE(what.find(part), std::string::npos) << part << " is not in: " << what;
  }
}

TEST(GgufVocab, MissingPreTokenizerIsLlamaCppDefaultWithAWarning) {
  GgufVocab v = make_synthetic_vocab(300, VocabFlavor::Qwen);
  v.pre = "";
  CapturedLog log;
  const GgufTokenizer g = through_gguf(v, "old.gguf");
  EXPECT_EQ(g.tok.spec().pre, pre_tokenizer_for_gguf("default"));
  EXPECT_NE(log.text.str().find("old.gguf: tokenizer.ggml.pre is missing"), std::string::npos) << log.text.str();
  EXPECT_NE(log.text.str().find("'default'"), std::string::npos) << log.text.str();
}

}  // namespace
}  // namespace moe
