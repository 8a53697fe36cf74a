#include "tokenizer/gguf_vocab.h"

#include <spdlog/spdlog.h>

#include "core/error.h"
#include "model/gguf.h"

namespace moe {
namespace {

// llama.cpp's converter marks added tokens that look like chat markers as control tokens
// even where tokenizer.json calls them non-special (DeepSeek-V3's tool-call markers).
bool looks_special(const std::string& t) {
  auto wrapped = [&](const std::string& open, const std::string& close) {
    return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
  };
  return wrapped("<|", "|>") || wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || t == "<pad>" || t == "<mask>";
}

}  // namespace

GgufVocab gguf_vocab_from_spec(const TokenizerSpec& spec, int64_t n_vocab) {
  GgufVocab v;
  v.pre = gguf_name_for_pre_tokenizer(spec.pre);
  if (v.pre.empty())
    fail("the tokenizer's pre-tokenizer is not one that GGUF names (tokenizer.ggml.pre: {})", gguf_pre_tokenizer_names());
  const size_t n = std::max<size_t>(spec.tokens.size(), size_t(std::max<int64_t>(n_vocab, 0)));
  if (n_vocab > 0 && size_t(n_vocab) < spec.tokens.size())
    fail("n_vocab {} is smaller than the tokenizer's {} tokens", n_vocab, spec.tokens.size());
  v.tokens.resize(n);
  v.token_types.assign(n, kTokenNormal);
  for (size_t i = 0; i < n; ++i) {
    if (i < spec.tokens.size() && !spec.tokens[i].empty()) {
      v.tokens[i] = spec.tokens[i];
    } else {
      v.tokens[i] = "[PAD" + std::to_string(i) + "]";
      v.token_types[i] = kTokenUnused;
    }
  }
  for (const AddedToken& t : spec.added)
    v.token_types[size_t(t.id)] = t.special || looks_special(t.content) ? kTokenControl : kTokenUserDefined;
  v.merges.reserve(spec.merges.size());
  for (const auto& [l, r] : spec.merges) {
    if (l.find(' ') != std::string::npos || r.find(' ') != std::string::npos)
      fail("merge '{}' + '{}' holds a space, which GGUF's \"left right\" merges cannot write", l, r);
    v.merges.push_back(l + " " + r);
  }
  v.bos_id = spec.bos_id;
  v.eos_id = spec.eos_id;
  v.eot_id = spec.eot_id;
  v.pad_id = spec.pad_id;
  v.add_bos = spec.add_bos;
  v.add_eos = spec.add_eos;
  v.chat_template = spec.chat_template;
  return v;
}

void write_gguf_vocab(GgufWriter& w, const GgufVocab& v) {
  w.set_string("tokenizer.ggml.model", "gpt2");
  if (!v.pre.empty()) w.set_string("tokenizer.ggml.pre", v.pre);
  w.set_array_string("tokenizer.ggml.tokens", v.tokens);
  w.set_array_i32("tokenizer.ggml.token_type", v.token_types);
  w.set_array_string("tokenizer.ggml.merges", v.merges);
  if (v.bos_id >= 0) w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(v.bos_id));
  if (v.eos_id >= 0) w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(v.eos_id));
  if (v.eot_id >= 0) w.set_u32("tokenizer.ggml.eot_token_id", uint32_t(v.eot_id));
  if (v.pad_id >= 0) w.set_u32("tokenizer.ggml.padding_token_id", uint32_t(v.pad_id));
  w.set_bool("tokenizer.ggml.add_bos_token", v.add_bos);
  w.set_bool("tokenizer.ggml.add_eos_token", v.add_eos);
  if (!v.chat_template.empty()) w.set_string("tokenizer.chat_template", v.chat_template);
}

TokenizerSpec tokenizer_spec_from_gguf(const GgufFile& f) {
  const std::string model = f.get_string("tokenizer.ggml.model").value_or("");
  if (model != "gpt2")
    fail("{}: tokenizer.ggml.model is '{}'; only byte-level BPE ('gpt2') is supported", f.path(), model);
  TokenizerSpec s;
  s.tokens = f.require_array("tokenizer.ggml.tokens").strings;
  if (s.tokens.empty()) fail("{}: tokenizer.ggml.tokens is empty or not an array of strings", f.path());
  const GgufArray* types = f.get_array("tokenizer.ggml.token_type");
  if (types && types->ints.size() != s.tokens.size())
    fail("{}: tokenizer.ggml.token_type has {} entries for {} tokens", f.path(), types->ints.size(), s.tokens.size());
  for (size_t i = 0; types && i < s.tokens.size(); ++i) {
    const int64_t t = types->ints[i];
    if (t == kTokenControl || t == kTokenUserDefined)
      s.added.push_back({s.tokens[i], int32_t(i), t == kTokenControl});
  }
  const GgufArray* merges = f.get_array("tokenizer.ggml.merges");
  if (!merges) fail("{}: tokenizer.ggml.merges is missing (needed for a BPE vocabulary)", f.path());
  s.merges.reserve(merges->strings.size());
  for (size_t i = 0; i < merges->strings.size(); ++i) {
    const std::string& m = merges->strings[i];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) fail("{}: tokenizer.ggml.merges[{}] '{}' is not \"left right\"", f.path(), i, m);
    s.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  std::string pre = f.get_string("tokenizer.ggml.pre").value_or("");
  if (pre.empty()) {
    // Files from converters older than tokenizer.ggml.pre; llama.cpp reads them this way too.
    spdlog::warn("{}: tokenizer.ggml.pre is missing; splitting text with llama.cpp's 'default' pre-tokenizer, "
                 "which may not be the model's own",
                 f.path());
    pre = "default";
  }
  const GgufPreTokenizer& p = gguf_pre_tokenizer(pre, f.path());
  s.pre = p.steps;
  s.ignore_merges = p.ignore_merges;
  if (pre == "qwen2") s.normalizer = {NormalForm::NFC};
  auto id = [&](const char* key) {
    const int64_t v = f.get_int(key).value_or(-1);
    if (v >= int64_t(s.tokens.size())) fail("{}: {} = {} is outside the vocabulary", f.path(), key, v);
    return int32_t(v);
  };
  s.bos_id = id("tokenizer.ggml.bos_token_id");
  s.eos_id = id("tokenizer.ggml.eos_token_id");
  s.eot_id = id("tokenizer.ggml.eot_token_id");
  s.pad_id = id("tokenizer.ggml.padding_token_id");
  s.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(false);
  s.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  s.chat_template = f.get_string("tokenizer.chat_template").value_or("");
  return s;
}

Tokenizer load_tokenizer(const std::string& path) {
  if (path.ends_with(".gguf")) {
    const GgufFile f(path);
    return Tokenizer(tokenizer_spec_from_gguf(f));
  }
  return load_hf_tokenizer(path);
}

}  // namespace moe
