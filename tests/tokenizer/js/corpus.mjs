// Deterministic test corpus for the tokenizer conformance test and benchmark: the same
// seed always gives the same strings, on any machine, so nothing is downloaded.
//
// Three code points are never generated: U+0085 and U+180E (PCRE2, which moengine uses,
// counts them as \s; JavaScript does not) and U+FEFF (JavaScript counts it as \s; PCRE2
// and Hugging Face's Oniguruma do not). The reference and moengine would split text
// around them differently for reasons that are not the tokenizer's. Likewise only code
// points assigned by Unicode 14 (PCRE2 10.42's tables) are used.

// Small fast PRNG (mulberry32): deterministic, no dependency.
export function rng(seed) {
  let s = seed >>> 0;
  const next = () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n) => Math.floor(next() * n);
  const pick = (a) => a[int(a.length)];
  return { next, int, pick };
}

const range = (lo, hi) => Array.from({ length: hi - lo + 1 }, (_, i) => String.fromCodePoint(lo + i));

const EN_WORDS = (
  "the of and to in is that for it as was with be by on not he this are or his from at which but have an had " +
  "they you were their one all we can her has there been if more when will would who so no model expert tokens " +
  "serving request cache prefix decode prefill batch engine layer attention latent memory bandwidth kernel thread " +
  "Hello World What How Why Where question answer language large small fast slow time people year day way thing " +
  "DeepSeek Qwen MoE GPU CPU API JSON HTTP URL iPhone McDonald's O'Neil naïve café résumé coöperate façade"
).split(" ");
const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'LL", "'D", "'x"];
const PUNCT = [".", ",", "!", "?", ";", ":", "...", "—", "–", "-", "(", ")", "[", "]", "{", "}", '"', "'", "“", "”", "‘", "’", "«", "»", "/", "\\", "@", "#", "$", "%", "^", "&", "*", "+", "=", "<", ">", "|", "~", "`", "_"];
const ZH = range(0x4e00, 0x4e00 + 400).concat(range(0x7684, 0x7684 + 50), range(0x9f00, 0x9fa5), range(0x9fa6, 0x9fb0), range(0x3400, 0x3410)).concat("，。！？、；：「」『』（）《》".split(""));
const JA = range(0x3041, 0x3096).concat(range(0x30a1, 0x30fa), ["ー", "・", "ゝ", "ゞ", "ヽ", "ヾ"], range(0x65e5, 0x65f0), range(0x672c, 0x6740));
const KO = range(0xac00, 0xac00 + 600).concat(range(0x3131, 0x318e), range(0x1100, 0x1112));
const OTHER_SCRIPTS = [
  range(0x0410, 0x044f), // Cyrillic
  range(0x0391, 0x03c9).filter((c) => c !== "\u03a2"), // Greek
  range(0x05d0, 0x05ea), // Hebrew
  range(0x0627, 0x064a).concat(range(0x064b, 0x0652)), // Arabic with marks
  range(0x0e01, 0x0e3a), // Thai
  range(0x0905, 0x0939).concat(range(0x093e, 0x094d)), // Devanagari with signs
  range(0x00c0, 0x00ff), // Latin-1 letters
  range(0x0100, 0x017e), // Latin Extended-A
];
const EMOJI = [
  "😀", "😂", "🥲", "🤖", "🚀", "🔥", "✨", "❤️", "👍", "👍🏽", "🇺🇸", "🇨🇳", "🇯🇵", "👨‍👩‍👧‍👦", "🧑‍💻", "🏳️‍🌈", "☕", "⭐", "✅", "❌",
  "🙏", "🎉", "💡", "📈", "🐍", "🦀", "©", "®", "™", "☺︎", "1️⃣", "#️⃣", "🫠",
];
const DIGITS = range(0x30, 0x39).concat(["٠", "١", "٢", "٣", "۴", "५", "০", "๓", "０", "１", "９", "²", "³", "½", "¼", "Ⅻ", "ⅷ", "①", "⑩", "𝟙", "𝟘"]);
const SPACES = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\n ", "\u00a0", "\u3000", "\u2003", "\u2009", "\u202f", "\u000b", "\u000c", "\u2028"];
const ODD = [
  "\u0000", "\u0001", "\u0007", "\u001b", "\u007f", "\ufffd", "\u200b", "\u200c", "\u200d", "\u2060", "\u200e", "\u200f", "\u202e", "\u2066",
  "\u0301", "\u0308", "\u20dd", "\ue000", "\uf8ff", "\ufffc", "\ufff0", "\u{10ffff}", "\u{1f3fb}", "\u{e0041}", "\u{1d400}", "\u{1d7d8}",
  "\u{20000}", "\u{2a6d6}", "\u00ad", "\u034f", "\u061c", "\u2062", "\ufe0f", "\ufe0e",
];
const DEEPSEEK_SPECIALS = [
  "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>",
  "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>",
  "<｜tool▁outputs▁end｜>", "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<｜▁pad▁｜>", "<think>", "</think>",
];
const QWEN_SPECIALS = [
  "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|box_end|>", "<|vision_pad|>", "<tool_call>",
  "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
  "<think>", "</think>", "<tool_response>", "</tool_response>",
];
const BROKEN_SPECIALS = ["<|im_start", "im_end|>", "<|im_start |>", "<｜User", "User｜>", "<｜begin of sentence｜>", "<|IM_START|>", "<<|im_end|>>", "<｜<｜User｜>｜>", "</think", "<think >"];
const CODE = [
  "#include <vector>\nint main() {\n    std::vector<int> v{1, 2, 3};\n    for (auto& x : v) x *= 2;\n    return 0;\n}\n",
  "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
  "const f = async (x) => { await sleep(10); return x?.y ?? 0; };\n",
  '{"role": "user", "content": "hi", "tool_calls": [{"id": "call_1", "type": "function"}]}',
  "<div class=\"row\">\n\t<span>&nbsp;&lt;tag&gt;</span>\n</div>",
  "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%an%' ORDER BY id DESC;",
  "fn main() {\n    let s: &str = \"héllo\";\n    println!(\"{s:?} {}\", s.len());\n}",
  "x = [i**2 for i in range(10) if i % 3 == 0]  # squares\r\n",
  "    \t  mixed indentation\n\t\tline\n",
  "a+=b;c-=d;e*=f;g/=h;i%=j;k<<=1;l>>=2;m&&n||!o",
  "https://example.com/path/to/page?query=1&lang=en#section-2",
  "user@example.org, +1 (555) 123-4567, 2024-05-17T12:34:56Z",
  "$ ./configure --prefix=/usr/local && make -j8 && sudo make install",
  "\\begin{equation} E = mc^2 \\end{equation}",
];

