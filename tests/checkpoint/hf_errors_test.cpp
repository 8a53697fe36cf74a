// A broken Hugging Face checkpoint is a clear error naming the file and the tensor or
// field: unsupported architecture, corrupt shard header, missing shard, missing tensor,
// wrong shape, FP8 without its scales, a tensor the model does not use. MTP layers are
// skipped, not refused.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "hf_test_util.h"

namespace moe {
namespace {

using testing::rewrite_hf;
using testing::StEdit;

std::string error_of(const std::string& dir) {
  try {
    load_model(dir, WeightFormat{});
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded without error)";
}

const std::string& tiny_dir() {
  static const std::string dir = testing::write_hf(gen_preset(Arch::Deepseek2, "tiny"), "hf_err_base", StDtype::BF16);
  return dir;
}

nlohmann::json read_config(const std::string& dir) {
  std::ifstream in(dir + "/config.json");
  return nlohmann::json::parse(in);
}

void write_config(const std::string& dir, const nlohmann::json& j) { std::ofstream(dir + "/config.json") << j.dump(2); }

TEST(HfErrors, UnsupportedArchitectureNamesTheField) {
  const std::string dir = rewrite_hf(tiny_dir(), "hf_err_arch", [](StEdit&) {});
  nlohmann::json c = read_config(dir);
  c["architectures"] = {"LlamaForCausalLM"};
  write_config(dir, c);
  const std::string e = error_of(dir);
  EXPECT_NE(e.find("config.json: field 'architectures' ['LlamaForCausalLM'] is not supported"), std::string::npos) << e;
}

TEST(HfErrors, MissingConfigFieldIsNamed) {
  const std::string dir = rewrite_hf(tiny_dir(), "hf_err_field", [](StEdit&) {});
  nlohmann::json c = read_config(dir);
  c.erase("kv_lora_rank");
  write_config(dir, c);
  const std::string e = error_of(dir);
  EXPECT_NE(e.find("config.json: field 'kv_lora_rank' is missing"), std::string::npos) << e;
}

TEST(HfErrors, MissingTensorIsNamed) {
  const std::string dir = rewrite_hf(tiny_dir(), "hf_err_missing", [](StEdit& e) {
    if (e.name == "model.layers.1.mlp.experts.3.up_proj.weight") e.name.clear();
  });
  const std::string e = error_of(dir);
  EXPECT_NE(e.find("tensor 'model.layers.1.mlp.experts.3.up_proj.weight' is missing"), std::string::npos) << e;
}

TEST(HfErrors, WrongShapeNamesFileAndTensor) {
  const std::string dir = rewrite_hf(tiny_dir(), "hf_err_shape", [](StEdit& e) {
    if (e.name == "model.layers.0.self_attn.kv_a_proj_with_mqa.weight") e.shape = {e.shape[0] - 1, e.shape[1]};
  });
  const std::string e = error_of(dir);
  EXPECT_NE(e.find("model.safetensors: tensor 'model.layers.0.self_attn.kv_a_proj_with_mqa.weight' has shape [95, 256], "
                   "expected [96, 256]"),
            std::string::npos)
      << e;
}

TEST(HfErrors, UnknownTensorIsRefusedAndMtpLayersSkipped) {
  const std::string extra = rewrite_hf(tiny_dir(), "hf_err_extra", [](StEdit& e) {
    if (e.name == "model.norm.weight") e.copy_as = "model.final_norm.weight";
  });
  std::string e = error_of(extra);
  EXPECT_NE(e.find("tensor 'model.final_norm.weight'"), std::string::npos) << e;

  // An MTP layer numbered past the last one, as DeepSeek-V3 ships it.
  const std::string mtp = rewrite_hf(tiny_dir(), "hf_err_mtp", [](StEdit& e) {
    if (e.name.starts_with("model.layers.2.")) e.name.replace(0, 15, "model.layers.3.");
  });
  nlohmann::json c = read_config(mtp);
  c["num_hidden_layers"] = 2;
  c["num_nextn_predict_layers"] = 1;
  write_config(mtp, c);
  auto ck = open_hf_checkpoint(mtp);
  EXPECT_FALSE(ck->plan.skipped.empty());
  EXPECT_EQ(ck->model.config.n_layer, 2);
  EXPECT_NO_THROW(load_model(mtp, WeightFormat{}));
}

TEST(HfErrors, MissingShardAndCorruptHeaderNameTheFile) {
  const std::string dir = testing::write_hf(gen_preset(Arch::Deepseek2, "tiny"), "hf_err_shards", StDtype::BF16, 256 << 10);
  const std::string shard = dir + "/model-00002-of-" + [&] {
    for (const auto& f : std::filesystem::directory_iterator(dir)) {
      const std::string n = f.path().filename().string();
      if (n.starts_with("model-00001-of-")) return n.substr(15);
    }
    return std::string("?");
  }();
  ASSERT_TRUE(std::filesystem::exists(shard));
  std::filesystem::resize_file(shard, 20);
  std::string e = error_of(dir);
  EXPECT_NE(e.find(std::filesystem::path(shard).filename().string()), std::string::npos) << e;
  std::filesystem::remove(shard);
  e = error_of(dir);
  EXPECT_NE(e.find(std::filesystem::path(shard).filename().string()), std::string::npos) << e;
}

TEST(HfErrors, Fp8WithoutScalesIsRefused) {
  const std::string fp8 = testing::write_hf(gen_preset(Arch::Deepseek2, "tiny"), "hf_err_fp8", StDtype::F8_E4M3);
  const std::string dir = rewrite_hf(fp8, "hf_err_fp8_noscale", [](StEdit& e) {
    if (e.name == "model.layers.0.mlp.down_proj.weight_scale_inv") e.name.clear();
  });
  const std::string e = error_of(dir);
  EXPECT_NE(e.find("tensor 'model.layers.0.mlp.down_proj.weight' is F8_E4M3 but its block scales "
                   "'model.layers.0.mlp.down_proj.weight_scale_inv' are missing"),
            std::string::npos)
      << e;
}

TEST(HfErrors, WeightTypeOnAGgufFileIsRefused) {
  const std::string gguf = testing::write_model(gen_preset(Arch::Deepseek2, "tiny"), "hf_err_gguf");
  try {
    load_model(gguf, parse_weight_format("q8_0"));
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--weight-type q8_0 applies to Hugging Face checkpoint directories"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_weight_format("q3_K"), Error);
}

}  // namespace
}  // namespace moe
