// Reads a Hugging Face tokenizer.json (+ tokenizer_config.json) into a TokenizerSpec. Only
// what byte-level BPE files use is accepted; anything else is an error naming the field,
// because silently ignoring a step would give different ids.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace moe {
namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
}

struct Reader {
  const std::string& path;

  [[noreturn]] void bad(const std::string& field, const std::string& why) const { fail("{}: {}: {}", path, field, why); }

  const json& need(const json& j, const char* key, const std::string& where) const {
    if (!j.is_object() || !j.contains(key)) bad(where, fmt::format("missing \"{}\"", key));
    return j.at(key);
  }
  std::string str(const json& j, const std::string& where) const {
    if (!j.is_string()) bad(where, "expected a string");
    return j.get<std::string>();
  }
  bool flag(const json& j, const char* key, bool fallback) const {
    if (!j.contains(key) || j.at(key).is_null()) return fallback;
    if (!j.at(key).is_boolean()) bad(key, "expected true or false");
    return j.at(key).get<bool>();
  }

  std::vector<NormalForm> normalizer(const json& j, const std::string& where) const {
    if (j.is_null()) return {};
    const std::string type = str(need(j, "type", where), where + ".type");
    if (type == "Sequence") {
      std::vector<NormalForm> out;
      const json& list = need(j, "normalizers", where);
      for (size_t i = 0; i < list.size(); ++i) {
        auto sub = normalizer(list[i], fmt::format("{}.normalizers[{}]", where, i));
        out.insert(out.end(), sub.begin(), sub.end());
      }
      return out;
    }
    if (type == "NFC") return {NormalForm::NFC};
    if (type == "NFD") return {NormalForm::NFD};
    if (type == "NFKC") return {NormalForm::NFKC};
    if (type == "NFKD") return {NormalForm::NFKD};
    bad(where, fmt::format("normalizer type \"{}\" is not supported (NFC, NFD, NFKC, NFKD, Sequence)", type));
  }

  SplitBehavior behavior(const std::string& name, const std::string& where) const {
    if (name == "Isolated") return SplitBehavior::Isolated;
    if (name == "Removed") return SplitBehavior::Removed;
    if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
    if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
    if (name == "Contiguous") return SplitBehavior::Contiguous;
    bad(where, fmt::format("split behavior \"{}\" is not known", name));
  }

  void pre_tokenizer(const json& j, const std::string& where, std::vector<PreTokenizerStep>& out) const {
    if (j.is_null()) return;
    const std::string type = str(need(j, "type", where), where + ".type");
    if (type == "Sequence") {
      const json& list = need(j, "pretokenizers", where);
      for (size_t i = 0; i < list.size(); ++i) pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", where, i), out);
    } else if (type == "Split") {
      PreTokenizerStep s;
      const json& pattern = need(j, "pattern", where);
      if (pattern.contains("Regex")) {
        s.regex = str(pattern.at("Regex"), where + ".pattern.Regex");
      } else if (pattern.contains("String")) {
        // \Q..\E quotes everything but a literal "\E", which is itself split out.
        std::string lit = str(pattern.at("String"), where + ".pattern.String"), q = "\\Q";
        for (size_t at = 0, e; (e = lit.find("\\E", at)) != std::string::npos; at = e + 2)
          lit.replace(e, 2, "\\E\\\\E\\Q");
        s.regex = q + lit + "\\E";
      } else {
        bad(where + ".pattern", "expected Regex or String");
      }
      s.behavior = behavior(str(need(j, "behavior", where), where + ".behavior"), where + ".behavior");
      s.invert = flag(j, "invert", false);
      out.push_back(std::move(s));
    } else if (type == "Digits") {
      PreTokenizerStep s;
      s.kind = PreTokenizerStep::Digits;
      s.individual_digits = flag(j, "individual_digits", false);
      out.push_back(s);
    } else if (type == "ByteLevel") {
      PreTokenizerStep s;
      s.kind = PreTokenizerStep::ByteLevel;
      s.add_prefix_space = flag(j, "add_prefix_space", false);
      s.use_regex = flag(j, "use_regex", true);
      out.push_back(s);
    } else {
      bad(where, fmt::format("pre-tokenizer type \"{}\" is not supported (Sequence, Split, Digits, ByteLevel)", type));
    }
  }
};

// Special token text from tokenizer_config.json, which writes it as a string or as an
// AddedToken object.
std::string token_text(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

}  // namespace