function number(r) {
  const len = 1 + r.int(r.next() < 0.2 ? 60 : 8);
  let s = "";
  for (let i = 0; i < len; i++) s += String.fromCharCode(48 + r.int(10));
  const forms = [s, `${s}.${r.int(1000)}`, `-${s}`, `${s}%`, `$${s}`, `${s}e-${r.int(20)}`, `0x${r.int(1 << 30).toString(16)}`, s.replace(/\B(?=(\d{3})+(?!\d))/g, ",")];
  return r.pick(forms);
}

function words(r, pool, n, sep) {
  const out = [];
  for (let i = 0; i < n; i++) {
    let w = r.pick(pool);
    if (pool === EN_WORDS && r.next() < 0.15) w = w[0].toUpperCase() + w.slice(1);
    if (pool === EN_WORDS && r.next() < 0.08) w += r.pick(CONTRACTIONS);
    out.push(w);
    if (r.next() < 0.12) out.push(r.pick(PUNCT));
  }
  return out.join(sep);
}

function chars(r, pool, n) {
  let s = "";
  for (let i = 0; i < n; i++) s += r.pick(pool);
  return s;
}

// One fragment of a given kind; the corpus strings are fragments and mixes of them.
const KINDS = {
  english: (r) => words(r, EN_WORDS, 1 + r.int(25), " ") + r.pick([".", "!", "?", "", "\n"]),
  chinese: (r) => chars(r, ZH, 1 + r.int(40)),
  japanese: (r) => chars(r, JA, 1 + r.int(40)),
  korean: (r) => words(r, [chars(r, KO, 2), chars(r, KO, 3), chars(r, KO, 1), chars(r, KO, 4)], 1 + r.int(12), " "),
  script: (r) => chars(r, r.pick(OTHER_SCRIPTS), 1 + r.int(30)),
  code: (r) => r.pick(CODE),
  emoji: (r) => chars(r, EMOJI.concat([" ", "a", "中"]), 1 + r.int(12)),
  number: (r) => words(r, [number(r), number(r), r.pick(DIGITS), chars(r, DIGITS, 1 + r.int(9))], 1 + r.int(6), r.pick([" ", "", ",", "\n"])),
  whitespace: (r) => chars(r, SPACES.concat(["x", "."]), 1 + r.int(20)),
  special_ds: (r) => r.pick(DEEPSEEK_SPECIALS) + words(r, EN_WORDS, r.int(4), " ") + r.pick(DEEPSEEK_SPECIALS),
  special_qwen: (r) => r.pick(QWEN_SPECIALS) + r.pick(["user\n", "assistant\n", "", " "]) + words(r, EN_WORDS, r.int(4), " ") + r.pick(QWEN_SPECIALS),
  broken: (r) => r.pick(BROKEN_SPECIALS) + r.pick(["", " ", "x", "\n"]),
  odd: (r) => chars(r, ODD.concat(["a", "e", " ", "\n", "中"]), 1 + r.int(12)),
  decomposed: (r) => r.pick(["e\u0301", "a\u0308", "n\u0303", "\u1100\u1161\u11a8", "A\u030a", "\u0915\u093c", "o\u0302\u0323"]) + r.pick(["", "x", " "]),
  long_run: (r) => r.pick(["a", " ", "\n", "-", "=", "中", "😀", "1", "\t", "ab"]).repeat(50 + r.int(400)),
};
const KIND_NAMES = Object.keys(KINDS);

