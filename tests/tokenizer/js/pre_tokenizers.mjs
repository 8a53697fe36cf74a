// The pre-tokenizers of the GGUF tokenizer.ggml.pre names that moengine reads, as
// tokenizer.json pre_tokenizer objects, for the pre-tokenizer conformance test:
//   file      the models' own tokenizer.json spelling (DeepSeek-V3's and Qwen3's come from
//             the installed files; the others from the published files of deepseek-llm-7b /
//             DeepSeek-V2, deepseek-coder-6.7b, Llama 3 and GPT-2)
//   llamaCpp  where llama.cpp splits a GGUF file of that name by other rules, its regexes
//             (llama-vocab.cpp), which moengine follows for GGUF files
// and what else of the tokenizer goes with the name (Qwen's NFC, Llama 3's ignore_merges).
// "default" is llama.cpp's rule for files without tokenizer.ggml.pre; no model's file has it.

const split = (regex) => ({ type: "Split", pattern: { Regex: regex }, behavior: "Isolated", invert: false });
const byteLevel = (use_regex = false) => ({ type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex });
const sequence = (...pretokenizers) => ({ type: "Sequence", pretokenizers });
const DIGITS = { type: "Digits", individual_digits: true };

const NEWLINE = "[\r\n]";
// Unicode's cased letters (Lu, Ll, Lt), less a few scripts, as DeepSeek's file lists them.
const LETTERS =
  "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373" +
  "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f" +
  "\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77" +
  "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d" +
  "\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4" +
  "\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139" +
  "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d" +
  "\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a" +
  "\uff41-\uff5a\u{10400}-\u{1044f}\u{104b0}-\u{104d3}\u{104d8}-\u{104fb}\u{10c80}-\u{10cb2}\u{10cc0}-\u{10cf2}" +
  "\u{118a0}-\u{118df}\u{1e900}-\u{1e943}]+";
const PUNCTUATION = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+";
const CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+";
const LLM = [split(NEWLINE), split(LETTERS), split(PUNCTUATION), split("\\s+$"), split(CJK)];
const CODER = [split(NEWLINE), split("\\s?\\p{L}+"), split("\\s?\\p{P}+"), split(CJK)];

const LLAMA3 =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const LLAMA_CPP_GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";

// deepseekV3 and qwen3: the installed packages' tokenizer.json objects.
export function preTokenizers(deepseekV3, qwen3) {
  return {
    "deepseek-v3": { file: deepseekV3.pre_tokenizer },
    "deepseek-llm": {
      file: sequence(...LLM, DIGITS, byteLevel()),
      llamaCpp: sequence(...LLM, split("\\p{N}+"), byteLevel()),
    },
    // llama.cpp's \p{N} split isolates digits as the Digits step does.
    "deepseek-coder": { file: sequence(...CODER, DIGITS, byteLevel()) },
    qwen2: { file: qwen3.pre_tokenizer, normalizer: qwen3.normalizer },
    "llama-bpe": { file: sequence(split(LLAMA3), byteLevel()), ignoreMerges: true },
    "gpt-2": { file: byteLevel(true) },
    default: {
      file: sequence(
        split("[\\p{P}\\$\\+<=>\\^~\\|]+"),
        split(LLAMA_CPP_GPT2),
        split("\\p{N}+"),
        split("[0-9][0-9][0-9]"),
        byteLevel(),
      ),
    },
  };
}

// transformers.js's Digits tests JavaScript's \d, ASCII digits only; Hugging Face's tests
// char::is_numeric, every \p{N}. The same split spelled as a Split step gives the reference
// the Rust library's behaviour.
export function forTransformersJs(preTokenizer) {
  if (preTokenizer.type === "Digits") return split(preTokenizer.individual_digits ? "\\p{N}" : "\\p{N}+");
  if (preTokenizer.type === "Sequence") return sequence(...preTokenizer.pretokenizers.map(forTransformersJs));
  return preTokenizer;
}