TokenizerSpec read_hf_tokenizer_spec(const std::string& path) {
  const json root = read_json(path);
  const Reader r{path};
  TokenizerSpec spec;

  const json& model = r.need(root, "model", "tokenizer.json");
  if (model.contains("type") && r.str(model["type"], "model.type") != "BPE")
    r.bad("model.type", fmt::format("\"{}\" is not supported (only BPE)", model["type"].get<std::string>()));
  if (r.flag(model, "byte_fallback", false)) r.bad("model.byte_fallback", "byte fallback is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() && model[key] != "")
      r.bad(std::string("model.") + key, "subword affixes are not supported");
  if (model.contains("dropout") && !model["dropout"].is_null()) r.bad("model.dropout", "BPE dropout is not supported");
  spec.ignore_merges = r.flag(model, "ignore_merges", false);

  const json& vocab = r.need(model, "vocab", "model");
  if (!vocab.is_object()) r.bad("model.vocab", "expected an object of token -> id");
  for (const auto& [tok, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 24))
      r.bad("model.vocab", fmt::format("token '{}' has an invalid id", tok));
    const size_t i = size_t(id.get<int64_t>());
    if (i >= spec.tokens.size()) spec.tokens.resize(i + 1);
    spec.tokens[i] = tok;
  }
  const json& merges = r.need(model, "merges", "model");
  spec.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    // Older files write "left right"; newer ones ["left", "right"] (a token may hold a space).
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos) r.bad(fmt::format("model.merges[{}]", i), "expected \"left right\"");
      spec.merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      spec.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      r.bad(fmt::format("model.merges[{}]", i), "expected \"left right\" or [left, right]");
    }
  }

  if (root.contains("added_tokens")) {
    for (const json& a : root["added_tokens"]) {
      AddedToken t;
      t.content = r.str(r.need(a, "content", "added_tokens"), "added_tokens.content");
      const json& id = r.need(a, "id", "added_tokens");
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > (1 << 24))
        r.bad("added_tokens", fmt::format("'{}' has an invalid id", t.content));
      t.id = int32_t(id.get<int64_t>());
      t.special = r.flag(a, "special", false);
      t.lstrip = r.flag(a, "lstrip", false);
      t.rstrip = r.flag(a, "rstrip", false);
      t.normalized = r.flag(a, "normalized", !t.special);
      if (r.flag(a, "single_word", false))
        r.bad("added_tokens", fmt::format("'{}' is single_word, which is not supported", t.content));
      if (size_t(t.id) >= spec.tokens.size()) spec.tokens.resize(size_t(t.id) + 1);
      spec.tokens[size_t(t.id)] = t.content;
      spec.added.push_back(std::move(t));
    }
  }

  spec.normalizer = r.normalizer(root.value("normalizer", json()), "normalizer");
  r.pre_tokenizer(root.value("pre_tokenizer", json()), "pre_tokenizer", spec.pre);
  if (spec.pre.empty() || spec.pre.back().kind != PreTokenizerStep::ByteLevel)
    r.bad("pre_tokenizer", "a byte-level BPE tokenizer must end its pre-tokenizer with ByteLevel");
  if (root.contains("decoder") && !root["decoder"].is_null()) {
    const std::string type = r.str(r.need(root["decoder"], "type", "decoder"), "decoder.type");
    if (type != "ByteLevel") r.bad("decoder.type", fmt::format("\"{}\" is not supported (only ByteLevel)", type));
  }

  // A TemplateProcessing post-processor that starts with a special token adds it as BOS.
  const json post = root.value("post_processor", json());
  if (post.is_object() && post.value("type", "") == "TemplateProcessing" && post.contains("single")) {
    const json& first = post["single"].empty() ? json() : post["single"][0];
    if (first.is_object() && first.contains("SpecialToken")) {
      const std::string name = first["SpecialToken"].value("id", "");
      const json& ids = post["special_tokens"][name]["ids"];
      if (!ids.is_array() || ids.empty()) r.bad("post_processor.special_tokens", "'" + name + "' has no ids");
      spec.bos_id = ids[0].get<int32_t>();
      spec.add_bos = true;
    }
  }

  const std::filesystem::path config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  if (std::filesystem::exists(config)) {
    const json c = read_json(config.string());
    const Reader rc{config.string()};
    auto id_of = [&](const char* key) {
      const std::string text = token_text(c.value(key, json()));
      if (text.empty()) return int32_t(-1);
      for (const AddedToken& t : spec.added)
        if (t.content == text) return t.id;
      for (size_t i = 0; i < spec.tokens.size(); ++i)
        if (spec.tokens[i] == text) return int32_t(i);
      rc.bad(key, fmt::format("'{}' is not in the vocabulary", text));
    };
    if (int32_t bos = id_of("bos_token"); bos >= 0) spec.bos_id = bos;
    spec.eos_id = id_of("eos_token");
    spec.pad_id = id_of("pad_token");
    spec.add_bos = rc.flag(c, "add_bos_token", spec.add_bos);
    spec.add_eos = rc.flag(c, "add_eos_token", false);
    const json tmpl = c.value("chat_template", json());
    if (tmpl.is_string()) {
      spec.chat_template = tmpl.get<std::string>();
    } else if (tmpl.is_array()) {  // named templates: the default one is the chat template
      for (const json& t : tmpl)
        if (t.value("name", "") == "default") spec.chat_template = t.value("template", "");
    }
  }
  return spec;
}

Tokenizer load_hf_tokenizer(const std::string& path) { return Tokenizer(read_hf_tokenizer_spec(path)); }

}  // namespace moe