// count strings: every kind alone in turn, then mixes of 2 to 6 fragments.
export function makeCorpus(count, seed = 20240517) {
  const r = rng(seed);
  const out = ["", " ", "\n", "a", "Hello, world!", "你好，世界", "こんにちは世界", "안녕하세요 세계"];
  while (out.length < count) {
    const i = out.length;
    if (i % 3 === 0) {
      out.push(KINDS[KIND_NAMES[i % KIND_NAMES.length]](r));
    } else {
      const n = 2 + r.int(5);
      let s = "";
      for (let k = 0; k < n; k++) s += KINDS[r.pick(KIND_NAMES)](r) + r.pick(["", " ", "\n", ""]);
      out.push(s);
    }
  }
  return out;
}

// A large mixed text of about `bytes` UTF-8 bytes, for the benchmark: mostly English and
// code, with Chinese, other scripts, numbers and whitespace, like a chat workload.
export function makeBenchText(bytes, seed = 7) {
  const r = rng(seed);
  const weights = [["english", 40], ["code", 15], ["chinese", 12], ["japanese", 4], ["korean", 3], ["script", 6], ["number", 8], ["whitespace", 4], ["emoji", 3], ["special_qwen", 1], ["special_ds", 1]];
  const total = weights.reduce((a, [, w]) => a + w, 0);
  const parts = [];
  let size = 0;
  while (size < bytes) {
    let x = r.int(total), kind = weights[0][0];
    for (const [k, w] of weights) {
      if (x < w) { kind = k; break; }
      x -= w;
    }
    const s = KINDS[kind](r) + r.pick([" ", "\n", " ", "\n\n"]);
    parts.push(s);
    size += Buffer.byteLength(s);
  }
  return parts.join("");
}
