// Every GGUF tokenizer.ggml.pre name moengine reads, against the JavaScript reference. For
// each name the reference writes a tokenizer.json: DeepSeek-V3's vocabulary under that
// name's pre-tokenizer, as the models' own files spell it. moengine must give the
// reference's ids for it on the corpus, must name it as llama.cpp's converter does, and the
// GGUF file it converts to must give the ids of llama.cpp's rules for that name.
#include <gtest/gtest.h>

#include <filesystem>

#include "gguf_round_trip.h"
#include "js_reference.h"

namespace moe {
namespace {

struct Case {
  const char* gguf_pre;   // written to tokenizer.ggml.pre; "" writes no key
  const char* reference;  // the reference's name whose files and ids apply
  const char* label;
};

class PreTokenizerConformance : public ::testing::TestWithParam<Case> {
 protected:
  static void SetUpTestSuite() {
    if (!test::reference_missing().empty()) return;
    const char* tmp = std::getenv("MOENGINE_TEST_TMP");
    dir_ = new std::string((std::filesystem::path(tmp ? tmp : std::filesystem::temp_directory_path().string()) /
                            "tokenizer-reference-pre")
                               .string());
    reference_ = new nlohmann::ordered_json(test::run_reference("pre", "'" + *dir_ + "'"));
  }
  static void TearDownTestSuite() {
    delete reference_;
    delete dir_;
    reference_ = nullptr;
    dir_ = nullptr;
  }
  static nlohmann::ordered_json* reference_;
  static std::string* dir_;
};

nlohmann::ordered_json* PreTokenizerConformance::reference_ = nullptr;
std::string* PreTokenizerConformance::dir_ = nullptr;

void expect_ids(const Tokenizer& tok, const nlohmann::ordered_json& corpus, const nlohmann::ordered_json& ids,
                const std::string& what) {
  ASSERT_GE(corpus.size(), 2000u);
  ASSERT_EQ(ids.size(), corpus.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string s = corpus[i].get<std::string>();
    const std::vector<int32_t> want = ids[i].get<std::vector<int32_t>>(), got = tok.encode(s);
    if (got != want && ++mismatches <= 5)
      ADD_FAILURE() << what << ", string " << i << " " << nlohmann::json(s).dump()
                    << "\n  reference: " << nlohmann::json(want).dump() << "\n  moengine:  " << nlohmann::json(got).dump();
  }
  EXPECT_EQ(mismatches, 0u) << what << ": of " << corpus.size() << " strings";
}

TEST_P(PreTokenizerConformance, TokenizerJsonAndGgufGiveReferenceIds) {
  const std::string missing = test::reference_missing();
  ASSERT_TRUE(missing.empty()) << missing;
  ASSERT_NE(reference_, nullptr);
  const Case& c = GetParam();
  const nlohmann::ordered_json& corpus = (*reference_)["corpus"];
  const nlohmann::ordered_json& ref = (*reference_)["names"][c.reference];
  ASSERT_TRUE(ref.contains("ids")) << "the reference has no pre-tokenizer '" << c.reference << "'";

  const TokenizerSpec spec = read_hf_tokenizer_spec(*dir_ + "/" + c.reference + "/tokenizer.json");
  EXPECT_EQ(gguf_name_for_pre_tokenizer(spec.pre), c.reference);
  expect_ids(Tokenizer(spec), corpus, ref["ids"], std::string(c.reference) + " tokenizer.json");

  GgufVocab v = gguf_vocab_from_spec(spec);
  v.pre = c.gguf_pre;
  const test::GgufTokenizer g = test::through_gguf(v);
  EXPECT_EQ(g.tok.spec().pre, pre_tokenizer_for_gguf(c.gguf_pre[0] ? c.gguf_pre : "default"));
  expect_ids(g.tok, corpus, ref.contains("gguf_ids") ? ref["gguf_ids"] : ref["ids"],
             std::string("GGUF with tokenizer.ggml.pre = '") + c.gguf_pre + "'");
}

INSTANTIATE_TEST_SUITE_P(Names, PreTokenizerConformance,
                         ::testing::Values(Case{"deepseek-v3", "deepseek-v3", "deepseek_v3"},
                                           Case{"deepseek-llm", "deepseek-llm", "deepseek_llm"},
                                           Case{"deepseek-coder", "deepseek-coder", "deepseek_coder"},
                                           Case{"qwen2", "qwen2", "qwen2"}, Case{"llama-bpe", "llama-bpe", "llama_bpe"},
                                           Case{"llama3", "llama-bpe", "llama3"}, Case{"gpt-2", "gpt-2", "gpt_2"},
                                           Case{"default", "default", "default"},
                                           // A file without the key is read with llama.cpp's default rules.
                                           Case{"", "default", "missing"}),
                         [](const auto& info) { return std::string(info.param.label); });

}  // namespace
}  // namespace moe
