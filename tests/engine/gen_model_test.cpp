#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <string>

#include "model/gguf.h"
#include "model/model.h"
#include "test_models.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/gguf_vocab.h"

namespace moe {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

TEST(GenModel, SameSeedSameBytesOtherSeedOtherBytes) {
  GenSpec spec = gen_preset(Arch::Deepseek2, "tiny");
  spec.type = GgmlType::Q4_K;
  const std::string a = read_all(testing::write_model(spec, "det_a"));
  const std::string b = read_all(testing::write_model(spec, "det_b"));
  spec.seed = 7;
  const std::string c = read_all(testing::write_model(spec, "det_c"));
  ASSERT_GT(a.size(), 100000u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
}

TEST(GenModel, MidPresetHasTheIssuedShape) {
  const GenSpec g = gen_preset(Arch::Deepseek2, "mid");
  EXPECT_EQ(g.n_embd, 2048);
  EXPECT_EQ(g.n_layer, 16);
  EXPECT_EQ(g.n_dense_lead, 1);
  EXPECT_EQ(g.n_head, 16);
  EXPECT_EQ(g.q_lora_rank, 768);
  EXPECT_EQ(g.kv_lora_rank, 512);
  EXPECT_EQ(g.qk_rope_dim, 64);
  EXPECT_EQ(g.qk_nope_dim, 128);
  EXPECT_EQ(g.v_head_dim, 128);
  EXPECT_EQ(g.n_experts, 64);
  EXPECT_EQ(g.n_used, 6);
  EXPECT_EQ(g.n_shared_experts, 2);
  EXPECT_EQ(g.n_ff_expert, 384);
  const double total = double(gen_parameter_count(g, false)) / 1e9;
  const double active = double(gen_parameter_count(g, true)) / 1e9;
  EXPECT_NEAR(total, 2.6, 0.15);
  EXPECT_NEAR(active, 0.5, 0.1);
}

TEST(GenModel, TypesFallBackWhereTheBlockDoesNotDivideTheRow) {
  GenSpec g = gen_preset(Arch::Deepseek2, "tiny");
  g.type = GgmlType::Q4_K;
  EXPECT_EQ(gen_tensor_type(g, "blk.1.ffn_gate_exps.weight", 256), GgmlType::Q4_K);
  EXPECT_EQ(gen_tensor_type(g, "blk.1.ffn_down_exps.weight", 128), GgmlType::Q5_0);
  EXPECT_EQ(gen_tensor_type(g, "blk.1.attn_norm.weight", 256), GgmlType::F32);
  EXPECT_EQ(gen_tensor_type(g, "blk.1.ffn_gate_inp.weight", 256), GgmlType::F32);
  g.type = GgmlType::Q5_K;
  EXPECT_EQ(gen_tensor_type(g, "blk.1.ffn_down_exps.weight", 128), GgmlType::Q5_1);
  g.type = GgmlType::Q6_K;
  EXPECT_EQ(gen_tensor_type(g, "blk.1.ffn_down_exps.weight", 128), GgmlType::Q8_0);
  g.type = GgmlType::Q5_1;
  EXPECT_EQ(gen_tensor_type(g, "blk.1.ffn_down_exps.weight", 128), GgmlType::Q5_1);
  EXPECT_EQ(gen_tensor_type(g, "blk.0.attn_k_b.weight", 16), GgmlType::F16);
  g.type = GgmlType::Q8_0;
  EXPECT_EQ(gen_tensor_type(g, "blk.0.attn_k_b.weight", 16), GgmlType::F16);
  g.q4_k_m = true;
  EXPECT_EQ(gen_tensor_type(g, "output.weight", 256), GgmlType::Q6_K);
  EXPECT_EQ(gen_tensor_type(g, "blk.1.ffn_up_exps.weight", 256), GgmlType::Q4_K);
}

TEST(GenModel, WrittenFileLoadsWithItsConfigAndVocabulary) {
  for (Arch arch : {Arch::Deepseek2, Arch::Qwen3Moe}) {
    const GenSpec g = gen_preset(arch, "tiny");
    auto model = Model::load(testing::write_model(g, arch == Arch::Deepseek2 ? "load_ds" : "load_qwen"));
    const ModelConfig& c = model->config();
    EXPECT_EQ(c.n_vocab, g.n_vocab);
    EXPECT_EQ(c.n_layer, g.n_layer);
    EXPECT_EQ(c.gating.n_experts, g.n_experts);
    EXPECT_EQ(c.gating.n_used, g.n_used);
    EXPECT_GE(c.eos_id, 256);
    const GgufArray* merges = model->file().get_array("tokenizer.ggml.merges");
    ASSERT_NE(merges, nullptr);
    EXPECT_GT(merges->size(), 100u);
    EXPECT_GT(model->active_bytes_per_token(), 0u);
    EXPECT_LT(model->active_bytes_per_token(), model->total_weight_bytes());
  }
}

// What bench model's roofline probe reads for a decoded token: the matrices whose bytes
// active_bytes_per_token() counts, with n_used distinct routed experts in every MoE layer,
// drawn anew each time. (Weights left in the file's pages, to find the experts there.)
TEST(GenModel, TokenMatricesAreTheBytesATokenReads) {
  for (Arch arch : {Arch::Deepseek2, Arch::Qwen3Moe}) {
    const GenSpec g = gen_preset(arch, "tiny");
    ::setenv("MOENGINE_REGROUP", "0", 1);
    auto model = Model::load(testing::write_model(g, arch == Arch::Deepseek2 ? "load_ds" : "load_qwen"));
    ::unsetenv("MOENGINE_REGROUP");
    const ModelConfig& c = model->config();
    std::mt19937 rng(5);
    std::vector<std::set<const void*>> draws;
    for (int draw = 0; draw < 2; ++draw) {
      const std::vector<QMatrix> ms = model->token_matrices(rng);
      uint64_t bytes = 0;
      for (const QMatrix& m : ms) bytes += uint64_t(m.rows) * m.row_stride;
      EXPECT_EQ(bytes, model->active_bytes_per_token()) << "draw " << draw;
      std::set<const void*> routed;
      for (int64_t l = 0; l < c.n_layer; ++l) {
        if (!c.is_moe_layer(l)) continue;
        for (const char* name : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
          const GgufTensorInfo* t = model->file().find_tensor("blk." + std::to_string(l) + "." + name + ".weight");
          ASSERT_NE(t, nullptr);
          const uint8_t* begin = model->file().tensor_data(*t);
          std::set<const void*> in_tensor;
          for (const QMatrix& m : ms) {
            const auto* p = static_cast<const uint8_t*>(m.data);
            if (p >= begin && p < begin + t->n_bytes) in_tensor.insert(p);
          }
          EXPECT_EQ(in_tensor.size(), size_t(c.gating.n_used)) << "layer " << l << " " << name;
          routed.insert(in_tensor.begin(), in_tensor.end());
        }
      }
      draws.push_back(routed);
    }
    EXPECT_NE(draws[0], draws[1]) << "two tokens drew the same experts in every layer";
  }
}

// The generated vocabulary carries its family's chat template, so a generated model serves
// /v1/chat/completions like a real one.
TEST(GenModel, VocabularyHasAChatTemplateOfItsFamily) {
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}, {"role": "user", "content": "?"}])");
  struct Case {
    Arch arch;
    const char* name;
    std::string expected;
  };
  for (const Case& c : {Case{Arch::Deepseek2, "tmpl_ds",
                             "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c><\xef\xbd\x9cUser\xef\xbd\x9c>Hi"
                             "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>Yo<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
                             "<\xef\xbd\x9cUser\xef\xbd\x9c>?<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"},
                        Case{Arch::Qwen3Moe, "tmpl_qwen",
                             "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nYo<|im_end|>\n<|im_start|>user\n?<|im_end|>\n"
                             "<|im_start|>assistant\n"}}) {
    const Tokenizer tok = load_tokenizer(testing::write_model(gen_preset(c.arch, "tiny"), c.name));
    ASSERT_FALSE(tok.chat_template().empty());
    const std::string bos = tok.bos_id() >= 0 ? tok.token_bytes(tok.bos_id()) : "";
    const std::string eos = tok.token_bytes(tok.eos_id());
    EXPECT_EQ(ChatTemplate(tok.chat_template()).render(chat_context(messages, true, bos, eos)), c.expected);
  }
}

}  // namespace
}  // namespace moe
