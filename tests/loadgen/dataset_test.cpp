// Datasets: random prompts (token ids or words) and ShareGPT files, good and bad.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "loadgen/dataset.h"

namespace moe::loadgen {
namespace {

const std::string kFixture = std::string(LOADGEN_TEST_DATA) + "/sharegpt_small.json";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string write_temp(const std::string& name, const std::string& text) {
  const char* t = std::getenv("MOENGINE_TEST_TMP");
  const auto dir = std::filesystem::path(t ? t : "/tmp") / "loadgen";
  std::filesystem::create_directories(dir);
  const auto path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

size_t count_words(const std::string& s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++i) n += s[i] == ' ';
  return n;
}

TEST(RandomDataset, TokenIdPromptsHaveTheExactLengthAndStayInTheVocabulary) {
  RandomDatasetOptions o;
  o.num_prompts = 50;
  o.input_len = 37;
  o.output_len = 9;
  o.vocab_size = 100;
  o.seed = 5;
  const auto reqs = random_dataset(o);
  ASSERT_EQ(reqs.size(), 50u);
  std::set<int32_t> seen;
  for (const auto& r : reqs) {
    ASSERT_EQ(r.prompt_ids.size(), 37u);
    EXPECT_EQ(r.prompt_len, 37);
    EXPECT_EQ(r.output_len, 9);
    EXPECT_TRUE(r.prompt_text.empty());
    for (int32_t id : r.prompt_ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, 100);
      seen.insert(id);
    }
  }
  EXPECT_GT(seen.size(), 90u);  // 1850 draws cover nearly all of 100 ids
  EXPECT_NE(reqs[0].prompt_ids, reqs[1].prompt_ids);
  EXPECT_EQ(random_dataset(o)[3].prompt_ids, reqs[3].prompt_ids);
}

TEST(RandomDataset, WordPromptsHaveOneSpacePrefixedWordPerToken) {
  RandomDatasetOptions o;
  o.num_prompts = 3;
  o.input_len = 20;
  o.output_len = 4;
  o.token_ids = false;
  const auto reqs = random_dataset(o);
  for (const auto& r : reqs) {
    EXPECT_TRUE(r.prompt_ids.empty());
    EXPECT_EQ(count_words(r.prompt_text), 20u);
    EXPECT_EQ(r.prompt_text.front(), ' ');
    EXPECT_EQ(r.prompt_len, 20);
  }
  EXPECT_NE(reqs[0].prompt_text, reqs[1].prompt_text);
}

TEST(RandomDataset, RangeRatioKeepsLengthsInTheRange) {
  RandomDatasetOptions o;
  o.num_prompts = 200;
  o.input_len = 100;
  o.output_len = 10;
  o.range_ratio = 0.5;
  std::set<int64_t> lens;
  for (const auto& r : random_dataset(o)) {
    ASSERT_GE(r.prompt_len, 50);
    ASSERT_LE(r.prompt_len, 150);
    ASSERT_EQ(int64_t(r.prompt_ids.size()), r.prompt_len);
    ASSERT_GE(r.output_len, 5);
    ASSERT_LE(r.output_len, 15);
    lens.insert(r.prompt_len);
  }
  EXPECT_GT(lens.size(), 30u);
}

TEST(RandomDataset, RejectsBadLengths) {
  RandomDatasetOptions o;
  o.num_prompts = 1;
  o.output_len = 1;
  EXPECT_NE(error_of([&] { random_dataset(o); }).find("--input-len"), std::string::npos);
  o.input_len = 1;
  o.range_ratio = 1;
  EXPECT_NE(error_of([&] { random_dataset(o); }).find("--random-range-ratio"), std::string::npos);
}

TEST(ShareGpt, TakesTheFirstHumanTurnAndTheAnswerAfterIt) {
  ShareGptOptions o;
  o.num_prompts = 4;
  const ShareGptDataset d = load_sharegpt(kFixture, o);
  EXPECT_EQ(d.usable, 4u);  // plain, system-first, model-speaks-first, user-assistant-roles
  std::set<std::string> prompts;
  for (const auto& r : d.requests) {
    prompts.insert(r.prompt_text);
    EXPECT_EQ(r.prompt_len, estimate_tokens(r.prompt_text));
    EXPECT_TRUE(r.prompt_ids.empty());
  }
  EXPECT_EQ(prompts, (std::set<std::string>{"What is the capital of France, and why is it famous?",
                                            "Explain a hash table in one or two sentences, please.",
                                            "Write a haiku about autumn leaves falling slowly.",
                                            "List three prime numbers greater than ten, with a short note."}));
  for (const auto& r : d.requests) {
    if (r.prompt_text.starts_with("What is the capital")) {
      EXPECT_EQ(r.output_len, 18);  // 69 bytes of answer at 4 bytes per token, rounded up
    }
  }
}

TEST(ShareGpt, ATokenCounterAndAFixedOutputLength) {
  ShareGptOptions o;
  o.num_prompts = 5;
  o.output_len = 32;
  o.count_tokens = [](std::string_view s) { return int64_t(s.size()); };  // one token per byte
  const ShareGptDataset d = load_sharegpt(kFixture, o);
  // With a fixed output length the answer's length no longer filters: "answer-too-short"
  // counts; "Hi" stays under 4 tokens.
  EXPECT_EQ(d.usable, 5u);
  for (const auto& r : d.requests) {
    EXPECT_EQ(r.output_len, 32);
    EXPECT_EQ(r.prompt_len, int64_t(r.prompt_text.size()));
  }
}

TEST(ShareGpt, ShufflesBySeedAndRepeatsWhenAskedForMore) {
  ShareGptOptions o;
  o.num_prompts = 10;
  const auto a = load_sharegpt(kFixture, o).requests;
  ASSERT_EQ(a.size(), 10u);
  for (size_t i = 4; i < 10; ++i) EXPECT_EQ(a[i].prompt_text, a[i - 4].prompt_text);
  EXPECT_EQ(load_sharegpt(kFixture, o).requests[2].prompt_text, a[2].prompt_text);
  bool differs = false;
  for (uint64_t seed = 1; seed < 8 && !differs; ++seed) {
    o.seed = seed;
    const auto b = load_sharegpt(kFixture, o).requests;
    for (size_t i = 0; i < 4; ++i) differs |= b[i].prompt_text != a[i].prompt_text;
  }
  EXPECT_TRUE(differs);
}

TEST(ShareGpt, BadFilesGiveClearErrors) {
  ShareGptOptions o;
  o.num_prompts = 1;
  const std::string missing = error_of([&] { load_sharegpt("/nonexistent/sharegpt.json", o); });
  EXPECT_NE(missing.find("cannot read ShareGPT file '/nonexistent/sharegpt.json'"), std::string::npos) << missing;

  const std::string not_json = error_of([&] { load_sharegpt(write_temp("bad.json", "[{\"conversations\": ["), o); });
  EXPECT_NE(not_json.find("is not valid JSON"), std::string::npos) << not_json;

  const std::string object = error_of([&] { load_sharegpt(write_temp("object.json", "{\"data\": []}"), o); });
  EXPECT_NE(object.find("expected a JSON array of conversations at the top level, found a JSON object"),
            std::string::npos)
      << object;

  auto shape_error = [&](const char* json) {
    return error_of([&] { sharegpt_dataset(nlohmann::json::parse(json), "x.json", o); });
  };
  EXPECT_NE(shape_error("[1]").find("entry 0 is a JSON number"), std::string::npos);
  EXPECT_NE(shape_error(R"([{"conversations": {"from": "human"}}])").find("entry 0: 'conversations' must be an array"),
            std::string::npos);
  const std::string turn = shape_error(R"([{"conversations": []}, {"conversations": [{"from": "human"}]}])");
  EXPECT_NE(turn.find("entry 1, turn 0: expected an object with string fields 'from' and 'value'"), std::string::npos)
      << turn;
  const std::string none = shape_error(R"([{"conversations": [{"from": "gpt", "value": "only an answer here"}]}])");
  EXPECT_NE(none.find("'x.json' has no usable conversation among its 1 entries"), std::string::npos) << none;
}

}  // namespace
}  // namespace moe::loadgen
