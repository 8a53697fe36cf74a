#include "tokenizer/tokenizer_json_writer.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace moe {
namespace {

using nlohmann::ordered_json;

std::string_view behavior_name(SplitBehavior b) {
  switch (b) {
    case SplitBehavior::Removed: return "Removed";
    case SplitBehavior::Isolated: return "Isolated";
    case SplitBehavior::MergedWithPrevious: return "MergedWithPrevious";
    case SplitBehavior::MergedWithNext: return "MergedWithNext";
    case SplitBehavior::Contiguous: return "Contiguous";
  }
  return "Isolated";
}

std::string_view form_name(NormalForm f) {
  switch (f) {
    case NormalForm::NFC: return "NFC";
    case NormalForm::NFD: return "NFD";
    case NormalForm::NFKC: return "NFKC";
    case NormalForm::NFKD: return "NFKD";
  }
  return "NFC";
}

ordered_json normalizer(const std::vector<NormalForm>& forms) {
  if (forms.empty()) return nullptr;
  if (forms.size() == 1) return {{"type", form_name(forms[0])}};
  ordered_json list = ordered_json::array();
  for (NormalForm f : forms) list.push_back({{"type", form_name(f)}});
  return {{"type", "Sequence"}, {"normalizers", list}};
}

ordered_json pre_tokenizer(const std::vector<PreTokenizerStep>& steps) {
  ordered_json list = ordered_json::array();
  for (const PreTokenizerStep& s : steps) {
    if (s.kind == PreTokenizerStep::Split) {
      list.push_back({{"type", "Split"},
                      {"pattern", {{"Regex", s.regex}}},
                      {"behavior", behavior_name(s.behavior)},
                      {"invert", s.invert}});
    } else if (s.kind == PreTokenizerStep::Digits) {
      list.push_back({{"type", "Digits"}, {"individual_digits", s.individual_digits}});
    } else {
      list.push_back({{"type", "ByteLevel"},
                      {"add_prefix_space", s.add_prefix_space},
                      {"trim_offsets", true},
                      {"use_regex", s.use_regex}});
    }
  }
  return {{"type", "Sequence"}, {"pretokenizers", list}};
}

void write_json(const std::filesystem::path& path, const ordered_json& j) {
  const std::string tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << j.dump(2) << '\n';
    if (!out) fail("{}: cannot write", tmp);
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace

void write_hf_tokenizer(const TokenizerSpec& spec, const std::string& dir) {
  std::vector<bool> added(spec.tokens.size(), false);
  ordered_json added_tokens = ordered_json::array();
  for (const AddedToken& t : spec.added) {
    if (t.id >= 0 && size_t(t.id) < added.size()) added[size_t(t.id)] = true;
    added_tokens.push_back({{"id", t.id},
                            {"content", t.content},
                            {"single_word", false},
                            {"lstrip", t.lstrip},
                            {"rstrip", t.rstrip},
                            {"normalized", t.normalized},
                            {"special", t.special}});
  }
  ordered_json vocab = ordered_json::object();
  for (size_t i = 0; i < spec.tokens.size(); ++i)
    if (!added[i] && !spec.tokens[i].empty()) vocab[spec.tokens[i]] = i;
  ordered_json merges = ordered_json::array();
  for (const auto& [l, r] : spec.merges) merges.push_back({l, r});

  ordered_json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added_tokens},
      {"normalizer", normalizer(spec.normalizer)},
      {"pre_tokenizer", pre_tokenizer(spec.pre)},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", spec.ignore_merges},
        {"vocab", vocab},
        {"merges", merges}}},
  };
  auto text = [&](int32_t id) -> ordered_json {
    if (id < 0 || size_t(id) >= spec.tokens.size()) return nullptr;
    return spec.tokens[size_t(id)];
  };
  ordered_json config = {
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"add_bos_token", spec.add_bos},
      {"add_eos_token", spec.add_eos},
      {"bos_token", text(spec.bos_id)},
      {"eos_token", text(spec.eos_id)},
      {"pad_token", text(spec.pad_id)},
      {"clean_up_tokenization_spaces", false},
  };
  if (!spec.chat_template.empty()) config["chat_template"] = spec.chat_template;
  write_json(std::filesystem::path(dir) / "tokenizer.json", tok);
  write_json(std::filesystem::path(dir) / "tokenizer_config.json", config);
}

}  // namespace moe
