#include "tokenizer/synthetic_vocab.h"

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_set>

#include "core/error.h"

namespace moe {
namespace {

// Common English words and code fragments: their prefixes become tokens, so ordinary text
// encodes to a realistic number of tokens.
constexpr std::string_view kWords[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you",
    "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will",
    "would", "who", "so", "no", "model", "expert", "experts", "mixture", "token", "tokens", "serve",
    "serving", "request", "requests", "cache", "prefix", "decode", "prefill", "batch", "engine", "layer",
    "attention", "latent", "memory", "bandwidth", "compute", "kernel", "thread", "hello", "world", "what",
    "how", "why", "where", "question", "answer", "language", "large", "small", "fast", "slow", "time",
    "people", "year", "day", "way", "thing", "man", "woman", "child", "life", "work", "system", "number",
    "program", "problem", "data", "value", "result", "function", "return", "const", "struct", "class",
    "include", "namespace", "public", "private", "static", "void", "int", "float", "double", "string",
    "vector", "print", "import", "def", "self", "None", "True", "False", "while", "else", "elif", "then",
    "first", "second", "last", "new", "old", "good", "great", "right", "left", "high", "low", "open",
    "close", "start", "stop", "end", "begin", "read", "write", "file", "path", "name", "user", "assistant",
    "system", "message", "content", "role", "please", "thank", "thanks", "sorry", "yes", "okay", "because",
    "about", "after", "before", "under", "over", "between", "through", "during", "without", "within",
    "computer", "science", "learning", "network", "neural", "matrix", "vector", "tensor", "quantized",
    "weight", "weights", "router", "gate", "shared", "routed", "balance", "load", "device", "node",
};

constexpr std::string_view kSyllables[] = {
    "ka", "to", "ri", "ne", "mo", "sa", "lu", "pe", "di", "ro", "ma", "ti", "na", "le", "vo", "zu",
    "qua", "ber", "con", "dis", "ex", "tra", "ple", "men", "tion", "ing", "er", "est", "al", "ous",
};

struct Flavor {
  std::string_view pre;
  std::array<std::string_view, 4> specials;  // bos, eos, then two chat markers
  bool add_bos;
  std::string_view chat_template;  // the real family's turn layout, without system prompts or tools
};

Flavor flavor_of(VocabFlavor f) {
  if (f == VocabFlavor::Deepseek) {
    return {"deepseek-v3",
            {"<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
             "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "<\xef\xbd\x9cUser\xef\xbd\x9c>",
             "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"},
            true,
            "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
            "<\xef\xbd\x9cUser\xef\xbd\x9c>{{ message['content'] }}{% elif message['role'] == 'assistant' %}"
            "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>{{ message['content'] }}{{ eos_token }}{% else %}"
            "{{ message['content'] }}{% endif %}{% endfor %}{% if add_generation_prompt %}"
            "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>{% endif %}"};
  }
  return {"qwen2",
          {"<|endoftext|>", "<|im_end|>", "<|im_start|>", "<|endofprompt|>"},
          false,
          "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"};
}

// Byte-level spelling of a word, one element per byte.
std::vector<std::string> spell(std::string_view word) {
  std::vector<std::string> out;
  for (unsigned char ch : word) out.push_back(utf8_encode(byte_to_unicode(ch)));
  return out;
}

class Builder {
 public:
  Builder(SyntheticVocab& v, size_t limit) : v_(v), limit_(limit) {}
  bool full() const { return v_.tokens.size() >= limit_; }

  // Adds the merges that build `word` left to right, each prefix a token.
  void add_word(std::string_view word) {
    const std::vector<std::string> pieces = spell(word);
    std::string acc = pieces[0];
    for (size_t i = 1; i < pieces.size() && !full(); ++i) {
      std::string next = acc + pieces[i];
      if (known_.insert(next).second) {
        v_.merges.push_back(acc + " " + pieces[i]);
        v_.tokens.push_back(next);
        v_.token_types.push_back(1);
      }
      acc = std::move(next);
    }
  }

 private:
  SyntheticVocab& v_;
  size_t limit_;
  std::unordered_set<std::string> known_;
};

}  // namespace

SyntheticVocab make_synthetic_vocab(int64_t n_vocab, VocabFlavor flavor) {
  const Flavor f = flavor_of(flavor);
  const int64_t n_special = int64_t(f.specials.size());
  if (n_vocab < 256 + n_special) fail("vocabulary size {} is too small: it needs at least {}", n_vocab, 256 + n_special);
  SyntheticVocab v;
  v.pre = std::string(f.pre);
  v.add_bos = f.add_bos;
  v.chat_template = std::string(f.chat_template);
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(utf8_encode(byte_to_unicode(uint8_t(b))));
    v.token_types.push_back(1);
  }
  Builder builder(v, size_t(n_vocab - n_special));
  for (std::string_view w : kWords) {
    std::string spaced(1, ' ');
    builder.add_word(spaced.append(w));
    builder.add_word(w);
  }
  // Pseudo-words from syllables fill the rest, deterministically.
  uint64_t state = 0x9e3779b97f4a7c15ull;
  while (!builder.full()) {
    std::string word = " ";
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const int n_syl = 1 + int((state >> 33) % 4);
    for (int s = 0; s < n_syl; ++s) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      word += kSyllables[(state >> 33) % std::size(kSyllables)];
    }
    builder.add_word(word);
  }
  const int32_t first_special = int32_t(v.tokens.size());
  for (std::string_view s : f.specials) {
    v.tokens.emplace_back(s);
    v.token_types.push_back(3);
  }
  v.bos_id = first_special;
  v.eos_id = first_special + 1;
  return v;
}

}  // namespace moe
